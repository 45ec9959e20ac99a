"""The lab runner.

    python -m benchmarks.lab run [--stages all] [--duration 30] [--users 50]
    python -m benchmarks.lab up STAGE          # one stage, until Ctrl-C
    python -m benchmarks.lab exec -- CMD ...   # a command inside the running stage
    python -m benchmarks.lab list              # the stages (benchmarks/stages.py)
    python -m benchmarks.lab clean             # namespaces left by a killed lab

`run` takes each stage of benchmarks/stages.py through: sandbox up, Redis,
app server and Nginx up, seed users, verify the endpoints, warm up, measure
with Locust while the sampler records sockets and CPU, snapshot `ss`/`netstat`,
evaluate the stage's checks, tear down. Results go to results/<timestamp>/
(results/latest points at the newest run).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import secrets
import shlex
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from datetime import datetime
from importlib import metadata
from pathlib import Path
from urllib.parse import urlparse

from benchmarks import metrics, nginx_conf, procs, report, sandbox, stages
from benchmarks.stages import ROOT, Stage

VENV_BIN = Path(sys.executable).parent
RESULTS = ROOT / "results"
UP_STATE = RESULTS / "up.json"
LOCUSTFILE = "benchmarks/chat.py"
FRIENDS_PER_USER = 5


class StageFailed(RuntimeError):
    """A stage could not run (not: a check did not pass)."""


def say(message: str = "") -> None:
    print(message, flush=True)


def tool(name: str) -> str:
    """A command from the venv when it has it (flask, gunicorn, locust), else as is."""
    candidate = VENV_BIN / name
    return str(candidate) if candidate.exists() else name


def child_env(**extra) -> dict:
    env = dict(os.environ)
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = str(ROOT)
    env.update({k: str(v) for k, v in extra.items()})
    return env


class Stack:
    """The stage's servers (Redis, the app, Nginx), started in order, stopped in reverse."""

    def __init__(self, stage: Stage, box: sandbox.Sandbox, stage_dir: Path):
        self.stage, self.box, self.dir = stage, box, stage_dir
        self.procs: dict[str, subprocess.Popen] = {}
        self.secret = secrets.token_hex(16)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.box.entry_port}"

    def app_env(self) -> dict:
        # The lab measures connection handling, not the password hash: seeded users get
        # a cheap one, so their logins at the start of a run don't fill the latency tail
        # (the app's default, scrypt, costs tens of ms of CPU per login).
        return child_env(FLASK_REDIS_URL=f"redis://127.0.0.1:{self.box.redis_port}/0",
                         FLASK_SECRET_KEY=self.secret, FLASK_REDIS_MODE=self.stage.redis_mode,
                         FLASK_PASSWORD_HASH_METHOD="pbkdf2:sha256:1000", **self.stage.env)

    def _start(self, name: str, cmd: list[str], port: int, env: dict | None = None) -> None:
        proc = procs.start([*self.box.prefix(), *cmd], log=self.dir / f"{name}.log", env=env,
                           cwd=ROOT)
        self.procs[name] = proc
        try:
            procs.wait_for_port(port, proc=proc, timeout=30,
                                netns=self.box.name if self.box.mode == "netns" else None)
        except procs.ServiceError as e:
            log = (self.dir / f"{name}.log").read_text(errors="replace")[-2000:]
            raise StageFailed(f"{name} did not start: {e}\n--- {name}.log (end) ---\n{log}") from e

    def start(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        redis_dir = self.dir / "redis"
        redis_dir.mkdir(exist_ok=True)
        self._start("redis", procs.redis_command(self.box.redis_port, redis_dir),
                    self.box.redis_port)
        server = self.stage.server_command(self.box.app_port)
        self._start("app", [tool(server[0]), *server[1:]], self.box.app_port, self.app_env())
        self.wait_for_health(f"http://127.0.0.1:{self.box.app_port}/healthz")
        if self.stage.front:
            conf = nginx_conf.render(self.stage.front, self.dir / "nginx", self.box.app_port,
                                     self.box.front_port)
            checked = nginx_conf.check(conf, self.box.prefix())
            if checked.returncode != 0:
                raise StageFailed(f"nginx -t rejected {conf}:\n{checked.stderr}")
            self._start("nginx", nginx_conf.command(conf), self.box.front_port)

    def wait_for_health(self, url: str, timeout: float = 30) -> None:
        """Until the app answers /healthz 200: the port opens before the workers boot."""
        probe = ("import sys, time, urllib.request\n"
                 f"end = time.monotonic() + {timeout}\n"
                 "while time.monotonic() < end:\n"
                 "    try:\n"
                 "        if urllib.request.urlopen(sys.argv[1], timeout=2).status == 200:\n"
                 "            sys.exit(0)\n"
                 "    except OSError:\n"
                 "        time.sleep(0.2)\n"
                 "sys.exit(1)\n")
        code = subprocess.run([*self.box.prefix(), sys.executable, "-c", probe, url],
                              timeout=timeout + 10).returncode
        if code != 0:
            raise StageFailed(f"{url} did not answer 200 within {timeout:.0f}s; "
                              f"see {self.dir / 'app.log'}")

    def pids(self) -> dict[str, int]:
        return {name: p.pid for name, p in self.procs.items()}

    def stop(self) -> None:
        for name in reversed(list(self.procs)):
            procs.stop(self.procs.pop(name))


def run_quiet(cmd: list[str], env: dict, log: Path, timeout: float) -> int:
    with open(log, "ab") as out:
        try:
            return subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT,
                                  timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            return -1


def seed_users(stack: Stack, count: int) -> Path:
    out = stack.dir / "users.json"
    code = run_quiet([*stack.box.prefix(), tool("flask"), "--app", "app", "seed-users",
                      "--count", str(count), "--friends", str(FRIENDS_PER_USER), "--out", str(out)],
                     stack.app_env(), stack.dir / "seed.log", timeout=120)
    if code != 0 or not out.exists():
        raise StageFailed(f"seed-users failed (exit {code}); see {stack.dir / 'seed.log'}")
    return out


def verify(prefix: list[str], url: str, stage_dir: Path, users_file: Path | None) -> dict:
    out = stage_dir / "verify.json"
    cmd = [*prefix, sys.executable, "-m", "benchmarks.verify", url, "--json", str(out)]
    if users_file:
        cmd += ["--users-file", str(users_file)]
    code = run_quiet(cmd, child_env(), stage_dir / "verify.log", timeout=60)
    result = json.loads(out.read_text()) if out.exists() else {"ok": False}
    if code != 0 or not result.get("ok"):
        log = (stage_dir / "verify.log").read_text(errors="replace")[-2000:]
        raise StageFailed(f"the endpoints at {url} did not answer correctly:\n{log}")
    return result


def locust_command(url: str, users: int, spawn_rate: float, seconds: float, user_classes,
                   csv_prefix: Path | None, extra: list[str]) -> list[str]:
    cmd = [tool("locust"), "-f", LOCUSTFILE, "--headless", "-u", str(users), "-r",
           str(spawn_rate), "-t", f"{int(seconds)}s", "--host", url, "--only-summary",
           "--stop-timeout", "5"]
    if csv_prefix:
        cmd += ["--csv", str(csv_prefix)]
    return [*cmd, *extra, *user_classes]


def measure(prefix: list[str], url: str, stage_dir: Path, classes: dict[str, int],
            server_pids: dict[str, int], users_file: Path | None, args,
            user_classes, warmup_url: str | None = None) -> None:
    """Warm up, then the measured Locust run with the sampler beside it.

    The warm-up goes to `warmup_url` (the app itself, behind a proxy): TIME_WAIT
    lasts 60 s, and a warm-up through Nginx would use up stage 4's local ports
    before the measured window, hiding the moment they run out.
    """
    # the lab wants the server saturated: almost no think time between tasks
    env = child_env(CHAT_WAIT_MIN=0, CHAT_WAIT_MAX=args.wait_max,
                    **({"CHAT_USERS_FILE": users_file} if users_file else {}))
    extra = shlex.split(args.locust_args or "")
    if args.warmup > 0:
        say(f"  warm-up: {args.warmup:g} s against {warmup_url or url}")
        warm = locust_command(warmup_url or url, args.users, args.spawn_rate, args.warmup,
                              user_classes, None, extra)
        run_quiet([*prefix, *warm],
                  env, stage_dir / "locust-warmup.log", timeout=args.warmup + 60)
    cmd = [*prefix, *locust_command(url, args.users, args.spawn_rate, args.duration,
                                    user_classes, stage_dir / "locust", extra)]
    (stage_dir / "locust-command.txt").write_text(shlex.join(cmd[len(prefix):]) + "\n")
    say(f"  measuring {args.duration:g} s: {shlex.join(cmd[len(prefix):])}")
    locust = procs.start(cmd, log=stage_dir / "locust.log", env=env, cwd=ROOT)
    sampler_cmd = [*prefix, sys.executable, "-m", "benchmarks.sampler",
                   "--out", str(stage_dir / "sampler.csv"),
                   # stop just before Locust's users close their connections
                   "--duration", str(max(1.0, args.duration - 0.5))]
    for name, port in classes.items():
        sampler_cmd += ["--class", f"{name}={port}"]
    for name, pid in {**server_pids, "locust": locust.pid}.items():
        sampler_cmd += ["--proc", f"{name}={pid}"]
    sampler_proc = procs.start(sampler_cmd, log=stage_dir / "sampler.log", env=child_env(),
                               cwd=ROOT)
    try:
        deadline = time.monotonic() + args.duration + 60
        started, last = time.monotonic(), 0.0
        while locust.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
            if time.monotonic() - last >= 5:
                last = time.monotonic()
                say(f"  {time.monotonic() - started:5.0f} s  {progress_line(stage_dir)}")
        if locust.poll() is None:
            raise StageFailed(f"Locust did not stop by itself; see {stage_dir / 'locust.log'}")
        sampler_proc.wait(timeout=15)
    finally:
        procs.stop(locust)
        procs.stop(sampler_proc, sig=signal.SIGTERM)
    if not (stage_dir / "locust_stats.csv").exists():
        log = (stage_dir / "locust.log").read_text(errors="replace")[-2000:]
        raise StageFailed(f"Locust wrote no stats:\n{log}")
    run_quiet([*prefix, sys.executable, "-m", "benchmarks.sampler", "--snapshot", str(stage_dir)],
              child_env(), stage_dir / "sampler.log", timeout=120)


def progress_line(stage_dir: Path) -> str:
    """The sampler's latest row, in a few words."""
    path = stage_dir / "sampler.csv"
    if not path.exists():
        return "(sampler starting)"
    lines = path.read_text().splitlines()
    if len(lines) < 2:
        return "(sampler starting)"
    row = dict(zip(lines[0].split(","), lines[-1].split(","), strict=False))
    parts = [f"TIME_WAIT {row.get('tw_total', '?')}"]
    parts += [f"{k[3:]} {v}" for k, v in row.items()
              if k in ("tw_redis", "tw_upstream", "tw_front")]
    if row.get("cpu_locust"):
        parts.append(f"locust CPU {float(row['cpu_locust']):.0f}%")
    return ", ".join(parts)


def run_stage(stage: Stage, run_dir: Path, args) -> dict:
    """One stage, start to finish. Returns its metrics and checks."""
    stage_dir = run_dir / stage.dirname
    stage_dir.mkdir(parents=True)
    say(f"stage {stage.key} {stage.slug}: {stage.title}")
    with sandbox.Sandbox(stage, args.sandbox, args.apply_host_sysctls) as box:
        for note in box.notes:
            say(f"  note: {note}")
        stack = Stack(stage, box, stage_dir)
        try:
            stack.start()
            sysctls = box.sysctls()
            (stage_dir / "sysctl.json").write_text(json.dumps(sysctls, indent=2) + "\n")
            say(f"  up in {box.mode} {box.name if box.mode == 'netns' else ''}: {stack.url} "
                f"(tcp_tw_reuse={sysctls.get('net.ipv4.tcp_tw_reuse')}, "
                f"ports {sysctls.get('net.ipv4.ip_local_port_range')})")
            users_file = seed_users(stack, max(2 * args.users, 20))
            verified = verify(box.prefix(), stack.url, stage_dir, users_file)
            say(f"  verified: Connection: {verified.get('connection_header')}")
            classes = stage.connection_classes(box.redis_port, box.app_port, box.front_port)
            measure(box.prefix(), stack.url, stage_dir, classes, stack.pids(), users_file,
                    args, stage.users, warmup_url=f"http://127.0.0.1:{box.app_port}")
        finally:
            stack.stop()
    result = metrics.compute(stage_dir, stage)
    checks = metrics.evaluate(stage, result)
    (stage_dir / "metrics.json").write_text(json.dumps(result, indent=2) + "\n")
    (stage_dir / "checks.json").write_text(json.dumps(checks, indent=2) + "\n")
    if (result.get("client_cpu_peak") or 0) > metrics.CLIENT_CPU_LIMIT:
        say(f"  WARNING: Locust used {result['client_cpu_peak']:.0f}% of a core: "
            "these numbers measure the client, not the server (fewer --users, or "
            "--locust-args '--processes 2')")
    for c in checks:
        say(f"  [{'pass' if c['passed'] else 'FAIL'}] {c['expected']}: measured {c['measured']}")
    return {"stage": stage, "metrics": result, "checks": checks, "sysctls": sysctls}


def versions() -> dict:
    pkgs = {}
    for name in ("flask", "werkzeug", "redis", "gunicorn", "eventlet", "gevent",
                 "flask-socketio", "python-socketio", "locust", "psutil"):
        try:
            pkgs[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pkgs[name] = None
    try:
        redis_v = subprocess.run([procs.require_binary("redis-server", procs.REDIS_HINT),
                                  "--version"], capture_output=True, text=True).stdout.split()
        redis_v = next((w.split("=", 1)[1] for w in redis_v if w.startswith("v=")), None)
    except procs.ServiceError:
        redis_v = None
    return {"packages": pkgs, "redis-server": redis_v, "nginx": nginx_conf.version()}


def git_commit() -> str | None:
    out = subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty",
                          "--abbrev=40"], capture_output=True, text=True)
    return out.stdout.strip() or None


def new_run_dir(base: Path) -> Path:
    base.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    run_dir = base / stamp
    n = 1
    while run_dir.exists():
        n += 1
        run_dir = base / f"{stamp}-{n}"
    run_dir.mkdir()
    latest = base / "latest"
    if latest.is_symlink() or latest.exists():
        latest.unlink()
    latest.symlink_to(run_dir.name)
    return run_dir


def resolve_sandbox(requested: str) -> str:
    ok, why = sandbox.netns_available()
    if requested == "netns" and not ok:
        raise SystemExit(f"lab: --sandbox netns needs root and `ip`: {why}. "
                         "Use --sandbox host (or run as root).")
    if requested == "auto":
        if not ok:
            say(f"note: no network namespaces ({why}); running on the host.")
            say(f"note: {sandbox.LOOPBACK_NOTE}")
        return "netns" if ok else "host"
    return requested


def cmd_run(args) -> int:
    if args.target:
        return cmd_run_target(args)
    chosen = stages.select(args.stages)
    args.sandbox = resolve_sandbox(args.sandbox)
    run_dir = new_run_dir(Path(args.results))
    info = {"started": datetime.now().isoformat(timespec="seconds"),
            "parameters": {"stages": [s.key for s in chosen], "duration_s": args.duration,
                           "users": args.users, "spawn_rate": args.spawn_rate,
                           "warmup_s": args.warmup, "wait_max_s": args.wait_max,
                           "sandbox": args.sandbox,
                           "locust_args": args.locust_args},
            "git_commit": git_commit(), "versions": versions(),
            "kernel": platform.release(), "cores": os.cpu_count(),
            "python": platform.python_version(), "stages": {}}
    (run_dir / "run.json").write_text(json.dumps(info, indent=2) + "\n")
    say(f"lab: {len(chosen)} stage(s), {args.duration:g} s each, {args.users} users, "
        f"sandbox {args.sandbox}; results in {run_dir}")
    results, failed = [], []
    for i, stage in enumerate(chosen):
        if args.sandbox == "host" and i > 0:
            sandbox.wait_for_time_wait_drain(limit=200, say=say)
        try:
            results.append(run_stage(stage, run_dir, args))
            info["stages"][stage.key] = {"dir": stage.dirname,
                                         "sysctls": results[-1]["sysctls"]}
        except (StageFailed, sandbox.SandboxError, procs.ServiceError) as e:
            say(f"  stage {stage.key} FAILED TO RUN: {e}")
            failed.append(stage.key)
            info["stages"][stage.key] = {"dir": stage.dirname, "error": str(e)}
        (run_dir / "run.json").write_text(json.dumps(info, indent=2) + "\n")
    if results:
        report.write(run_dir)
        say("")
        say(report.summary_table(run_dir))
        say(f"\nreport: {run_dir / 'report.md'}")
    if failed:
        say(f"lab: stage(s) {', '.join(failed)} failed to run")
        return 1
    if args.strict and any(not c["passed"] for r in results for c in r["checks"]):
        return 3
    return 0


def cmd_run_target(args) -> int:
    """Load and client-side capture only, against a stack that runs elsewhere."""
    url = args.target.rstrip("/")
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise SystemExit(f"lab: --target needs a URL like http://host:8080, not {url!r}")
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    run_dir = new_run_dir(Path(args.results))
    stage_dir = run_dir / "target"
    stage_dir.mkdir()
    (run_dir / "run.json").write_text(json.dumps({
        "started": datetime.now().isoformat(timespec="seconds"), "target": url,
        "parameters": {"duration_s": args.duration, "users": args.users,
                       "locust_args": args.locust_args},
        "git_commit": git_commit(), "versions": versions(), "kernel": platform.release(),
        "cores": os.cpu_count()}, indent=2) + "\n")
    say(f"lab: load against {url} for {args.duration:g} s; results in {stage_dir}")
    verify([], url, stage_dir, None)
    measure([], url, stage_dir, {"front": port}, {}, None, args,
            args.user_classes.split(","))
    totals = metrics.locust_totals(stage_dir / "locust_stats.csv")
    say(json.dumps(totals))
    return 0


@contextmanager
def running_stage(stage: Stage, args):
    """A stage's sandbox and servers, seeded and verified, for `up`."""
    stage_dir = Path(args.results) / "up" / stage.dirname
    if stage_dir.exists():
        for f in sorted(stage_dir.rglob("*"), reverse=True):
            f.unlink() if f.is_file() or f.is_symlink() else f.rmdir()
    stage_dir.mkdir(parents=True, exist_ok=True)
    with sandbox.Sandbox(stage, args.sandbox, args.apply_host_sysctls) as box:
        stack = Stack(stage, box, stage_dir)
        try:
            stack.start()
            users_file = seed_users(stack, 100)
            verify(box.prefix(), stack.url, stage_dir, users_file)
            yield box, stack, users_file
        finally:
            stack.stop()


def cmd_up(args) -> int:
    stage = stages.get(args.stage)
    args.sandbox = resolve_sandbox(args.sandbox)
    if UP_STATE.exists():
        old = json.loads(UP_STATE.read_text())
        if pid_alive(old.get("pid")):
            raise SystemExit(f"lab: stage {old['stage']} is already up (pid {old['pid']}); "
                             "stop it with Ctrl-C first")
    with running_stage(stage, args) as (box, stack, users_file):
        UP_STATE.parent.mkdir(parents=True, exist_ok=True)
        UP_STATE.write_text(json.dumps({
            "stage": stage.key, "pid": os.getpid(), "mode": box.mode, "netns": box.name,
            "url": stack.url, "users_file": str(users_file),
            "ports": {"redis": box.redis_port, "app": box.app_port,
                      "front": box.front_port if stage.front else None}}, indent=2) + "\n")
        try:
            for note in box.notes:
                say(f"note: {note}")
            say(f"stage {stage.key} {stage.slug} is up: {stack.url}")
            if box.mode == "netns":
                say(f"  network namespace {box.name}; Redis :{box.redis_port}, "
                    f"app :{box.app_port}" + (f", Nginx :{box.front_port}" if stage.front else ""))
            say("  in another terminal: python -m benchmarks.lab exec -- ss -s")
            say("  Ctrl-C stops it")
            while True:
                time.sleep(3600)
        finally:
            UP_STATE.unlink(missing_ok=True)
    return 0


def pid_alive(pid) -> bool:
    if not pid:
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def cmd_exec(args) -> int:
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        raise SystemExit("lab: exec needs a command: python -m benchmarks.lab exec -- ss -s")
    if not UP_STATE.exists():
        raise SystemExit("lab: no stage is up. Start one first: python -m benchmarks.lab up 0")
    state = json.loads(UP_STATE.read_text())
    if not pid_alive(state["pid"]):
        UP_STATE.unlink(missing_ok=True)
        raise SystemExit("lab: the stage that was up has stopped. Start one: "
                         "python -m benchmarks.lab up 0")
    prefix = ["ip", "netns", "exec", state["netns"]] if state["mode"] == "netns" else []
    env = child_env(LOCUST_HOST=state["url"], CHAT_USERS_FILE=state["users_file"])
    try:
        return subprocess.run([*prefix, *command], env=env, cwd=ROOT).returncode
    except FileNotFoundError as e:
        raise SystemExit(f"lab: {e}") from e


def cmd_list(args) -> int:
    for s in stages.STAGES:
        front = f"nginx/{s.front}" if s.front else "no proxy"
        say(f"{s.key:>2}  {s.slug}: {s.title}")
        say(f"    {' '.join(s.server_command())}")
        say(f"    Redis {s.redis_mode}, {front}, sysctl {' + '.join(s.sysctl)}, "
            f"users {' '.join(s.users)}")
        say(f"    see: {s.see}")
    return 0


def cmd_clean(args) -> int:
    """Delete lab namespaces whose lab is gone (`ftl-<pid>-<stage>`, pid dead), and any
    other `ftl-` namespace with no process left in it."""
    left = []
    for ns in sandbox.list_lab_namespaces():
        owner = ns[len(sandbox.NS_PREFIX):].split("-")[0]
        if owner.isdigit():
            gone = not pid_alive(owner)
        else:
            gone = not sandbox.namespace_pids(ns)
        if gone:
            sandbox.delete_namespace(ns)
            left.append(ns)
            say(f"deleted namespace {ns}")
    if not left:
        say("nothing to clean")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.lab", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)

    def sandbox_opts(sp):
        sp.add_argument("--sandbox", choices=("auto", "netns", "host"), default="auto",
                        help="a network namespace per stage (root) or the host (default: auto)")
        sp.add_argument("--apply-host-sysctls", action="store_true",
                        help="host mode only: set the stage's sysctls on the host "
                             "(restored after each stage)")
        sp.add_argument("--results", default=str(RESULTS), help="results folder")

    run = sub.add_parser("run", help="run stages and write a results folder")
    run.add_argument("--stages", default="all", help="all, or keys/slugs: 0,1,2 or 3g")
    run.add_argument("--duration", type=float, default=30, help="seconds measured per stage")
    run.add_argument("--users", type=int, default=50, help="Locust users")
    run.add_argument("--spawn-rate", type=float, default=50, help="users started per second")
    run.add_argument("--warmup", type=float, default=5, help="seconds of load before measuring")
    run.add_argument("--wait-max", type=float, default=0.01,
                     help="most seconds a Locust user waits between tasks (CHAT_WAIT_MAX)")
    run.add_argument("--locust-args", default="",
                     help="more Locust options, e.g. '--processes 2'")
    run.add_argument("--target", help="load only this URL (a stack that runs elsewhere)")
    run.add_argument("--user-classes", default="ChatUser",
                     help="with --target: Locust user classes, comma separated")
    run.add_argument("--strict", action="store_true", help="exit 3 when a check fails")
    sandbox_opts(run)
    run.set_defaults(func=cmd_run)

    up = sub.add_parser("up", help="start one stage and keep it up until Ctrl-C")
    up.add_argument("stage", help="key or slug, e.g. 0 or builtin")
    sandbox_opts(up)
    up.set_defaults(func=cmd_up)

    ex = sub.add_parser("exec", help="run a command inside the stage that is up")
    ex.add_argument("command", nargs=argparse.REMAINDER)
    ex.set_defaults(func=cmd_exec)

    sub.add_parser("list", help="list the stages").set_defaults(func=cmd_list)
    sub.add_parser("clean", help="delete namespaces left by a killed lab").set_defaults(
        func=cmd_clean)
    return p


def _terminate(signum, frame):
    raise KeyboardInterrupt


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    # Ctrl-C and `kill -INT` stop the lab even when it was started in the background
    # by a shell that set SIGINT to "ignore" for it; SIGTERM does the same.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _terminate)
    try:
        return args.func(args)
    except KeyError as e:
        say(f"lab: {e.args[0]}")
        return 2
    except KeyboardInterrupt:
        say("\nlab: interrupted; everything it started is stopped")
        return 130
    except BrokenPipeError:  # `lab list | head`
        return 0


if __name__ == "__main__":
    sys.exit(main())
