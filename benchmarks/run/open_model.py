"""What an open-model stage's schedule did (`--arrival-rate`, benchmarks/arrivals.py).

The figures of such a stage are the users' only when the client kept its schedule:
requests that started late, or not at all, are the client's shortfall, and the run
says so beside them instead of reporting them as the server's.
"""

from __future__ import annotations

import json
from pathlib import Path

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
