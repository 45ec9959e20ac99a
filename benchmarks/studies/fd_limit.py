"""fd_limit: many Socket.IO connections against the server's file-descriptor limit.

Purpose: show `EMFILE` ("Too many open files") for real. Every WebSocket a
server holds is an open file descriptor; a process may hold at most its
RLIMIT_NOFILE soft limit (`ulimit -n`, 1024 by default on Debian and Ubuntu).
This starts Redis and the chat app on ONE gunicorn async worker (stage 3's
command, `-w 1`) under a given limit, opens N authenticated Socket.IO
connections to it, holds them, and reports how many connected, how the others
failed, the worker's open descriptors and memory, and what its log says.
Then the same with a higher limit.

Usage:

    python -m benchmarks.studies.fd_limit                 # --nofile 1024,65535, 1500 sockets
    python -m benchmarks.studies.fd_limit --nofile 1024 --connections 2000 --worker gevent
    python -m benchmarks.studies.fd_limit --nofile 256,4096 --connections 400 --json fd.json

    --nofile A,B,..    a round per limit: the server runs under soft = hard = A
                       (`prlimit --nofile=A:A -- gunicorn ...`: that process only)
    --connections N    Socket.IO connections per round (websocket transport)
    --hold S           seconds every open connection is held (default 5)
    --timeout S        seconds a connection may take before it counts as failed (5)
    --worker W         eventlet (stage 3, default) or gevent (stage 3g)
    --worker-connections C   gunicorn's cap per async worker (default 10000)
    --json OUT         the rounds as JSON, for tests and notebooks

Each round runs in its own network namespace like a lab stage (as root; else
host mode on free loopback ports), under results/<timestamp>-fd-limit/
nofile-A/ (app.log is the server's log). The probe, the client side, is
`python -m benchmarks.studies.fd_limit probe ...` run inside the namespace: it logs
seeded users in over HTTP, then opens the connections from a thread pool
with websocket-client, speaking Engine.IO v4 by hand (`0{...}` open packet,
`40{"token": ...}` connect, `40{"sid": ...}` accepted), and answers the
server's pings while it holds them. It raises its OWN soft limit to its hard
limit first: the client needs a descriptor per connection too.

Columns: `ok` connected (Socket.IO `40` received); `failed` did not, by
reason: `no answer` (TCP connected, then no HTTP upgrade within --timeout:
the kernel completed the handshake into the listen backlog, the app never
accept()ed it), `connect timeout` (the backlog was full too), `refused`,
`closed` (the server closed it during the handshake), `dropped` (connected,
then lost while held); `fds` the worker's open descriptors at the peak
(psutil num_fds()); `RSS` the worker's resident memory idle and holding the
connections; `EMFILE` lines of the server log that say `Too many open files`;
`after` whether a fresh connection succeeds once all are closed (the
eventlet worker's accept loop dies on EMFILE and never accepts again).

gunicorn caps an async worker at `--worker-connections` (default 1000)
connections, a limit of its own beside the kernel's; this tool sets it to
10000 so that the descriptor limit is the only one in play
(`--worker-connections 1000` shows gunicorn's own cap instead).

Requirements: Linux, redis-server, `prlimit` (util-linux), the venv
(gunicorn, eventlet or gevent, websocket-client, psutil); root for network
namespaces, and CAP_SYS_RESOURCE to give the server a hard limit above this
process's own. Without it (root in most containers) such a round runs at
this process's hard limit instead, and says so.

Overhead: a round starts Redis and gunicorn, seeds 10 users and takes about
10-25 s (connections that fail wait --timeout each, 250 in parallel); the
probe holds one thread per connection being opened (250) and one
descriptor per open connection. Load stays on loopback.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import resource
import selectors
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlparse

import psutil

from benchmarks import stages
from benchmarks.run import cli, options, results, runner
from benchmarks.run.cli import StageFailed, say
from benchmarks.sandbox import hosts, procs, sandbox
from benchmarks.stages import Stage
from benchmarks.studies.sweep import with_workers

WORKER_CONNECTIONS = 10000
SEEDED_USERS = 10
EMFILE_MARKERS = ("Too many open files", "EMFILE", "Errno 24")
BASE_STAGES = {"eventlet": "3", "gevent": "3g"}


# --- the server side ---------------------------------------------------------------

def limited_stage(base: Stage, nofile: int,
                  worker_connections: int = WORKER_CONNECTIONS) -> Stage:
    """`base` on one worker, under `ulimit -n nofile` (soft = hard), gunicorn's own cap lifted.

    `prlimit --nofile=S:H -- CMD` sets the limits of the process it then
    becomes (it execs CMD), so they apply to gunicorn and the worker it forks,
    and to nothing else.
    """
    one = with_workers(base, 1)
    server = list(one.server)
    server[1:1] = ["--worker-connections", str(worker_connections)]
    return dataclasses.replace(one, server=("prlimit", f"--nofile={nofile}:{nofile}", "--",
                                            *server), env={**one.env, **REDIS_PATIENCE})


# The probe's connections come at once, each Socket.IO connect a Redis round trip, and the
# pool opens a Redis connection for each that finds none free: on a half-speed box beside
# other work a few took longer than the app's 1 s to connect, and their Socket.IO connects
# were refused ("socket.io rejected", 4 of 400 at 4,096 descriptors), a failure that is
# not the descriptors'. The study measures descriptors: it gives Redis 5 s.
REDIS_PATIENCE = {"FLASK_REDIS_CONNECT_TIMEOUT": "5"}


def applicable(nofile: int) -> tuple[int, str | None]:
    """`nofile`, or the highest limit this process can give a child, and why.

    Raising a hard limit above one's own needs CAP_SYS_RESOURCE: root has it,
    root in a container often does not (Docker drops it by default).
    """
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard == resource.RLIM_INFINITY or nofile <= hard:
        return nofile, None
    test = subprocess.run(["prlimit", f"--nofile={nofile}:{nofile}", "--", "true"],
                          capture_output=True, text=True)
    if test.returncode == 0:
        return nofile, None
    return hard, (f"nofile {nofile} asked, but this process's hard limit is {hard} and it "
                  f"may not raise it ({test.stderr.strip()}; no CAP_SYS_RESOURCE, as in "
                  f"most containers): using {hard}")


def gunicorn_worker(master_pid: int, timeout: float = 30) -> psutil.Process:
    """The (single) worker gunicorn forked, once it is up."""
    deadline = time.monotonic() + timeout
    master = psutil.Process(master_pid)
    while time.monotonic() < deadline:
        children = master.children()
        if children:
            return children[0]
        time.sleep(0.1)
    raise StageFailed(f"gunicorn (pid {master_pid}) started no worker in {timeout:.0f} s")


def count_emfile(log: Path) -> int:
    if not log.exists():
        return 0
    return sum(1 for line in log.read_text(errors="replace").splitlines()
               if any(m in line for m in EMFILE_MARKERS))


def first_emfile_line(log: Path) -> str | None:
    if not log.exists():
        return None
    for line in log.read_text(errors="replace").splitlines():
        if any(m in line for m in EMFILE_MARKERS):
            return line.strip()[:160]
    return None


def wait_and_echo(proc: subprocess.Popen, log: Path, bound: float) -> int:
    """Wait for the probe, echoing its `probe:` lines (when the hold starts) as they come."""
    deadline, seen = time.monotonic() + bound, 0
    while True:
        lines = log.read_text(errors="replace").splitlines() if log.exists() else []
        for line in lines[seen:]:
            if line.startswith("probe:"):
                say(f"  {line}")
        seen = len(lines)
        if proc.poll() is not None:
            return proc.returncode
        if time.monotonic() > deadline:
            raise StageFailed(f"the probe did not finish in {bound:.0f} s")
        time.sleep(0.5)


def run_round(base: Stage, nofile: int, args, run_dir: Path) -> dict:
    """Redis + one limited worker in a sandbox, the probe against it, all stopped."""
    stage = limited_stage(base, nofile, args.worker_connections)
    round_dir, n = run_dir / f"nofile-{nofile}", 1
    while round_dir.exists():
        n += 1
        round_dir = run_dir / f"nofile-{nofile}-{n}"
    round_dir.mkdir(parents=True)
    say(f"nofile {nofile}: {' '.join(stage.server_command())}")
    placement = hosts.placement(args.server_cpus, args.client_cpus)
    with sandbox.Sandbox(stage, args.sandbox, placement=placement, tag=f"fd{nofile}") as box:
        stack = runner.Stack(stage, box, round_dir)
        probe = None
        try:
            stack.start()
            worker = gunicorn_worker(stack.procs["app"].pid)
            users_file = runner.seed_stage_users(stack, SEEDED_USERS)
            out = round_dir / "probe.json"
            cmd = [*box.prefix("client"), sys.executable, "-m", "benchmarks.studies.fd_limit",
                   "probe", stack.url, "--users-file", str(users_file), "--connections",
                   str(args.connections), "--hold", str(args.hold), "--timeout",
                   str(args.timeout), "--worker-pid", str(worker.pid), "--json", str(out)]
            probe = procs.start(cmd, log=round_dir / "probe.log", env=procs.child_env(),
                                cwd=stages.ROOT)
            bound = args.connections / 50 + args.timeout * 4 + args.hold + 60
            code = wait_and_echo(probe, round_dir / "probe.log", bound)
            if code != 0 or not out.exists():
                log = (round_dir / "probe.log").read_text(errors="replace")[-2000:]
                raise StageFailed(f"the probe failed (exit {code}):\n{log}")
            result = json.loads(out.read_text())
        finally:
            procs.stop(probe)
            stack.stop()
    log = round_dir / "app.log"
    result.update(nofile=nofile, worker=args.worker, emfile_lines=count_emfile(log),
                  emfile_example=first_emfile_line(log), dir=str(round_dir))
    return result


# --- the client side: the probe ----------------------------------------------------

class Connection:
    """One Socket.IO connection over a raw websocket (Engine.IO v4 by hand)."""

    def __init__(self, ws):
        self.ws = ws

    @staticmethod
    def open(host: str, port: int, token: str, timeout: float) -> tuple[Connection | None, str]:
        """(connection, "ok") or (None, why it failed)."""
        import websocket  # websocket-client

        try:
            sock = socket.create_connection((host, port), timeout=timeout)
        except ConnectionRefusedError:
            return None, "refused"
        except TimeoutError:
            return None, "connect timeout"
        except OSError as e:
            return None, f"connect: {e.strerror or e}"
        try:
            ws = websocket.create_connection(
                f"ws://{host}:{port}/socket.io/?EIO=4&transport=websocket",
                socket=sock, timeout=timeout, enable_multithread=False)
        except (websocket.WebSocketTimeoutException, TimeoutError):
            sock.close()
            return None, "no answer"
        except websocket.WebSocketBadStatusException as e:
            sock.close()
            return None, f"HTTP {e.status_code}"
        except (websocket.WebSocketConnectionClosedException, ConnectionError):
            sock.close()
            return None, "closed"
        except OSError as e:
            sock.close()
            return None, f"handshake: {e.strerror or e}"
        conn = Connection(ws)
        try:
            opened = ws.recv()  # 0{"sid":..., "pingInterval":...}
            if not str(opened).startswith("0"):
                conn.close()
                return None, "no engine.io open packet"
            ws.send("40" + json.dumps({"token": token}))
            reply = str(ws.recv())
            while reply == "2":  # a ping before the connect answer
                ws.send("3")
                reply = str(ws.recv())
        except (websocket.WebSocketTimeoutException, TimeoutError):
            conn.close()
            return None, "no answer"
        except (websocket.WebSocketConnectionClosedException, OSError):
            conn.close()
            return None, "closed"
        if reply.startswith("40"):
            return conn, "ok"
        conn.close()
        return None, "socket.io rejected" if reply.startswith("44") else f"unexpected {reply[:20]}"

    def pump(self) -> bool:
        """Read what the server sent (answer pings); False when it closed the connection."""
        import websocket

        try:
            data = self.ws.recv()
        except (websocket.WebSocketTimeoutException, TimeoutError):
            return True
        except (websocket.WebSocketConnectionClosedException, OSError):
            return False
        if data == "2":
            try:
                self.ws.send("3")
            except (websocket.WebSocketConnectionClosedException, OSError):
                return False
        return data not in ("", None) and not str(data).startswith("1")  # 1: engine.io close

    def close(self) -> None:
        self.ws.shutdown()  # no close handshake: 1,000 of them would take a while


def raise_own_limit(needed: int) -> tuple[int, int, str | None]:
    """Soft RLIMIT_NOFILE up to the hard one; (soft, hard, warning or None)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        soft = hard
    warning = None
    if soft != resource.RLIM_INFINITY and soft < needed:
        warning = (f"the probe may open only {soft} descriptors (its hard limit), "
                   f"{needed} wanted: its own failures would show as `connect: Too many "
                   f"open files`")
    return soft, hard, warning


class WorkerWatch:
    """The server worker's open descriptors (peak) and RSS, sampled in a thread."""

    def __init__(self, pid: int, interval: float = 0.2):
        self.proc = psutil.Process(pid)
        self.interval = interval
        self.peak_fds = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def sample(self) -> dict:
        try:
            fds = self.proc.num_fds()
            rss = self.proc.memory_info().rss
        except psutil.Error:
            return {"fds": None, "rss_mb": None}
        self.peak_fds = max(self.peak_fds, fds)
        return {"fds": fds, "rss_mb": round(rss / 1048576, 1)}

    def _run(self):
        while not self._stop.wait(self.interval):
            self.sample()

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=5)


def log_in(base_url: str, users_file: Path, timeout: float) -> list[str]:
    import requests

    health = requests.get(f"{base_url}/healthz", timeout=timeout)
    if health.status_code != 200:
        raise SystemExit(f"probe: {base_url}/healthz answered {health.status_code}")
    tokens = []
    for user in json.loads(users_file.read_text()):
        r = requests.post(f"{base_url}/auth/login", timeout=timeout,
                          json={"email": user["email"], "password": user["password"]})
        if r.status_code != 200:
            raise SystemExit(f"probe: login of {user['email']} answered {r.status_code}")
        tokens.append(r.json()["access_token"])
    return tokens


def probe(args) -> dict:
    """Open args.connections Socket.IO connections, hold them, report (the client side)."""
    soft, hard, warning = raise_own_limit(args.connections + 64)
    url = urlparse(args.url)
    tokens = log_in(args.url.rstrip("/"), Path(args.users_file), args.timeout)
    watch = WorkerWatch(args.worker_pid)
    try:
        limit = watch.proc.rlimit(psutil.RLIMIT_NOFILE)
    except psutil.Error:
        limit = None
    idle = watch.sample()
    started = time.monotonic()
    with watch:
        opened, reasons = open_connections(args, url.hostname, url.port, tokens)
        connect_s = time.monotonic() - started
        held = watch.sample()
        print(f"probe: {len(opened)} connected in {connect_s:.1f} s; holding them for "
              f"{args.hold:g} s", flush=True)
        dropped, still_open = hold(opened, args.hold)
        at_end = watch.sample()
    for conn in opened:
        conn.close()
    # once everything is closed: does the server take a new connection?
    time.sleep(1.0)
    conn, after = Connection.open(url.hostname, url.port, tokens[0], args.timeout)
    if conn is not None:
        conn.close()
    ok = reasons.pop("ok", 0)
    return {
        "connections": args.connections, "ok": ok, "failed": args.connections - ok,
        "reasons": dict(sorted(reasons.items(), key=lambda kv: -kv[1])),
        "dropped_while_held": dropped, "open_at_end": still_open,
        "connect_seconds": round(connect_s, 1), "hold_seconds": args.hold,
        "worker_pid": args.worker_pid, "worker_nofile": list(limit) if limit else None,
        "worker_fds_idle": idle["fds"], "worker_fds_held": held["fds"],
        "worker_fds_peak": watch.peak_fds, "worker_fds_end": at_end["fds"],
        "worker_rss_idle_mb": idle["rss_mb"], "worker_rss_held_mb": held["rss_mb"],
        "new_connection_after": after,
        "probe_nofile": [soft, hard], "probe_warning": warning,
    }


def open_connections(args, host: str, port: int,
                     tokens: list[str]) -> tuple[list[Connection], dict[str, int]]:
    """args.connections attempts, args.concurrency at a time, until a deadline; (the
    connections that opened, how many attempts ended each way: "ok" or why not)."""
    reasons: dict[str, int] = {}
    opened: list[Connection] = []
    lock = threading.Lock()
    deadline = time.monotonic() + args.connections / 50 + args.timeout * 4

    def attempt(i: int) -> None:
        if time.monotonic() > deadline:
            conn, why = None, "not tried (deadline)"
        else:
            conn, why = Connection.open(host, port, tokens[i % len(tokens)], args.timeout)
        with lock:
            if conn is not None:
                opened.append(conn)
            reasons[why] = reasons.get(why, 0) + 1

    with ThreadPoolExecutor(max_workers=args.concurrency) as pool:
        list(pool.map(attempt, range(args.connections)))
    return opened, reasons


def hold(opened: list[Connection], seconds: float) -> tuple[int, int]:
    """Answer pings for `seconds`, noticing connections the server drops; (dropped,
    still open)."""
    dropped = 0
    sel = selectors.DefaultSelector()  # epoll: select() stops at descriptor 1024
    for conn in opened:
        conn.ws.sock.settimeout(1.0)
        sel.register(conn.ws.sock, selectors.EVENT_READ, conn)
    hold_until = time.monotonic() + seconds
    while time.monotonic() < hold_until:
        for key, _ in sel.select(timeout=max(0.0, min(0.5, hold_until - time.monotonic()))):
            if not key.data.pump():
                sel.unregister(key.fileobj)
                dropped += 1
    still_open = len(sel.get_map())
    sel.close()
    return dropped, still_open


def probe_main(argv) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.studies.fd_limit probe",
                                description="the client side of fd_limit (run by it)")
    p.add_argument("url")
    p.add_argument("--users-file", required=True)
    p.add_argument("--connections", type=int, required=True)
    p.add_argument("--hold", type=float, default=5)
    p.add_argument("--timeout", type=float, default=5)
    p.add_argument("--concurrency", type=int, default=250)
    p.add_argument("--worker-pid", type=int, required=True)
    p.add_argument("--json", required=True)
    args = p.parse_args(argv)
    refusal = hosts.outside_refusal(args.url, "python -m benchmarks.studies.fd_limit probe "
                                    + " ".join(argv))
    if refusal:
        print(f"fd_limit probe: {refusal}", file=sys.stderr)
        return 2
    result = probe(args)
    Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result), flush=True)
    return 0


# --- the report --------------------------------------------------------------------

def per_connection_kib(r: dict) -> float | None:
    if not r.get("ok") or None in (r.get("worker_rss_held_mb"), r.get("worker_rss_idle_mb")):
        return None
    return (r["worker_rss_held_mb"] - r["worker_rss_idle_mb"]) * 1024 / r["ok"]


def table(rounds: list[dict]) -> str:
    head = (f"{'nofile':>6}  {'tried':>5}  {'ok':>5}  {'failed':>6}  {'fds idle/peak':>13}  "
            f"{'RSS idle -> held':>17}  {'KiB/conn':>8}  {'EMFILE':>6}  {'after':>9}  "
            "how it failed")
    lines, notes = [head], []
    for r in rounds:
        how = ", ".join(f"{why} {n}" for why, n in r["reasons"].items()) or "-"
        if r.get("dropped_while_held"):
            how += f"; dropped while held {r['dropped_while_held']}"
        kib = per_connection_kib(r)
        rss = f"{r['worker_rss_idle_mb']:.0f} -> {r['worker_rss_held_mb']:.0f} MiB"
        mark = ""
        if r.get("nofile_asked", r["nofile"]) != r["nofile"]:
            mark = "*"
            notes.append(f"* {r['nofile_asked']} asked; the hard limit this process could "
                         f"give was {r['nofile']}")
        lines.append(
            f"{str(r['nofile']) + mark:>6}  {r['connections']:>5}  {r['ok']:>5}  {r['failed']:>6}  "
            f"{str(r['worker_fds_idle']) + '/' + str(r['worker_fds_peak']):>13}  {rss:>17}  "
            f"{'-' if kib is None else format(kib, '.0f'):>8}  {r['emfile_lines']:>6}  "
            f"{r['new_connection_after']:>9}  {how}")
    return "\n".join(lines + notes)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.studies.fd_limit", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nofile", type=cli.int_list(16, "limits"), default=[1024, 65535],
                   help="the server's RLIMIT_NOFILE, one round each (default 1024,65535)")
    p.add_argument("--connections", type=int, default=1500,
                   help="Socket.IO connections per round (default 1500)")
    p.add_argument("--hold", type=float, default=5, help="seconds to hold them (default 5)")
    p.add_argument("--timeout", type=float, default=5,
                   help="seconds a connection may take before it counts as failed")
    p.add_argument("--worker-connections", type=int, default=WORKER_CONNECTIONS,
                   help="gunicorn's own cap per async worker (its default is 1000; "
                        f"default here {WORKER_CONNECTIONS}, out of the way)")
    p.add_argument("--worker", choices=tuple(BASE_STAGES), default="eventlet",
                   help="gunicorn worker class (default eventlet, stage 3; gevent: 3g)")
    cli.add_sandbox_options(p, per="round")
    p.add_argument("--json", help="write the rounds as JSON to this file")
    return p


def run_rounds(args) -> int:
    if args.connections < 1:
        raise options.OptionsError(f"--connections must be >= 1 (got {args.connections})")
    base = stages.get(BASE_STAGES[args.worker])
    procs.require_binary("prlimit", "It is in util-linux: `apt-get install util-linux`.")
    args.sandbox = cli.resolve_sandbox(args.sandbox)
    try:
        hosts.placement(args.server_cpus, args.client_cpus)
    except ValueError as e:
        raise options.OptionsError(f"--server-cpus/--client-cpus: {e}") from e
    run_dir = results.new_run(Path(args.results), suffix="fd-limit")
    say(f"fd_limit: {args.connections} Socket.IO connections against one {args.worker} "
        f"worker, nofile {', '.join(map(str, args.nofile))}; sandbox {args.sandbox}; "
        f"results in {results.rel(run_dir)}")
    rounds = []
    try:
        for asked in args.nofile:
            nofile, note = applicable(asked)
            if note:
                say(f"note: {note}")
            r = run_round(base, nofile, args, run_dir)
            r["nofile_asked"] = asked
            rounds.append(r)
            say(f"  {r['ok']} connected, {r['failed']} failed "
                f"({', '.join(f'{k} {v}' for k, v in r['reasons'].items()) or '-'}); "
                f"worker fds peak {r['worker_fds_peak']}, "
                f"EMFILE lines in app.log: {r['emfile_lines']}")
            if r["emfile_example"]:
                say(f"  app.log: {r['emfile_example']}")
            if r.get("probe_warning"):
                say(f"  note: {r['probe_warning']}")
    finally:
        if rounds:
            results.write_json(run_dir / "fd_limit.json", rounds)
            if args.json:
                results.write_json(Path(args.json), rounds)
    say("")
    say(table(rounds))
    return 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["probe"]:
        return probe_main(argv[1:])
    args = build_parser().parse_args(argv)
    return cli.main("fd_limit", run_rounds, args, leftovers=runner.leftovers)


if __name__ == "__main__":
    sys.exit(main())
