"""What `lab run --repeats N` measured: each stage's figures over its repeats.

Repeat 1's stage folders are the run's own, repeat k's are under repeats/K/
(benchmarks/run/results.py). For every stage: how many repeats measured it and
passed all its checks, which checks failed in which repeat, and the geometric mean
with a 95% interval of its RPS and p95 (stats.interval, log scale); for each step
between stages, the paired test of its ratios within each repeat
(benchmarks/analysis/stats.py). The report, summary.csv and the throughput plot read
this. Beside the rate, the tail: each step's ratio of p95, p99 and Socket.IO's ack p95,
tested the same way (TAIL).
"""

from __future__ import annotations

from pathlib import Path

from benchmarks import latency_log, stages
from benchmarks.analysis import metrics, stats
from benchmarks.checks import counted
from benchmarks.run import results

FIGURES = ("rps", "p95_ms")  # the figures given an interval in summary.csv
FOREIGN = "foreign_cpu_pct"  # listed per repeat: a neighbour widens an interval
# the tail beside the rate: each stage's HTTP p95 and p99 and Socket.IO's ack p95, each
# repeat's from its latency.hlog (HdrHistogram, 3 digits) where the folder has one,
# else Locust's (metrics.json); {figure: (fraction, its requests' count in metrics.json,
# which rows of the .hlog)}
TAIL = {"p95_ms": (0.95, "requests", metrics.http_tag),
        "p99_ms": (0.99, "requests", metrics.http_tag),
        "sio_p95_ms": (0.95, "sio_requests", lambda tag: not metrics.http_tag(tag))}
CPU = "server_cpu_ms"  # every server role's CPU per request (metrics.json), a step's price
PAIRED = ("rps", *TAIL, CPU)  # the figures whose steps are tested within each repeat
# summary.csv's columns after metrics.SUMMARY_COLUMNS: how many repeats measured the
# stage and passed all its checks; RPS and p95, each a geometric mean, the standard
# deviation of the values and the 95% interval of the geometric mean (stats.interval;
# the interval empty with one repeat)
COLUMNS = ("repeats", "repeats_passed", "rps_gmean", "rps_sd", "rps_ci_low", "rps_ci_high",
           "p95_gmean", "p95_sd", "p95_ci_low", "p95_ci_high")


def tail(folder: Path, m: dict) -> tuple[dict, str]:
    """One repeat's TAIL figures and where they come from (`hdrhistogram` or `locust`,
    stats.SOURCES); a percentile of too few requests (stats.too_few) is None."""
    hlog = folder / results.LATENCY_HLOG
    out, read = {}, {}  # read: each set of rows' times, read once
    for name, (fraction, count, rows) in TAIL.items():
        if hlog.exists():
            times = read[rows] = read.get(rows) or latency_log.times_ms(hlog, rows)
            n, value = sum(times.values()), stats.percentile(times, fraction)
        else:
            n, value = m.get(count), m.get(name)
        out[name] = None if stats.too_few(fraction, n) else value
    return out, "hdrhistogram" if hlog.exists() else "locust"


def by_stage(run_dir: Path) -> dict[str, dict]:
    """{stage key: {"stage", "repeats", "passed", "failed_checks": [(repeat, check)],
    "values": {figure: [each repeat's]}, "by_repeat": {figure: {repeat: value}},
    "sources": {tail source}, and an interval (stats.interval) of each of FIGURES and
    TAIL}}, in registry order."""
    found: dict[str, dict] = {}
    for repeat, root in enumerate(results.repeat_dirs(run_dir), start=1):
        for stage, folder in results.measured_stages(root):
            entry = found.setdefault(stage.key, {"stage": stage, "repeats": 0, "passed": 0,
                                                 "failed_checks": [], "values": {},
                                                 "by_repeat": {}, "sources": set()})
            m = results.read_json(folder / results.METRICS_JSON)
            checks = counted(results.read_json(folder / results.CHECKS_JSON))
            entry["repeats"] += 1
            entry["passed"] += all(c["passed"] for c in checks)
            entry["failed_checks"] += [(repeat, c) for c in checks if not c["passed"]]
            tails, source = tail(folder, m)
            entry["sources"].add(source)
            figures = {"rps": m.get("rps"), FOREIGN: m.get(FOREIGN), **tails,
                       CPU: m.get("server_cpu_ms_per_request")}
            for name, value in figures.items():
                entry["values"].setdefault(name, []).append(value)
                entry["by_repeat"].setdefault(name, {})[repeat] = value
    for entry in found.values():
        for name in dict.fromkeys((*FIGURES, *TAIL)):
            entry[name] = stats.interval(entry["values"].get(name, []))
    order = [s.key for s in stages.STAGES]
    return dict(sorted(found.items(), key=lambda kv: order.index(kv[0])))


def columns(entry: dict) -> dict:
    """A stage's summary.csv columns of the repeats (COLUMNS)."""
    row = {"repeats": entry["repeats"], "repeats_passed": entry["passed"]}
    for name, short in (("rps", "rps"), ("p95_ms", "p95")):
        iv = entry[name]
        row.update({f"{short}_gmean": _round(iv["mean"]), f"{short}_sd": _round(iv["sd"]),
                    f"{short}_ci_low": _round(iv["low"]), f"{short}_ci_high": _round(iv["high"])})
    return row


def disturbed(entry: dict, limit: float) -> int:
    """How many of a stage's repeats lost more than `limit` % of the server's CPUs to
    other processes."""
    return sum((v or 0) > limit for v in entry["values"].get(FOREIGN, []))


def steps(entries: dict, figure: str = "rps") -> list[tuple[dict, dict, list[float], dict]]:
    """(a stage, the next, the ratios of `figure` within each repeat, their paired test
    (stats.step)) for consecutive stages, then, with three stages or more, the first
    against the last: the whole way (stage 5 to 8 in lab 13); then each twin against its
    base stage when the run has both and no step above is that one (9 -> 9o in lab 17)."""
    ordered = list(entries.values())
    pairs = list(zip(ordered, ordered[1:], strict=False))
    pairs += [(ordered[0], ordered[-1])] if len(ordered) > 2 else []
    base = {e["stage"].key: e for e in ordered}
    done = {(a["stage"].key, b["stage"].key) for a, b in pairs}
    pairs += [(base[e["stage"].twin_of], e) for e in ordered
              if e["stage"].twin_of in base and (e["stage"].twin_of, e["stage"].key) not in done]
    return [(a, b, *paired(a, b, figure)) for a, b in pairs]


def tested(entries: dict) -> dict[str, list[tuple[dict, dict, list[float], dict]]]:
    """Every step the report tests, by figure of PAIRED ({figure: steps(entries, figure)},
    a step that neither stage recorded left out), their tests adjusted together as one
    family (stats.family: Holm's method over all of them)."""
    found = {figure: [s for s in steps(entries, figure) if s[3]["ratio"] is not None]
             for figure in PAIRED}
    flat = [(figure, i) for figure, each in found.items() for i in range(len(each))]
    adjusted = stats.family([found[figure][i][3] for figure, i in flat])
    for (figure, i), test in zip(flat, adjusted, strict=True):
        found[figure][i] = (*found[figure][i][:3], test)
    return found


def paired(a: dict, b: dict, figure: str = "rps") -> tuple[list[float], dict]:
    """The step's ratio b/a of `figure` (RPS, a percentile) within each repeat that
    measured both, and their paired test: the stages ran side by side in each repeat, so
    a drift of the box that moved both leaves their ratio alone."""
    mine, theirs = a["by_repeat"].get(figure, {}), b["by_repeat"].get(figure, {})
    ratios = [theirs[k] / mine[k] for k in mine if mine[k] and theirs.get(k)]
    return ratios, stats.step(ratios)


def _round(value):
    return None if value is None else round(value, 1)
