"""What the checks count in a stage's Nginx error log: connect() failures for want of a
local port (stage 4), worker_connections running out (5w), the app closing a reused
upstream connection under a request (5k). Counted once into errors.json, since the log
itself can be tens of MB."""

from __future__ import annotations

from pathlib import Path

from benchmarks.run import results

EADDRNOTAVAIL = "(99: Cannot assign requested address)"
NOT_ENOUGH = "worker_connections are not enough"
# The app closed a reused upstream connection under a request (the keep-alive race):
# with a FIN Nginx reads end of file, with a reset (unread data at close) an error.
UPSTREAM_CLOSED = ("upstream prematurely closed connection",
                   "(104: Connection reset by peer) while reading response header from upstream")


def count_in_file(path: Path, needle: str) -> int:
    if not path.exists():
        return 0
    with open(path, errors="replace") as f:
        return sum(line.count(needle) for line in f)


def summarize(stage_dir: Path) -> dict | None:
    """Count, once, the errors the checks read from Nginx's error log into errors.json:
    the log itself can be tens of MB (stage 4), too big to keep in a reference copy."""
    counts = count_log(stage_dir)
    if counts is not None:
        results.write_json(stage_dir / results.NGINX_ERRORS, counts)
    return counts


def count_log(stage_dir: Path) -> dict | None:
    """What the checks count in the stage's Nginx error log; None without a log."""
    log = stage_dir / results.NGINX_ERROR_LOG
    if not log.exists():
        return None
    return {"eaddrnotavail": count_in_file(log, EADDRNOTAVAIL),
            "worker_connections": count_in_file(log, NOT_ENOUGH),
            "upstream_closed": sum(count_in_file(log, needle) for needle in UPSTREAM_CLOSED)}


def counts(stage_dir: Path) -> dict:
    """errors.json's counts, made from the log if the run has none yet."""
    path = stage_dir / results.NGINX_ERRORS
    if path.exists():
        return results.read_json(path)
    return summarize(stage_dir) or {"eaddrnotavail": 0}
