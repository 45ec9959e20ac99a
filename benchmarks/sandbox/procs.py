"""Start and stop the real servers the lab and the tests use.

One place for: finding a free port, waiting for a port to answer, starting a
process in its own process group (so one signal stops it and its children),
and stopping it for sure (TERM, then KILL); a command from the venv (`tool`),
the environment every process the lab starts gets (`child_env`), a command run
to completion into a log (`run_quiet`). Used by the lab runner and by the test
fixtures alike.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path

from benchmarks import stages
from benchmarks.stages import ROOT

VENV_BIN = Path(sys.executable).parent
# Every process the lab starts carries this variable with the lab's pid, so what a
# lab left behind can be told from what another lab (or a test) runs.
OWNER_ENV = "FTL_LAB_PID"


class ServiceError(RuntimeError):
    """A server could not be started; the message says what to do."""


def tool(name: str, bin_dir: Path = VENV_BIN) -> str:
    """A command from the venv when it has it (flask, gunicorn, locust), else as is."""
    candidate = bin_dir / name
    return str(candidate) if candidate.exists() else name


def environment_bin(name: str) -> Path:
    """The bin folder of server environment `name` (stages.ENVIRONMENTS): the running
    Python's own for the current one, so a venv made elsewhere works too."""
    if name == stages.CURRENT:
        return VENV_BIN
    return ROOT / stages.ENVIRONMENTS[name].venv / "bin"


def gunicorn_for(worker_class: str) -> str:
    """The gunicorn that runs this worker class (the tests' servers): eventlet's from
    .venv-eventlet, the others from the running venv."""
    return tool("gunicorn", environment_bin(stages.worker_environment(worker_class)))


def missing_environments(chosen) -> list[str]:
    """One line per server environment these stages need that `make setup` has not
    finished (its marker .installed is written last), with the command that makes it."""
    lines = []
    for name in dict.fromkeys(e for s in chosen for e in s.environments):
        env = stages.ENVIRONMENTS[name]
        if name == stages.CURRENT or (ROOT / env.venv / ".installed").exists():
            continue
        keys = ", ".join(s.key for s in chosen if name in s.environments)
        lines.append(f"stage(s) {keys} serve from the {name} environment ({env.venv}: "
                     f"{env.holds}), which is missing or unfinished. Make it: make setup "
                     f"(or: python3 -m venv {env.venv} && {env.venv}/bin/pip install -r "
                     f"{env.requirements} && touch {env.venv}/.installed)")
    return lines


def child_env(bin_dir: Path = VENV_BIN, **extra) -> dict:
    """The environment of a process the lab starts: `bin_dir` (a server environment's)
    first on PATH, the repository importable, the lab's pid as its owner."""
    env = dict(os.environ)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = str(ROOT)
    env[OWNER_ENV] = str(os.getpid())
    env.update({k: str(v) for k, v in extra.items()})
    return env


def run_quiet(cmd: list[str], env: dict, log: Path, timeout: float) -> int:
    """`cmd` with its output to `log`, in a session of its own: a terminal's Ctrl-C
    reaches the lab, which stops it, not the child."""
    with open(log, "ab") as out:
        try:
            return subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT,
                                  timeout=timeout, start_new_session=True).returncode
        except subprocess.TimeoutExpired:
            return -1


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now (the kernel picks it)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def port_is_taken(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
        return False


def require_binary(name: str, hint: str) -> str:
    """Path of an executable, or a ServiceError that says how to install it."""
    path = shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/bin:/sbin")
    if not path:
        raise ServiceError(f"{name} not found on PATH. {hint}")
    return path


def answers(url: str) -> bool:
    """A GET of `url` answers 200 within a second (a server that is up and serving)."""
    try:
        with urllib.request.urlopen(url, timeout=1) as response:
            return response.status == 200
    except OSError:
        return False


def serves(url: str) -> bool:
    """A GET of `url` gets an HTTP answer within a second, whatever its status (a 503
    from an app whose Redis is down is an answer: the server is serving)."""
    try:
        with urllib.request.urlopen(url, timeout=1):
            return True
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False


def wait_until_serving(url: str, proc: subprocess.Popen, timeout: float = 60.0) -> None:
    """Block until a GET of `url` gets an HTTP answer (`serves`). A server's port opens
    before it serves: gunicorn's master binds it, then each worker imports the app,
    which on an emulated or slow box takes seconds."""
    deadline = time.monotonic() + timeout
    while not serves(url):
        if proc.poll() is not None:
            raise ServiceError(f"process {proc.args!r} exited with {proc.returncode} "
                               f"before {url} answered")
        if time.monotonic() > deadline:
            raise ServiceError(f"{url} gave no HTTP answer within {timeout:g} s")
        time.sleep(0.1)


def wait_for_port(port: int, host: str = "127.0.0.1", timeout: float = 15.0,
                  proc: subprocess.Popen | None = None, netns: str | None = None) -> None:
    """Block until something accepts connections on host:port.

    With `netns`, the check runs inside that network namespace (the lab's
    servers listen on the namespace's own loopback).
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise ServiceError(f"process {proc.args!r} exited with {proc.returncode} "
                               f"before port {port} answered")
        if netns:
            ok = subprocess.run(
                ["ip", "netns", "exec", netns, "bash", "-c", f"exec 3<>/dev/tcp/{host}/{port}"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0
        else:
            try:
                with socket.create_connection((host, port), timeout=0.5):
                    ok = True
            except OSError:
                ok = False
        if ok:
            return
        time.sleep(0.1)
    raise ServiceError(f"nothing answered on {host}:{port} within {timeout:.0f}s")


def start(cmd: list[str], log: Path | None = None, env: dict | None = None,
          cwd: str | Path | None = None) -> subprocess.Popen:
    """Start `cmd` in a new session (own process group), output to `log`."""
    out = open(log, "ab") if log else subprocess.DEVNULL
    try:
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                                cwd=cwd, start_new_session=True)
    finally:
        if log:
            out.close()


def _signal(proc: subprocess.Popen, sig: int, leader_only: bool = False) -> None:
    try:
        os.kill(proc.pid, sig) if leader_only else os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass


def stop(proc: subprocess.Popen | None, timeout: float = 10.0,
         sig: int = signal.SIGTERM, leader_only: bool = False) -> None:
    """Stop a process started by `start` and everything in its group: `sig`, then
    after `timeout` s KILL to the whole group. With `leader_only`, `sig` goes to the
    group's leader alone, for a server that hands it on to its children itself."""
    if proc is None:
        return
    _signal(proc, sig, leader_only)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        pass
    _signal(proc, signal.SIGKILL)  # children that outlived their parent, or one that ignored sig
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


def stop_all(stopping: list[tuple[subprocess.Popen, int, bool]], timeout: float = 10.0) -> None:
    """`stop` several at once, each (process, signal, leader_only): each gets its signal
    first, then each is waited for, so their shutdowns overlap (gunicorn's eventlet worker
    alone takes a second)."""
    for proc, sig, leader_only in stopping:
        _signal(proc, sig, leader_only)
    for proc, sig, leader_only in stopping:
        stop(proc, timeout, sig, leader_only)


REDIS_HINT = ("Install it: `apt-get install redis-server` (Debian/Ubuntu, as root), "
              "or run `make setup`.")


def redis_command(port: int, workdir: Path, host: str = "127.0.0.1") -> list[str]:
    """A Redis of its own, listening on `host` only, its data in `workdir`.

    Protected mode (no password: loopback clients only) stays on for a
    loopback `host`. On a lab host's own address it would refuse the app host
    (`DENIED Redis is running in protected mode`), so it is off there: that
    address is on the lab's private bridge, which no real network reaches.

    Persistence is the append-only file, written before Redis answers each
    write and fsynced once a second (`appendfsync everysec`): a Redis that is
    killed or restarted loses nothing it acknowledged (only a crash of the
    whole machine can lose up to about a second). A restart on the same
    `workdir` loads it back. No RDB snapshots (`--save ""`): the AOF is enough,
    and a snapshot would fork a copy of Redis in the middle of a measurement.
    """
    exe = require_binary("redis-server", REDIS_HINT)
    loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    protected = "yes" if loopback else "no"
    return [exe, "--port", str(port), "--bind", host, "--save", "",
            "--appendonly", "yes", "--appendfsync", "everysec",
            "--dir", str(workdir), "--protected-mode", protected, "--daemonize", "no",
            "--loglevel", "warning"]


def wait_for_redis(port: int, host: str = "127.0.0.1", timeout: float = 15.0,
                   proc: subprocess.Popen | None = None) -> None:
    """Block until Redis answers PING with PONG. A Redis restarted on its folder
    accepts connections while it loads the append-only file and answers every
    command `-LOADING` until done (seconds under qemu-user): the port alone is
    not ready."""
    deadline = time.monotonic() + timeout
    wait_for_port(port, host, timeout, proc)
    reply = b""
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise ServiceError(f"Redis {proc.args!r} exited with {proc.returncode} "
                               f"before it answered PING")
        try:
            with socket.create_connection((host, port), timeout=1) as conn:
                conn.sendall(b"PING\r\n")
                reply = conn.recv(64)
        except OSError as e:
            reply = str(e).encode()
        if reply.startswith(b"+PONG"):
            return
        time.sleep(0.1)
    raise ServiceError(f"Redis on {host}:{port} did not answer PING within {timeout:.0f}s "
                       f"(last reply: {reply.strip()[:60]!r})")


@contextmanager
def redis_server(workdir: Path, port: int | None = None):
    """A real redis-server on a free loopback port, stopped on exit. Yields the port."""
    port = port or free_port()
    if port_is_taken(port):
        raise ServiceError(f"port {port} is taken; pick another or stop what listens there")
    workdir.mkdir(parents=True, exist_ok=True)
    proc = start(redis_command(port, workdir), log=workdir / "redis.log")
    try:
        wait_for_redis(port, proc=proc)
        yield port
    finally:
        stop(proc)
