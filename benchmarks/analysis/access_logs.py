"""What the servers' own access logs say, read from a byte offset on (the measured
window): answered requests (the independent count), POSTs answered 502 and requests
Nginx sent twice (the keep-alive race), each app host's share, Socket.IO sessions
answered 400, and the entry point's own request times (server_p50_ms...).

Three shapes of line, all with `"METHOD PATH PROTO" STATUS` in them: Nginx's
`counted` format (nginx/nginx.conf: then the upstream connect and response times
and the request time), gunicorn's (`%(L)s`, the request time, after the status)
and werkzeug's own (`flask run`), plus the app's own timed lines under it
(app/watchers/access_log.py).
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from benchmarks.analysis import stats
from benchmarks.run import results
from benchmarks.stages import Stage

# A request line in an access log: `"GET /kv/a HTTP/1.1" 200` (Nginx's `counted`
# format, gunicorn's --access-logformat, and werkzeug's own line all contain it).
REQUEST_LINE = re.compile(r'"(?P<method>[A-Z]+) (?P<path>\S+) [^"]*" (?P<status>\d{3})\b')
# werkzeug colours some of its lines (201s, 4xx) even into a file
# The Engine.IO session a Socket.IO request names (none on a handshake)
SESSION_ID = re.compile(r"[?&]sid=([^&\s]+)")
ANSI_COLOUR = re.compile(r"\x1b\[[0-9;]*m")


def gunicorn_args(path) -> list[str]:
    """gunicorn's access log in the shape REQUEST_LINE reads, the request time closing
    each line (%(L)s, seconds). The app redacts any token in it (app/watchers/access_log.py)."""
    return ["--access-logfile", str(path), "--access-logformat", '"%(r)s" %(s)s %(L)s']


# Prometheus's scrapes of the app (--metrics; app/watchers/metrics.py's PATH): a line a second in
# the app's access log, none of the load's requests
SCRAPE_PATH = "/metrics"


def of_the_api(path: str) -> bool:
    """A request line's path is the chat API's: not Socket.IO's own HTTP requests, not
    a scrape."""
    return not path.startswith("/socket.io/") and path.split("?", 1)[0] != SCRAPE_PATH


def count_answered(log: Path, offset: int = 0) -> dict:
    """Responses in an access log from byte `offset` on: all, answered (2xx/3xx), POSTs
    answered 502, and those Nginx sent to the app twice (its upstream times a pair).
    Socket.IO's own HTTP requests (handshakes, upgrades) and Prometheus's scrapes are
    left out (of_the_api): Locust's headline counts HTTP requests of the chat API."""
    with open(log, "rb") as f:
        f.seek(offset)
        return tally(f)


def tally(raw_lines) -> dict:
    """count_answered's figures for some lines of an access log (bytes)."""
    answered = responses = post_502 = resent = 0
    for raw in raw_lines:
        line = ANSI_COLOUR.sub("", raw.decode("utf-8", "replace"))
        match = REQUEST_LINE.search(line)
        if not match or not of_the_api(match["path"]):
            continue
        responses += 1
        answered += match["status"][0] in "23"
        post_502 += match["method"] == "POST" and match["status"] == "502"
        resent += "," in line[match.end():]
    return {"responses": responses, "answered": answered, "post_502": post_502,
            "resent": resent}


def server_latency(log: Path, offset: int = 0) -> dict:
    """`server_p50_ms`, `_p95_`, `_p99_`: percentiles (stats.percentile) of the request times
    that close the chat API's lines in an access log from byte `offset` on (seconds, the
    last field: Nginx's `$request_time`, gunicorn's `%(L)s`); None without any."""
    times = []
    if log.exists():
        with open(log, "rb") as f:
            f.seek(offset)
            for raw in f:
                line = raw.decode("utf-8", "replace")
                match = REQUEST_LINE.search(line)
                if not match or not of_the_api(match["path"]):
                    continue
                last = line[match.end():].split()[-1:]
                if last and _seconds(last[0]) is not None:
                    times.append(_seconds(last[0]) * 1000)
    counts = Counter(times)
    return {f"server_p{q}_ms": round(stats.percentile(counts, q / 100), 1)
            if times else None for q in (50, 95, 99)}


def app_log_sizes(stage: Stage, stage_dir: Path) -> dict[str, int]:
    """Where each app host's access log ends, in a stage with a front ({} otherwise)."""
    if not stage.front:
        return {}
    return {role: log_size(stage_dir / results.app_access_log(role))
            for role in stage.app_roles}


def app_counts(stage_dir: Path, since: dict[str, int]) -> dict:
    """`{"app_hosts": {role: answered}, "app_responses": n, "socketio_400": n}`: what each
    app host's access log gained since `since` (app_log_sizes), all their responses, and
    the Socket.IO requests they answered 400 (an Engine.IO session the host does not
    hold), for count.json; {} without a front."""
    if not since:
        return {}
    logs = {role: (stage_dir / results.app_access_log(role), offset)
            for role, offset in since.items()}
    counts = {role: count_answered(*log) for role, log in logs.items()}
    return {"app_hosts": {role: c["answered"] for role, c in counts.items()},
            "app_responses": sum(c["responses"] for c in counts.values()),
            "socketio_400": sum(count_socketio_400(*log) for log in logs.values())}


def count_socketio_400(log: Path, offset: int = 0) -> int:
    """Socket.IO requests answered 400, from byte `offset` on, for a session this server
    never answered 2xx in the whole log: a poll for a session another host (or worker)
    holds. A 400 for a session it did hold is the client's last poll racing its own
    close as Locust stops, not a poll sent to the wrong host."""
    held, refused, start = set(), [], 0
    with open(log, "rb") as f:
        for raw in f:
            measured, start = start >= offset, start + len(raw)
            match = REQUEST_LINE.search(raw.decode("utf-8", "replace"))
            if not (match and match["path"].startswith("/socket.io/")):
                continue
            sid = SESSION_ID.search(match["path"])
            if match["status"].startswith("2") and sid:
                held.add(sid[1])
            elif match["status"] == "400" and measured:
                refused.append(sid[1] if sid else None)
    return sum(sid not in held for sid in refused)


def log_size(path: Path) -> int:
    """Where a log ends now: the start of what a measured run adds to it."""
    return path.stat().st_size if path.exists() else 0


def _seconds(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:  # werkzeug's `-`, an old line without a time
        return None
