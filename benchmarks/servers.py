"""The servers a stage runs, as data: their commands, the environments (venvs) they
start from, the app settings they run with, and how big their Nginx is.

benchmarks/stages.py names these in its stages and re-exports them (`stages.CURRENT`,
`stages.GUNICORN_TODAY`): read a stage there, its servers here.
"""

from __future__ import annotations

import functools
import runpy
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # the repository: every command runs from it


# Server environments: the venv a server starts from, both made by `make setup`.
# gunicorn 26.0 removed the eventlet worker and eventlet is being retired, so the book's
# eventlet servers run on the last gunicorn that has it, in an environment that holds
# only what those servers need; everything else (the other servers, Locust, the tools,
# the tests) runs on the current releases.
@dataclass(frozen=True)
class Environment:
    name: str
    venv: str  # its folder, from the repository root
    requirements: str  # what `make setup` installs into it
    holds: str  # one line for `lab list` and the docs


CURRENT = "current"
EVENTLET = "eventlet"
ENVIRONMENTS = {e.name: e for e in (
    Environment(CURRENT, ".venv", "requirements.txt",
                "today's releases (gunicorn 27, gevent)"),
    Environment(EVENTLET, ".venv-eventlet", "requirements-eventlet.txt",
                "gunicorn 25.3 with eventlet, the book's worker (gone in gunicorn 26)"),
)}


def worker_environment(worker_class: str | None) -> str:
    """The environment whose gunicorn has this worker class: eventlet's is only in the
    old gunicorn; sync, gthread and gevent are in today's (and so are granian and
    Flask's own server, whose "worker class" is None or granian's interface)."""
    return EVENTLET if worker_class == "eventlet" else CURRENT


@functools.cache
def config_worker_class(config: str) -> str:
    """The worker class a gunicorn config file (`gunicorn/today.conf.py`, from the
    repository root) sets, as gunicorn reads it: its `worker_class`, or gunicorn's
    default, sync."""
    return runpy.run_path(str(ROOT / config)).get("worker_class", "sync")


def worker_class(command) -> str | None:
    """What a server command runs its app on: a gunicorn's worker class (from its `-c`
    file), granian's interface (`wsgi`, `asgi`), None for Flask's own server. A command
    may be wrapped (`prlimit ... -- gunicorn ...`, the fd_limit study's)."""
    command = list(command)
    if "gunicorn" in command and "-c" in command:
        return config_worker_class(command[command.index("-c") + 1])
    if "granian" in command:
        return command[command.index("--interface") + 1]
    return None


def command_environment(command) -> str:
    """The environment a server command starts from: the one whose gunicorn has its
    worker class (eventlet's for an eventlet worker), the current one otherwise."""
    return worker_environment(worker_class(command))


# Server commands, with {app_host} and {app_port} filled in. `flask`/`gunicorn` are
# the venv's (the docs say `source .venv/bin/activate` first). A gunicorn stage's
# settings live in its config file under gunicorn/ (what a user copies to a real
# machine); only the address, which is the host's, stays on the command line.
BUILTIN = ("flask", "--app", "app", "run", "--host", "{app_host}", "--port", "{app_port}")
GUNICORN_SYNC = ("gunicorn", "-c", "gunicorn/sync.conf.py", "-b", "{app_host}:{app_port}",
                 "app.wsgi:app")
# gunicorn 26 removed the eventlet worker: the stages that run it name the `eventlet`
# environment (gunicorn 25.3).
GUNICORN_EVENTLET = ("gunicorn", "-c", "gunicorn/eventlet.conf.py", "-b", "{app_host}:{app_port}",
                     "app.wsgi:app")
GUNICORN_GTHREAD = ("gunicorn", "-c", "gunicorn/gthread.conf.py", "-b", "{app_host}:{app_port}",
                    "app.wsgi:app")
# Stage 8, today's stack: the worker and settings the measurements picked (lab 13).
GUNICORN_TODAY = ("gunicorn", "-c", "gunicorn/today.conf.py", "-b", "{app_host}:{app_port}",
                  "app.wsgi:app")
# Stage 9: every HTTP route on granian (Rust, WSGI); its options, and why: granian/README.md.
GRANIAN_TODAY = ("granian", "--interface", "wsgi", "--workers", "1",
                 "--blocking-threads", "1", "--no-ws", "--respawn-failed-workers",
                 "--host", "{app_host}", "--port", "{app_port}", "app.wsgi:app")
GUNICORN_GEVENT = ("gunicorn", "-c", "gunicorn/gevent.conf.py", "-b", "{app_host}:{app_port}",
                   "app.wsgi:app")
# An accept queue of 16 (the failure twin 2b): sync workers leave connections waiting
# there, and past 16 the kernel drops the SYN.
GUNICORN_SYNC_BACKLOG = ("gunicorn", "-c", "gunicorn/sync-backlog-16.conf.py",
                         "-b", "{app_host}:{app_port}", "app.wsgi:app")
# A keep-alive of 1 s, shorter than Nginx's (the failure twin 5k: the keep-alive race).
GUNICORN_EVENTLET_SHORT = ("gunicorn", "-c", "gunicorn/eventlet-short-keepalive.conf.py",
                           "-b", "{app_host}:{app_port}", "app.wsgi:app")
# One worker: gunicorn hands each request to any of its workers, so a long-polling
# Socket.IO session survives only where one process serves the host (Flask-SocketIO's
# deployment docs); stickiness across hosts is then Nginx's job.
GUNICORN_EVENTLET_ONE = ("gunicorn", "-c", "gunicorn/eventlet-one-worker.conf.py",
                         "-b", "{app_host}:{app_port}", "app.wsgi:app")
# The realtime set (lab 16): stage 9's Socket.IO server on each other model, one worker
# each, none capped below the capacity study's ~10,000 websockets by a silent limit of
# its own (each file, and granian/README.md for the asyncio one, says which and why).
GUNICORN_EVENTLET_REALTIME = ("gunicorn", "-c", "gunicorn/eventlet-realtime.conf.py",
                              "-b", "{app_host}:{app_port}", "app.wsgi:app")
GUNICORN_GTHREAD_REALTIME = ("gunicorn", "-c", "gunicorn/gthread-realtime.conf.py",
                             "-b", "{app_host}:{app_port}", "app.wsgi:app")
# Stage 10: stage 9's gevent worker set to hold users (lab 16): the config says why.
GUNICORN_REALTIME = ("gunicorn", "-c", "gunicorn/realtime.conf.py", "-b", "{app_host}:{app_port}",
                     "app.wsgi:app")
# python-socketio's AsyncServer (app/asgi.py) on granian's ASGI interface: one event loop.
GRANIAN_ASGI = ("granian", "--interface", "asgi", "--workers", "1",
                "--respawn-failed-workers", "--workers-kill-timeout", "3",
                "--host", "{app_host}", "--port", "{app_port}", "app.asgi:app")

# The app's settings a stage gives (FLASK_*, app/settings.py), beyond its defaults.
POLLING = {"FLASK_SOCKETIO_TRANSPORTS": "polling,websocket"}  # the app accepts polling
# Stage 7: the app's own hot costs removed, each a setting (app/fast_path.py says which).
CODE_ITSELF = {"FLASK_FUSED_ROUND_TRIPS": "1", "FLASK_TOKEN_CACHE_SIZE": "4096",
               "FLASK_JSON_PROVIDER": "orjson", "FLASK_COOKIE_SESSION": "0",
               "FLASK_ENGINEIO_EVERY_PATH": "0"}
TODAY = {**CODE_ITSELF, "FLASK_SOCKETIO_ASYNC_MODE": "gevent"}  # stage 8: stage 7's code

# stated, not guessed (app/realtime/server.py)
THREADING = {"FLASK_SOCKETIO_ASYNC_MODE": "threading"}
# Stage 9: stage 7's code on two servers, each its own Socket.IO mode (threading under
# granian, gevent under gunicorn's gevent worker): "auto", the default, takes it.
SPLIT = CODE_ITSELF
# The watched set (lab 17): stage 9 with an instrument on (app/watchers/metrics.py,
# app/watchers/tracing.py), on both of its servers, as a deployment turns one on for the whole app.
# Its metrics in prometheus_client's single-process mode (granian runs one worker); with --metrics
# the lab gives each server a multiprocess folder, as it does every stage's.
# Stage 10t: gevent's greenlet tree tracked (gevent's default, stage 9's), against
# gunicorn/realtime.conf.py's off.
GREENLET_TREE = {"GEVENT_TRACK_GREENLET_TREE": "true"}
# Stage 10l: the libraries' own four greenlets a connected user (simple-websocket's
# reader, Engine.IO's ping task and writer), against gunicorn/realtime.conf.py's one.
LIBRARY_GREENLETS = {"FLASK_WEBSOCKET_READER": "thread", "FLASK_ENGINEIO_PING": "task",
                     "FLASK_ENGINEIO_WRITER": "task"}
METRICS_ON = {"FLASK_METRICS": "1"}
# Traces to the lab's span sink (the stage's `metrics` host: benchmarks/run/spans.py);
# 10%: the ratio the instruments study picked (benchmarks/studies/instruments/variants.py)
TRACED = {"FLASK_TRACING": "1", "FLASK_TRACE_SAMPLE": "1"}
TRACED_10 = {"FLASK_TRACING": "1", "FLASK_TRACE_SAMPLE": "0.1"}


# Nginx's processes (nginx/nginx.conf): how many, the connections each holds, the file
# descriptors each may open.
@dataclass(frozen=True)
class NginxSize:
    workers: str = "auto"  # worker_processes: one per CPU
    worker_connections: int = 4096
    nofile: int = 8192  # worker_rlimit_nofile: twice worker_connections


NGINX_SIZE = NginxSize()  # every stage's with a front, but 5w's and stage 9's family's
# Stage 9 and its twins (the realtime set, lab 16): one Nginx in front of a Socket.IO
# server that the capacity study takes to ~10,000 websockets, each two connections of
# an Nginx worker (the client's and the upstream's), 20,000 in all. No process here
# may open more than 20,000 descriptors (the box's hard limit, which only
# CAP_SYS_RESOURCE raises), so one worker cannot hold them: 4 workers of 10,000
# connections each, twice the top step, which the kernel fills evenly (nginx/nginx.conf
# says how evenly; `reuseport` would force it, but on an address of its own it cannot
# bind beside Debian's default site, which docs/your-stack.md keeps). At the lab's own
# load (tens of users) no limit is near; what differs there is 4 processes on the
# proxy's core where `auto` makes one per CPU (2 on the lab's box).
WEBSOCKET_FRONT = NginxSize(workers="4", worker_connections=10_000, nofile=20_000)
