"""What an open-model stage's schedule did (`--arrival-rate`, benchmarks/arrivals.py).

The figures of such a stage are the users' only when the client kept its schedule:
requests that started late, or not at all, are the client's shortfall, and the run
says so beside them instead of reporting them as the server's.

Its percentiles come from the stage's `latency.hlog` (`tail_source`; computed in
benchmarks/analysis/metrics.py): the same times as Locust's, to 3 significant digits,
by the lab's one rule. It is the open model whose tail runs past a second under a
stall, where Locust keeps 100 ms buckets. The closed model's stay Locust's, as its web
UI shows them.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from benchmarks import latency_log
from benchmarks.analysis import stats
from benchmarks.run import results
from benchmarks.run.locust_cli import ARRIVALS_JSON

LATE_SHARE = 0.01  # past this share of late starts, the figures are the client's too


def read(stage_dir: Path) -> dict | None:
    """arrivals.json of a stage folder (None: not an open-model stage)."""
    path = Path(stage_dir) / ARRIVALS_JSON
    return json.loads(path.read_text()) if path.exists() else None


def unreliable(counts: dict) -> str:
    """Why the schedule's figures are not only the server's, or ""."""
    intended = counts.get("intended") or 0
    if not intended:
        return "no request was scheduled"
    late, missed = counts.get("late", 0), counts.get("not_started", 0)
    if missed:
        return f"{missed} of {intended} requests never started (too many in flight)"
    if late / intended > LATE_SHARE:
        return (f"{late} of {intended} requests started over 10 ms late: the client could "
                "not keep the schedule")
    return ""


def line(counts: dict) -> str:
    """The run's line for it: rate, what started when, and whether it can be trusted."""
    why = unreliable(counts)
    said = (f"  open model: {counts.get('rate'):g}/s scheduled, {counts.get('started', 0)} of "
            f"{counts.get('intended', 0)} started, {counts.get('late', 0)} late (worst "
            f"{counts.get('worst_lateness_ms', 0):g} ms), latencies from the intended start")
    return said + (f"\n  UNRELIABLE: {why}" if why else "")


def tail_source(stage_dir: Path) -> str:
    """Where a stage's HTTP percentiles come from: `hdrhistogram` (an open-model stage with
    its .hlog) or `locust` (the others, and runs from before the .hlog); stats.SOURCES
    says how precise each is."""
    stage_dir = Path(stage_dir)
    if (stage_dir / ARRIVALS_JSON).exists() and (stage_dir / results.LATENCY_HLOG).exists():
        return "hdrhistogram"
    return "locust"


def tail_figures(stage_dir: Path, keep: Callable[[str], bool]) -> dict:
    """`{p50_ms, p95_ms, p99_ms}` from the .hlog's rows that `keep` takes (a tag,
    `METHOD:name`), by the lab's rule (stats.percentile), to the µs; {} where the stage's
    percentiles are Locust's (tail_source)."""
    if tail_source(stage_dir) != "hdrhistogram":
        return {}
    times = latency_log.times_ms(Path(stage_dir) / results.LATENCY_HLOG, keep)
    return {f"p{p}_ms": stats.percentile(times, p / 100) for p in (50, 95, 99)}
