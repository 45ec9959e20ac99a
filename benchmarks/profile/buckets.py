"""The app server's profiled CPU, in buckets that match the lessons.

Each stack of py-spy's collapsed stacks (benchmarks/profile/folded.py) goes to the
bucket of its innermost frame that a rule of RULES names; a frame is matched as
`file:function` (`redis/connection.py:AbstractConnection.connect`), against
shell patterns, and the first rule that names it wins. One exception: whatever
runs under a Redis connect or close counts as that (SUBTREE), so the handshake's
own commands (`CLIENT SETINFO`, with the package's version read from disk) are
the cost of a new connection, not of a command. A stack no rule names is `other`.

py-spy leaves idle threads out, so the shares are of the samples where a server
thread was running or runnable; on the lab's one server core a runnable worker
may be waiting for it (say, while Redis answers), and that wait is sampled too.
"""

from __future__ import annotations

from fnmatch import fnmatchcase
from pathlib import Path

from benchmarks.profile import folded

# bucket -> what it holds (the metrics' catalogue says it), in the report's order
BUCKETS = {
    "redis_connect": "Redis connect and close: redis-py making a client, pool or connection "
                     "per request, connecting (with its handshake) and disconnecting",
    "redis_commands": "Redis commands: the rest of redis-py (pack, send, read, parse)",
    "http_server": "HTTP parsing and the server's own loop: gunicorn, werkzeug's dev "
                   "server, eventlet's and gevent's hubs and servers, selectors, granian's "
                   "Python glue (its Rust, with no Python frame, is not sampled)",
    "request_objects": "werkzeug's request and response objects (Request, Response, Headers, "
                       "the environ's parsing, the input stream): the app's side of WSGI, "
                       "which runs under any server, and with none (the floor)",
    "flask": "Flask routing and request hooks: flask, werkzeug's routing and context locals",
    "json": "JSON: encoding and decoding (json, Flask's provider)",
    "token": "the token check: app/tokens.py and what it calls (itsdangerous' signature; "
             "its HGET is a Redis command)",
    "socketio": "Socket.IO: python-socketio, python-engineio (its middleware sees every "
                "request), Flask-SocketIO, the app's events",
    "logging": "logging: the access log (gunicorn's, werkzeug's, the app's) and logging",
    "other": "the app's own views and stores, and whatever no rule names",
}
SUBTREE = "redis_connect"
# the row of the app's CPU py-spy cannot see: threads with no Python frame (granian's Rust,
# benchmarks/profile/threads.py), measured apart and never spread over the buckets
NATIVE = "native"
NATIVE_LABEL = "Rust, not sampled"  # its legend: what a stage 9 reader sees hatched
RULES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("redis_connect", ("redis/*:*.connect", "redis/*:*._connect", "redis/*:*.connect_check_health",
                       "redis/*:*.on_connect*", "redis/*:*.disconnect", "redis/*:*.make_connection",
                       "redis/*:*from_url", "redis/*:parse_url", "redis/*:Redis.__init__",
                       "redis/*:*Pool.__init__", "redis/*:*Connection.__init__",
                       "redis/*:Redis.close", "redis/*:*.__del__")),
    ("redis_commands", ("redis/*",)),
    # a moved file of app/ by its path and by the one it had before its family's folder
    # (app/realtime/, app/watchers/), which the captures made then name (notebooks/)
    ("logging", ("logging/*", "app/watchers/access_log.py:*", "app/access_log.py:*",
                 "gunicorn/glogging.py:*", "werkzeug/serving.py:*.log*",
                 "werkzeug/_internal.py:_log")),
    ("json", ("json/*", "*/json/*")),
    # not itsdangerous itself: Flask's session cookie uses it too, on every request
    ("token", ("app/tokens.py:*",)),
    ("socketio", ("socketio/*", "engineio/*", "flask_socketio/*", "simple_websocket/*",
                  "wsproto/*", "eventlet/websocket.py:*", "app/realtime/server.py:*",
                  "app/realtime/socket_guard.py:*", "app/realtime.py:*",
                  "app/socket_guard.py:*")),
    ("flask", ("flask/*", "werkzeug/routing/*", "werkzeug/local.py:*", "blinker/*",
               "app/__init__.py:*", "app/errors.py:*")),
    ("other", ("app/*", "werkzeug/security.py:*")),
    # werkzeug's objects the app builds from the environ under any server; its routing
    # and locals are Flask's (above), its dev server and the rest the server's (below)
    ("request_objects", ("werkzeug/wrappers/*", "werkzeug/sansio/*", "werkzeug/datastructures/*",
                         "werkzeug/datastructures.py:*", "werkzeug/http.py:*",
                         "werkzeug/wsgi.py:*", "werkzeug/utils.py:*", "werkzeug/_internal.py:*",
                         "werkzeug/urls.py:*", "werkzeug/formparser.py:*",
                         "werkzeug/exceptions.py:*")),
    # eventlet's and gevent's hubs, green threads and servers, not their green sockets:
    # a send or receive on one is its caller's (Redis's command, gunicorn's write)
    ("http_server", ("gunicorn/*", "werkzeug/*", "eventlet/hubs/*", "eventlet/greenthread.py:*",
                     "eventlet/greenpool.py:*", "eventlet/wsgi.py:*", "gevent/hub.py:*",
                     "gevent/_hub*", "gevent/baseserver.py:*", "gevent/server.py:*",
                     "gevent/pywsgi.py:*", "gevent/greenlet.py:*", "socketserver.py:*",
                     "http/server.py:*", "selectors.py:*", "wsgiref/*", "granian/*")),
)


def frame_key(frame: str) -> str:
    """`AbstractConnection.connect (redis/connection.py)` -> `redis/connection.py:
    AbstractConnection.connect`, what the rules match."""
    function, _, file = frame.rpartition(" (")
    return f"{file.rstrip(')')}:{function}" if function else frame


def rule_for(frame: str, cache: dict[str, str | None]) -> str | None:
    """The bucket of the first rule naming this frame (None: no rule, or a process)."""
    if frame not in cache:
        key = frame_key(frame)
        cache[frame] = None if folded.is_process(frame) else next(
            (bucket for bucket, patterns in RULES
             if any(fnmatchcase(key, p) for p in patterns)), None)
    return cache[frame]


def deciding(frames: list[str], cache: dict[str, str | None]) -> tuple[str, str]:
    """(the bucket of one stack, frames outermost first; the frame that decides it)."""
    found = [rule_for(frame, cache) for frame in frames]
    if SUBTREE in found:
        return SUBTREE, frames[found.index(SUBTREE)]
    at = next((i for i in reversed(range(len(found))) if found[i]), None)
    return (found[at], frames[at]) if at is not None else ("other", frames[-1])


def classify(frames: list[str], cache: dict[str, str | None]) -> str:
    """The bucket of one stack (frames outermost first)."""
    return deciding(frames, cache)[0]


def samples(stacks: list[tuple[list[str], int]]) -> dict[str, int]:
    """Samples per bucket, every bucket present."""
    counts = dict.fromkeys(BUCKETS, 0)
    cache: dict[str, str | None] = {}
    for frames, count in stacks:
        counts[classify(frames, cache)] += count
    return counts


def counts(path: Path) -> dict[str, int] | None:
    """Samples per bucket in a collapsed-stacks file (None: no file)."""
    return samples(folded.read(path)) if Path(path).exists() else None


def share_metrics(path: Path) -> dict[str, float | int | None]:
    """metrics.json's `cpu_share_<bucket>` of each bucket and `profile_samples` (None
    without a profile)."""
    found = counts(path) or {}
    total = sum(found.values())
    return {**{f"cpu_share_{bucket}": round(found[bucket] / total, 4) if total else None
               for bucket in BUCKETS}, "profile_samples": total or None}


def shares(path: Path) -> dict[str, float] | None:
    """Each bucket's share of the samples in a collapsed-stacks file (None: no file, or
    no sample in it)."""
    found = counts(path) or {}
    total = sum(found.values())
    return {bucket: round(n / total, 4) for bucket, n in found.items()} if total else None


def per_request(m: dict) -> dict[str, float] | None:
    """A stage's app CPU per request (metrics.json's `app_cpu_ms_per_request`, ms) by
    bucket: first the share of threads py-spy cannot see (`native_cpu_share`) as the
    NATIVE row, then the rest by the buckets' shares of the samples, which are of the
    Python threads only. NATIVE is 0 where it was not measured (a run from before
    threads.json). None: no CPU figure, or not profiled."""
    total = m.get("app_cpu_ms_per_request")
    shares = [m.get(f"cpu_share_{bucket}") for bucket in BUCKETS]
    if total is None or any(s is None for s in shares):
        return None
    native = m.get("native_cpu_share") or 0.0
    python = total * (1 - native)
    return {**{b: s * python for b, s in zip(BUCKETS, shares, strict=True)},
            NATIVE: total * native}


def reduce(source: Path, target: Path) -> None:
    """A small copy of a collapsed-stacks file that keeps its buckets: each stack cut to the
    frame that decides its bucket, the counts summed (the committed reference capture keeps
    this, not the megabytes of whole stacks; it is no flame graph)."""
    counts: dict[str, int] = {}
    cache: dict[str, str | None] = {}
    for frames, count in folded.read(source):
        frame = deciding(frames, cache)[1]
        counts[frame] = counts.get(frame, 0) + count
    lines = [f"{frame} {n}" for frame, n in sorted(counts.items(), key=lambda kv: -kv[1])]
    Path(target).write_text("\n".join(lines) + "\n" if lines else "")
