"""Stage 8's gunicorn with a variant's recycling lines, a watcher of its workers, and
the account the load signs in as."""

from __future__ import annotations

import http.client
import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from benchmarks import servers
from benchmarks.run.cli import StageFailed

TODAY_CONF = servers.ROOT / "gunicorn" / "today.conf.py"
WATCH_S = 0.01  # how often the watcher reads the master's children

# The child_exit hooks the metrics part compares (`--metrics-exit`): none, the one
# prometheus_client documents, and the fold today.conf.py has (its own, left as it is).
EXIT_HOOKS = {
    "none": "def child_exit(server, worker):  # nothing: the files stay as they are\n"
            "    pass\n",
    "mark": "from prometheus_client import multiprocess\n\n\n"
            "def child_exit(server, worker):  # prometheus_client's documented hook\n"
            "    multiprocess.mark_process_dead(worker.pid)\n",
    "fold": "",
}


@dataclass(frozen=True)
class Variant:
    name: str
    workers: int
    max_requests: int  # 0: no recycling
    jitter: int = 0
    exit_hook: str = "none"
    metrics: bool = False


def config_text(variant: Variant) -> str:
    """Stage 8's config as it is, then the variant's lines, which gunicorn reads last."""
    return (TODAY_CONF.read_text() + "\n\n# --- the recycling study's variant "
            f"({variant.name}) ---\nworkers = {variant.workers}\n"
            f"max_requests = {variant.max_requests}\n"
            f"max_requests_jitter = {variant.jitter}\n" + EXIT_HOOKS[variant.exit_hook])


def command(config: Path, port: int) -> list[str]:
    """servers.GUNICORN_TODAY with the study's config and a loopback address."""
    cmd = [str(a).format(app_host="127.0.0.1", app_port=port) for a in servers.GUNICORN_TODAY]
    cmd[cmd.index("gunicorn/today.conf.py")] = str(config)
    return cmd


@dataclass
class Watcher:
    """Every worker pid the master had, with when it was first and last seen (s on the
    load's clock, time.perf_counter() - start)."""

    master: int
    start: float
    seen: dict[int, list[float]] = field(default_factory=dict)
    stopping: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        master = psutil.Process(self.master)
        while not self.stopping.is_set():
            now = time.perf_counter() - self.start
            try:
                pids = [c.pid for c in master.children()]
            except psutil.NoSuchProcess:
                return
            for pid in pids:
                self.seen.setdefault(pid, [now, now])[1] = now
            time.sleep(WATCH_S)

    def restarts(self) -> list[dict]:
        """Each worker that left while the master went on: its exit (last seen) and the
        fork of the next worker seen after it."""
        last_seen = max((s[1] for s in self.seen.values()), default=0.0)
        gone = sorted(s[1] for s in self.seen.values() if s[1] < last_seen - 2 * WATCH_S)
        forks = sorted(s[0] for s in self.seen.values() if s[0] > 0)  # not the first ones
        return [{"exit_s": round(t, 3),
                 "fork_s": round(min((f for f in forks if f >= t - WATCH_S), default=-1), 3)}
                for t in gone]


def call(port: int, method: str, path: str, body: dict | None = None,
         token: str | None = None) -> tuple[int, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        headers = {"Content-Type": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        conn.request(method, path, body=json.dumps(body) if body is not None else None,
                     headers=headers)
        response = conn.getresponse()
        text = response.read()
        return response.status, (json.loads(text) if text.startswith(b"{") else {})
    finally:
        conn.close()


def sign_in(port: int) -> str:
    """A fresh account's token (the load's `GET /users/me` checks it against Redis)."""
    name = f"recycle-{uuid.uuid4().hex[:8]}"
    account = {"email": f"{name}@example.test", "password": "recycling-study", "username": name}
    status, _ = call(port, "POST", "/auth/register", account)
    status2, login = call(port, "POST", "/auth/login",
                          {"email": account["email"], "password": account["password"]})
    if (status, status2) != (201, 200):
        raise StageFailed(f"set-up: register answered {status}, login {status2} (not 201, 200)")
    return login["access_token"]
