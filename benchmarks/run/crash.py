"""A worker of each app server killed under load, and what a client sees of it.

The crash twins (8k, 9k; lab 11) run this probe on the client host beside Locust's
measured run. Two seeded users who are friends share a room through the stage's entry
(Nginx): the member on a Socket.IO websocket, the sender posting a message over HTTP
every POST_EVERY seconds (`POST /rooms/<id>/messages`, stored once answered 201). At
`--kill-after` seconds the probe sends SIGKILL to one worker of each server it is given
(gunicorn's master or granian's main process, by pid: the lab's hosts are network
namespaces, and the machine's processes are one table, so the client host can signal
the app host's workers). Then it measures, as a client:

- http_recovery_s: from the kill until the first post sent after it was answered 201;
- socketio_recovery_s: from the kill until the member's websocket was connected and
  in its room again (the member retries every RECONNECT_EVERY seconds, so the figure
  is the server's to within that);
- acked_lost: messages answered 201 that the member never got, live or from the
  history it asks for when it joins again (`joinRoom {after}`, as a real client does);
- server_back_s: from the kill until each server (`--servers`, straight, not through
  Nginx) answered its /healthz again, the slowest: the new worker's start, the box's.

    python -m benchmarks.run.crash http://198.18.0.20:8080 --users-file F \\
        --kill 1234,1240 --servers http://198.18.0.30:8000,http://198.18.0.30:8001 \\
        --kill-after 10 --duration 30 --json crash.json

The limit (`recovery_limit_s` in crash.json, `recovery_limit`): RECOVERY_LIMIT_S, or,
on a box slower than that, as long as the lab took to start the stage's servers
(`--limit`, `limit_for`), or RECOVERY_LIMIT_S past the servers' own return, whichever
is longest. A new worker imports the app under the stage's load: under half the CPU
beside the suite, 9k's Socket.IO client was not back 6 s after the kill (a reconnection
waited 5 s on the new worker and gave up), where the stage's servers had started
within 5 s. Exit 0 when both came back within it and nothing acknowledged was lost, 1
when not, 2 on bad input or when the probe could not start.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import psutil

from benchmarks.checks import RECOVERY_LIMIT_S  # what the twins' checks allow
from benchmarks.run import delivery, results
from benchmarks.sandbox import hosts, procs

# requests and socketio are imported where the probe uses them: the lab imports this
# module for wanted/start/finish/metrics (and `lab list` through it), which need
# neither; socketio alone takes 0.15 s to import.

POST_EVERY = 0.1  # seconds between the sender's posts: 10 a second beside Locust's load
RECONNECT_EVERY = 0.2  # the member's reconnection delay, fixed (no back-off, no jitter)
POLL_EVERY, POLL_TIMEOUT_S = 0.1, 2.0  # ServerWatch: a killed server's /healthz
CATCH_UP_WAIT_S = 5.0  # after the last post, for the last messages to arrive
# When, in the measured window, the workers die: after Locust's users have started
# (its first 2 s), a third of the way in, so that most of the window is the recovery.
KILL_AT_SHARE, KILL_AT_LEAST_S = 1 / 3, 2.0
MAX_LIMIT_S = 120.0  # --limit's largest: a recovery that slow is a failure on any box

# The metrics the crash twins' checks read (benchmarks/analysis/metrics.py lists them,
# from crash.json): name -> meaning; None in every other stage.
METRICS = {
    "crash_recovery_limit_s": "the recovery's limit: 5 s, or the seconds this box took to "
                              "start the stage's servers, or 5 s past the killed servers' "
                              "own return, whichever was longest",
    "crash_http_recovery_s": "seconds from the kill until the first message posted after "
                             "it was answered 201",
    "crash_socketio_recovery_s": "seconds from the kill until the member's websocket was "
                                 "connected and in its room again",
    "crash_acked_lost": "messages answered 201 that the member never got, live or from "
                        "the history it fetched when it joined again",
}


class Member(delivery.Member):
    """delivery's room member, on a websocket that reconnects, and catches up when it
    joins again: the ids it has, live or fetched."""

    def __init__(self, url: str, account: dict, friend_id: int):
        import socketio

        super().__init__(url, account, friend_id)
        self.sio = socketio.Client(reconnection=True, reconnection_delay=RECONNECT_EVERY,
                                   reconnection_delay_max=RECONNECT_EVERY,
                                   randomization_factor=0)
        self.sio.on("newMessage", self.on_message)
        self.sio.on("connect", lambda: self.connected.set())
        self.sio.on("disconnect", lambda *_: self.connected.clear())
        self.connected = threading.Event()
        self.fetched: set[int] = set()

    def ids(self) -> set[int]:
        with self.changed:
            return {m.get("id") for m in self.arrived} | self.fetched

    def rejoin(self) -> None:
        """In its room again after a reconnect, with what it missed meanwhile."""
        self.fetched |= self.history_after(max(self.ids() | {0}))


def kill_a_worker(pid: int, holder: int | None) -> int:
    """SIGKILL to one child (a worker) of server process `pid`: the one that holds the
    member's websocket (`holder`) when it is this server's, else its first; its pid."""
    workers = [w.pid for w in psutil.Process(pid).children()]
    worker = holder if holder in workers else workers[0]
    os.kill(worker, signal.SIGKILL)
    return worker


def limit_for(servers_up_s: float | None) -> float:
    """The recovery's limit: RECOVERY_LIMIT_S, or the seconds the stage's servers took to
    start (Stack.servers_up_s) where that is longer: a new worker imports the app as the
    first ones did, and on a slow or busy box that alone may take longer than 5 s. At most
    MAX_LIMIT_S, which the probe takes (an emulated box may start servers slower still)."""
    return min(MAX_LIMIT_S, max(RECOVERY_LIMIT_S, round(servers_up_s or 0.0, 1)))


def recovery_limit(limit: float, backs: list[float | None]) -> float:
    """The recovery's limit once the servers' returns are known: `limit`, or
    RECOVERY_LIMIT_S past the slowest server's return where that is later (the client's
    part stays 5 s however long the box took to start a worker); MAX_LIMIT_S while one
    has not answered yet."""
    if None in backs:
        return MAX_LIMIT_S
    return max(limit, max(backs, default=0.0) + RECOVERY_LIMIT_S)


class ServerWatch(threading.Thread):
    """From the kill, a server's /healthz straight (not through Nginx), every POLL_EVERY s
    until it answers 200: `back`, the seconds from the kill."""

    def __init__(self, url: str, killed_at: float):
        super().__init__(daemon=True)
        self.url, self.killed_at, self.back = f"{url}/healthz", killed_at, None

    @classmethod
    def started(cls, urls: list[str], killed_at: float) -> list[ServerWatch]:
        watches = [cls(url, killed_at) for url in urls]
        for watch in watches:
            watch.start()
        return watches

    def run(self) -> None:
        import requests

        while time.monotonic() - self.killed_at < MAX_LIMIT_S:
            try:
                if requests.get(self.url, timeout=POLL_TIMEOUT_S).status_code == 200:
                    self.back = round(time.monotonic() - self.killed_at, 3)
                    return
            except requests.RequestException:
                pass  # refused (granian's listener died with its worker) or still queued
            time.sleep(POLL_EVERY)


def run(url: str, accounts: list[dict], servers: list[int], kill_after: float,
        duration: float, limit: float = RECOVERY_LIMIT_S,
        server_urls: list[str] | None = None) -> dict:
    import requests
    import socketio

    a, b = delivery.pair(url, accounts)
    sender, member = delivery.Member(url, a, b["id"]), Member(url, b, a["id"])
    holder = member.join()  # the worker that holds its websocket
    start = time.monotonic()
    killed_at, killed, joined_again, watches = None, [], None, []
    posts: list[tuple[float, float, int | None]] = []  # (sent, answered, id or None)

    def over() -> bool:  # past the window and the limit's first second, then both back
        now = time.monotonic()  # or past the limit (which waits for the servers' return)
        if now < start + max(duration, kill_after + limit + 1) or killed_at is None:
            return False
        if joined_again is not None and any(p for sent, _, p in posts if sent >= killed_at):
            return True
        return now > killed_at + recovery_limit(limit, [w.back for w in watches]) + 1

    try:
        while not over():
            if killed_at is None and time.monotonic() - start >= kill_after:
                killed_at = time.monotonic()
                killed = [kill_a_worker(p, holder) for p in servers]
                member.connected.clear()  # its socket is gone, whether it noticed yet or not
                watches = ServerWatch.started(server_urls or [], killed_at)
            if killed_at and joined_again is None and member.connected.is_set():
                try:
                    member.rejoin()
                    joined_again = time.monotonic()
                except (socketio.exceptions.SocketIOError, OSError, TypeError):
                    pass  # its server went away again: the next tick tries once more
            sent = time.monotonic()
            try:
                posted = sender.post(f"crash probe {uuid.uuid4().hex[:8]}")
            except requests.RequestException:
                posted = None
            posts.append((sent, time.monotonic(), posted))
            time.sleep(max(0.0, POST_EVERY - (time.monotonic() - sent)))
        acked = {p for _, _, p in posts if p is not None}
        wait_until = time.monotonic() + CATCH_UP_WAIT_S
        while not acked <= member.ids() and time.monotonic() < wait_until:
            time.sleep(0.1)
    finally:
        if member.sio.connected:
            member.sio.disconnect()
    back = [answered for sent, answered, p in posts if killed_at and sent >= killed_at and p]
    return {"killed_workers": killed, "kill_after_s": kill_after,
            **limits(limit, [w.back for w in watches]),
            "http_recovery_s": round(back[0] - killed_at, 3) if back else None,
            "socketio_recovery_s": (round(joined_again - killed_at, 3)
                                    if joined_again else None),
            "posted": len(posts), "acked": len(acked),
            "http_failed": sum(1 for *_, p in posts if p is None),
            "acked_lost": len(acked - member.ids()),
            "caught_up": len(acked & member.fetched), "url": url}


def limits(limit: float, backs: list[float | None]) -> dict:
    """crash.json's limit (to the tenth above) and the slowest server's return; a server
    that never answered again leaves the limit as given."""
    if not backs or None in backs:
        return {"recovery_limit_s": limit, "server_back_s": None}
    return {"recovery_limit_s": math.ceil(recovery_limit(limit, backs) * 10) / 10,
            "server_back_s": max(backs)}


def wanted(stage) -> bool:
    """Does `stage` run the probe? A crash twin does: its checks read its metrics."""
    return any(check.metric in METRICS for check in stage.checks)


def start(box, stack, stage_dir: Path, users_file: Path,
          duration: float) -> subprocess.Popen:
    """The probe on the client host against the stage's entry, for a measured window of
    `duration` s, killing a worker of each server of the first app host (the HTTP
    server, and the Socket.IO server of a stage that has one)."""
    named = [name for name in ("app", "app_socketio") if name in stack.procs]
    servers = [str(stack.procs[name].pid) for name in named]
    urls = [box.url(stack.roles[name]) if name == "app" else box.socketio_url(stack.roles[name])
            for name in named]
    kill_after = max(KILL_AT_LEAST_S, duration * KILL_AT_SHARE)
    return procs.start([*box.prefix("client"), sys.executable, "-m", "benchmarks.run.crash",
                        stack.url, "--users-file", str(users_file), "--kill", ",".join(servers),
                        "--servers", ",".join(urls),
                        "--kill-after", f"{kill_after:g}", "--duration", f"{duration:g}",
                        "--limit", f"{limit_for(stack.servers_up_s):g}",
                        "--json", str(stage_dir / results.CRASH_JSON)],
                       log=stage_dir / "crash.log", env=procs.child_env())


def finish(probe: subprocess.Popen, stage_dir: Path, duration: float) -> str:
    """Waits for the probe; its last line (what it measured, or why it could not)."""
    try:
        probe.wait(timeout=duration + MAX_LIMIT_S + CATCH_UP_WAIT_S + 60)
    except subprocess.TimeoutExpired:
        procs.stop(probe)
    lines = (stage_dir / "crash.log").read_text(errors="replace").strip().splitlines()
    return lines[-1] if lines else f"crash: no output (exit {probe.returncode})"


def metrics(stage_dir: Path) -> dict:
    """The crash twins' metrics from the probe's crash.json; None each without one."""
    path = stage_dir / results.CRASH_JSON
    found = json.loads(path.read_text()) if path.exists() else {}
    return {name: found.get(name.removeprefix("crash_")) for name in METRICS}


def main(argv: list[str] | None = None) -> int:
    import requests

    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.run.crash",
        description="Kill a worker of each server under load; time what a client sees.")
    parser.add_argument("url", help="the stage's entry, e.g. http://198.18.0.20:8080")
    parser.add_argument("--users-file", type=Path, required=True,
                        help="`flask seed-users --friends N --out FILE`'s file")
    parser.add_argument("--kill", required=True,
                        help="server pids (gunicorn's master, granian's main process), "
                             "comma-separated: one worker of each is killed")
    parser.add_argument("--servers", default="",
                        help="each killed server's own URL, in --kill's order, comma-"
                             "separated: its /healthz is polled from the kill until it "
                             "answers (server_back_s)")
    parser.add_argument("--kill-after", type=float, required=True, help="seconds")
    parser.add_argument("--duration", type=float, required=True, help="seconds")
    parser.add_argument("--limit", type=float, default=RECOVERY_LIMIT_S,
                        help=f"seconds each recovery may take (default {RECOVERY_LIMIT_S:g}; "
                             "the lab passes the stage's start-up where that is longer)")
    parser.add_argument("--json", dest="json_out", type=Path, help="write the result here")
    args = parser.parse_args(argv)
    refusal = hosts.outside_refusal(args.url, f"python -m benchmarks.run.crash {args.url} ...")
    if refusal:
        print(f"crash: {refusal}", file=sys.stderr)
        return 2
    try:
        servers = [int(p) for p in args.kill.split(",")]
        if not 0 < args.kill_after < args.duration:
            raise ValueError(f"--kill-after must be inside --duration ({args.kill_after})")
        if not RECOVERY_LIMIT_S <= args.limit <= MAX_LIMIT_S:
            raise ValueError(f"--limit must be {RECOVERY_LIMIT_S:g} to {MAX_LIMIT_S:g} s "
                             f"(got {args.limit:g})")
        accounts = json.loads(args.users_file.read_text())
        accounts = accounts["users"] if isinstance(accounts, dict) else accounts
        urls = [u.rstrip("/") for u in args.servers.split(",") if u]
        for u in urls:
            refused = hosts.outside_refusal(u, f"python -m benchmarks.run.crash --servers {u}")
            if refused:
                raise ValueError(refused)
        if urls and len(urls) != len(servers):
            raise ValueError(f"--servers names {len(urls)} URL(s) for {len(servers)} --kill pid(s)")
        result = run(args.url.rstrip("/"), accounts, servers, args.kill_after, args.duration,
                     args.limit, urls)
    except (OSError, ValueError, KeyError, IndexError, psutil.Error, delivery.ProbeError,
            requests.RequestException) as e:
        print(f"crash: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    if args.json_out:
        args.json_out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"crash: workers {result['killed_workers']} killed at {args.kill_after:g} s; HTTP "
          f"back after {result['http_recovery_s']} s, Socket.IO after "
          f"{result['socketio_recovery_s']} s; {result['acked']} of {result['posted']} posts "
          f"acknowledged, {result['acked_lost']} of them lost, {result['caught_up']} caught "
          "up from the history")
    ok = all(result[k] is not None and result[k] <= result["recovery_limit_s"]
             for k in ("http_recovery_s", "socketio_recovery_s")) and not result["acked_lost"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
