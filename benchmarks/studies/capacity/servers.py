"""The capacity study's server side: what each role costs, read from the processes.

A reading, taken at the start and at the end of a step's traffic, covers every role of
the stage as its own process tree (the lab started each: `Stack.procs`):

- `realtime`: the Socket.IO server (its master and workers, on every app host);
- `redis`, `nginx`: the store and message queue, and the front;

with each role's CPU seconds (user + system, the tree's, reaped children too), its RSS
and PSS (PSS shares a page among the processes that map it: a forking server's workers
share their master's pages, which RSS counts in each), open descriptors and threads.
The server's own counts beside the client's: the websockets it holds (ESTABLISHED
connections its processes own on its port, psutil, the server's network namespace)
and the messages it stored (Redis's `next:message_id`, the counter every stored
message takes an id from).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import redis

from benchmarks.capture import kernel
from benchmarks.run import results
from benchmarks.run.stack import Stack, socketio_name

CLK_TCK = os.sysconf("SC_CLK_TCK")


def realtime_name(stack: Stack, role: str) -> str:
    """The process name (and log) of app host `role`'s real-time server: its Socket.IO
    server, or the app server where that serves Socket.IO too."""
    return socketio_name(role) if stack.stage.socketio_server else role


def roles(stack: Stack) -> dict[str, list[int]]:
    """The roles the study reads, each its processes' roots (an app host each)."""
    found = {"realtime": [stack.procs[realtime_name(stack, r)].pid
                          for r in stack.stage.app_roles],
             "redis": [stack.procs["redis"].pid]}
    if "nginx" in stack.procs:
        found["nginx"] = [stack.procs["nginx"].pid]
    return found


def realtime_port(stack: Stack) -> int:
    return stack.box.port("socketio" if stack.stage.socketio_server else "app")


def tree(roots: list[int]) -> list[psutil.Process]:
    found = []
    for pid in roots:
        try:
            top = psutil.Process(pid)
            found += [top, *top.children(recursive=True)]
        except psutil.NoSuchProcess:
            continue
    return found


@dataclass
class Role:
    cpu_s: float = 0.0
    rss_kib: int = 0
    pss_kib: int = 0
    fds: int = 0
    threads: int = 0
    processes: int = 0
    nofile: int | None = None  # the smallest soft limit among its processes


def read_role(procs: list[psutil.Process], memory: bool) -> Role:
    """A role's figures now; `memory`: its RSS and PSS too (PSS reads every mapping of
    every process, a few ms per hundred MB)."""
    role = Role()
    for p in procs:
        try:
            with p.oneshot():
                t = p.cpu_times()
                role.cpu_s += t.user + t.system + t.children_user + t.children_system
                role.fds += p.num_fds()
                role.threads += p.num_threads()
                soft = p.rlimit(psutil.RLIMIT_NOFILE)[0]
                role.nofile = soft if role.nofile is None else min(role.nofile, soft)
                if memory:
                    full = p.memory_full_info()
                    role.rss_kib += full.rss // 1024
                    role.pss_kib += full.pss // 1024
            role.processes += 1
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return role


def held(procs: list[psutil.Process], port: int) -> int:
    """Websockets (ESTABLISHED connections on local `port`) the processes own, each once:
    their sockets' inodes, found in the TCP tables of their own network namespace
    (/proc/PID/net/tcp; psutil reads the caller's namespace's)."""
    inodes, tables = set(), {}  # socket inodes; a process of each network namespace
    for p in procs:
        fd_dir = f"/proc/{p.pid}/fd"
        try:
            names = os.listdir(fd_dir)
            tables.setdefault(os.readlink(f"/proc/{p.pid}/ns/net"), p.pid)
        except OSError:
            continue
        for fd in names:
            try:
                link = os.readlink(f"{fd_dir}/{fd}")
            except OSError:
                continue
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
    found = set()
    for pid in tables.values():
        for table in ("tcp", "tcp6"):
            try:
                lines = open(f"/proc/{pid}/net/{table}").read().splitlines()[1:]
            except OSError:
                continue
            for line in lines:
                f = line.split()
                if f[3] == "01" and int(f[1].rsplit(":", 1)[1], 16) == port and f[9] in inodes:
                    found.add(f[9])
    return len(found)


def stored_messages(stack: Stack) -> int:
    """Messages the server has stored so far (the counter their ids come from)."""
    box = stack.box
    with kernel.in_netns(box.namespace("redis")):
        r = redis.Redis(box.address("redis"), box.port("redis"), socket_timeout=10)
        try:
            return int(r.get("next:message_id") or 0)
        finally:
            r.close()


# What a server's own log says when a limit of its configuration or of the box is reached
SIGNS = {"worker_connections are not enough": "Nginx's worker_connections",
         "Too many open files": "file descriptors (EMFILE)"}


def log_signs(stack: Stack) -> dict[str, int]:
    """The limits the stage's logs name (SIGNS), with how many lines name each."""
    logs = [*stack.dir.glob("*.log"), *(stack.dir / results.NGINX_DIR).glob("*.log")]
    found: dict[str, int] = {}
    for log in logs:
        text = log.read_text(errors="replace")
        for phrase, limit in SIGNS.items():
            if phrase in text:
                found[limit] = found.get(limit, 0) + text.count(phrase)
    return found


# app/watchers/gc_log.py's line: a collection that paused the real-time server (FLASK_GC_LOG_MS)
GC_LINE = re.compile(r"^gc: generation (\d) took (\d+) ms, (\d+) objects tracked$", re.M)


# app/watchers/gc_log.py's first line: the Python that runs the real-time server, its thresholds
STARTED_LINE = re.compile(r"^gc: (\w+ \S+), thresholds (\(.*\))$", re.M)


def python(stack: Stack) -> dict[str, str | None]:
    """The real-time server's Python and its collector's thresholds, as the server said
    them as it started (its log's first app/watchers/gc_log.py line); None where it said none."""
    for log in realtime_logs(stack):
        m = STARTED_LINE.search(log.read_text(errors="replace")) if log.exists() else None
        if m:
            return {"python": m[1], "gc_thresholds": m[2]}
    return {"python": None, "gc_thresholds": None}


def realtime_logs(stack: Stack) -> list[Path]:
    return [stack.dir / f"{realtime_name(stack, r)}.log" for r in stack.stage.app_roles]


def log_sizes(stack: Stack) -> dict[Path, int]:
    return {log: log.stat().st_size if log.exists() else 0 for log in realtime_logs(stack)}


def gc_pauses(before: dict[Path, int]) -> list[tuple[int, int]]:
    """(ms, objects tracked) of each collection the real-time server logged since the
    sizes `before`."""
    found = []
    for log, size in before.items():
        with open(log, "rb") as f:
            f.seek(size)
            text = f.read().decode(errors="replace")
        found += [(int(m[2]), int(m[3])) for m in GC_LINE.finditer(text)]
    return found


@dataclass
class Reading:
    roles: dict[str, Role] = field(default_factory=dict)
    held: int = 0
    stored: int = 0
    logs: dict[Path, int] = field(default_factory=dict)  # the real-time logs' sizes


def read(stack: Stack, memory: bool = False) -> Reading:
    reading = Reading(stored=stored_messages(stack), logs=log_sizes(stack))
    for name, roots in roles(stack).items():
        procs = tree(roots)
        reading.roles[name] = read_role(procs, memory)
        if name == "realtime":
            reading.held = held(procs, realtime_port(stack))
    return reading
