"""What `lab run --repeats N` measured: each stage's figures over its repeats.

Repeat 1's stage folders are the run's own, repeat k's are under repeats/K/
(benchmarks/run/results.py). For every stage: how many repeats measured it and
passed all its checks, which checks failed in which repeat, and the mean with a
95% interval of its RPS and p95 (for the plots); for each step between stages, the
paired test of its ratios within each repeat (benchmarks/analysis/stats.py). The
report, summary.csv and the throughput plot read this.
"""

from __future__ import annotations

from pathlib import Path

from benchmarks import stages
from benchmarks.analysis import stats
from benchmarks.checks import counted
from benchmarks.run import results

FIGURES = ("rps", "p95_ms")  # the figures given a mean and an interval
FOREIGN = "foreign_cpu_pct"  # listed per repeat: a neighbour widens an interval
# summary.csv's columns after metrics.SUMMARY_COLUMNS: how many repeats measured the
# stage and passed all its checks; RPS and p95, each a mean, its standard deviation
# and 95% interval (the interval empty with one repeat)
COLUMNS = ("repeats", "repeats_passed", "rps_mean", "rps_sd", "rps_ci_low", "rps_ci_high",
           "p95_mean", "p95_sd", "p95_ci_low", "p95_ci_high")


def by_stage(run_dir: Path) -> dict[str, dict]:
    """{stage key: {"stage", "repeats", "passed", "failed_checks": [(repeat, check)],
    "rps": interval, "p95_ms": interval}}, in registry order."""
    found: dict[str, dict] = {}
    for repeat, root in enumerate(results.repeat_dirs(run_dir), start=1):
        for stage, folder in results.measured_stages(root):
            entry = found.setdefault(stage.key, {"stage": stage, "repeats": 0, "passed": 0,
                                                 "failed_checks": [], "values": {},
                                                 "rps_by_repeat": {}})
            m = results.read_json(folder / results.METRICS_JSON)
            checks = counted(results.read_json(folder / results.CHECKS_JSON))
            entry["repeats"] += 1
            entry["passed"] += all(c["passed"] for c in checks)
            entry["failed_checks"] += [(repeat, c) for c in checks if not c["passed"]]
            for name in (*FIGURES, FOREIGN):
                entry["values"].setdefault(name, []).append(m.get(name))
            entry["rps_by_repeat"][repeat] = m.get("rps")
    for entry in found.values():
        for name in FIGURES:
            entry[name] = stats.interval(entry["values"].get(name, []))
    order = [s.key for s in stages.STAGES]
    return dict(sorted(found.items(), key=lambda kv: order.index(kv[0])))


def columns(entry: dict) -> dict:
    """A stage's summary.csv columns of the repeats (COLUMNS)."""
    row = {"repeats": entry["repeats"], "repeats_passed": entry["passed"]}
    for name, short in (("rps", "rps"), ("p95_ms", "p95")):
        iv = entry[name]
        row.update({f"{short}_mean": _round(iv["mean"]), f"{short}_sd": _round(iv["sd"]),
                    f"{short}_ci_low": _round(iv["low"]), f"{short}_ci_high": _round(iv["high"])})
    return row


def disturbed(entry: dict, limit: float) -> int:
    """How many of a stage's repeats lost more than `limit` % of the server's CPUs to
    other processes."""
    return sum((v or 0) > limit for v in entry["values"].get(FOREIGN, []))


def steps(entries: dict) -> list[tuple[dict, dict, list[float], dict]]:
    """(a stage, the next, the RPS ratios within each repeat, their paired test
    (stats.step)) for consecutive stages, then, with three stages or more, the first
    against the last: the whole way (stage 5 to 8 in lab 13)."""
    ordered = list(entries.values())
    pairs = list(zip(ordered, ordered[1:], strict=False))
    pairs += [(ordered[0], ordered[-1])] if len(ordered) > 2 else []
    return [(a, b, *paired(a, b)) for a, b in pairs]


def paired(a: dict, b: dict) -> tuple[list[float], dict]:
    """The step's RPS ratio b/a within each repeat that measured both, and their paired
    test: the stages ran side by side in each repeat, so a drift of the box that moved
    both leaves their ratio alone."""
    ratios = [b["rps_by_repeat"][k] / a["rps_by_repeat"][k] for k in a["rps_by_repeat"]
              if a["rps_by_repeat"][k] and b["rps_by_repeat"].get(k)]
    return ratios, stats.step(ratios)


def _round(value):
    return None if value is None else round(value, 1)
