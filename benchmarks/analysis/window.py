"""Locust's requests counted over the sampler's own window.

The runner starts the sampler as Locust's run starts (runner.wait_for_run_start), for
the stage's duration less half a second, and Locust's users then spawn and ramp up
inside that run. Once, the sampler started beside Locust's process, whose start-up
(importing its locustfile) took under a second on a quiet box and most of a 3 s window
on one half as fast: stage 0's `tw_redis_per_request` read 0.48 and 0.42 with four
jobs on two cores where a quiet box reads about 1, and 0.299 on the half-speed box.
Locust's totals still cover its last half second, which the sampler does not see, so
ratios of the sampler's figures to requests are taken over the sampler's rows.

Locust keeps, for each request name, how many of its requests ended in each wall-clock
second (`num_reqs_per_sec` and `num_fail_per_sec` in its `--json-file`, added up over
its workers as Locust adds its stats). The requests between two of the sampler's rows
(their `ts`) are those seconds' counts, the seconds at either end taken pro rata. A run
from before either file kept them gives None, and the metrics fall back to Locust's
totals.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from benchmarks.capture import csvfile
from benchmarks.run import results

SOCKETIO_TYPE = "WSIO"  # metrics.SOCKETIO_TYPE: the acks, never counted as requests


def per_second(stage_dir: Path, answered: bool = False) -> Counter | None:
    """HTTP requests (failures included, or with `answered` left out) that ended in each
    second (unix time) of the stage's Locust run; None without Locust's per-second counts."""
    path = stage_dir / results.LOCUST_JSON
    if not path.exists():
        return None
    http = [e for e in results.read_json(path) if e["method"] != SOCKETIO_TYPE]
    if not http or any("num_reqs_per_sec" not in e for e in http):
        return None
    counts: Counter = Counter()
    for e in http:
        counts.update({int(t): n for t, n in e["num_reqs_per_sec"].items()})
        if answered:
            counts.subtract({int(t): n for t, n in e.get("num_fail_per_sec", {}).items()})
    return counts


def between(counts: Counter, start: float, end: float) -> float:
    """The requests that ended from `start` to `end` (unix time), each second's spread
    evenly over it."""
    total = 0.0
    for second, n in counts.items():
        overlap = min(end, second + 1) - max(start, second)
        if overlap > 0:
            total += n * min(1.0, overlap)
    return total


def bounds(sampler_csv: Path) -> tuple[float, float, float] | None:
    """(when the sampler started, its first row, its last row), unix time: a row's CPU
    covers the time since the row before, the first row's since the sampler started.
    None for a sampler file without `ts`."""
    found = csvfile.rows(sampler_csv)
    if not found or "ts" not in found[0] or "elapsed_s" not in found[0]:
        return None
    first, last = found[0], found[-1]
    return first["ts"] - first["elapsed_s"], first["ts"], last["ts"]


def recent_requests(stage_dir: Path, requests: int, locust_rps: float,
                    seconds: float) -> float:
    """The requests whose TIME_WAIT the sampler's peak can still hold: those that ended
    between its first row and its last, at most the last `seconds` (TIME_WAIT's length).
    A run without per-second counts: Locust's totals, as before them."""
    counts, span = per_second(stage_dir), bounds(stage_dir / results.SAMPLER_CSV)
    if counts is None or span is None:
        return max(1, min(requests, locust_rps * seconds))
    _, first, last = span
    return max(1.0, between(counts, max(first, last - seconds), last))


def answered_rate(stage_dir: Path, rps: float | None) -> float | None:
    """Answered HTTP requests a second over the sampler's window (from its start, as its
    CPU columns): CPU per request is then both figures over the same seconds. A run
    without per-second counts: Locust's own `rps`."""
    counts = per_second(stage_dir, answered=True)
    span = bounds(stage_dir / results.SAMPLER_CSV)
    if counts is None or span is None or span[2] <= span[0]:
        return rps
    start, _, last = span
    return between(counts, start, last) / (last - start)
