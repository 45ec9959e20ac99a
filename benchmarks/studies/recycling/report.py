"""A variant's figures from its requests and restarts, and the study's report.md."""

from __future__ import annotations

import collections
import math

from hdrh.histogram import HdrHistogram

from benchmarks.studies.recycling.load import Outcome

NEAR_S = 1.0  # a second "has a restart" when a worker left within this of it


def tail(latencies_ms: list[float]) -> dict:
    """p50, p99, p99.9 and max in ms (HdrHistogram, 3 significant digits)."""
    h = HdrHistogram(1, 60_000_000, 3)  # µs
    for ms in latencies_ms:
        h.record_value(max(1, round(ms * 1000)))
    if not latencies_ms:
        return {"p50_ms": None, "p99_ms": None, "p999_ms": None, "max_ms": None}
    top = round(max(latencies_ms), 1)  # HdrHistogram's value is its bucket's top: capped
    return {"p50_ms": min(top, h.get_value_at_percentile(50) / 1000),
            "p99_ms": min(top, h.get_value_at_percentile(99) / 1000),
            "p999_ms": min(top, h.get_value_at_percentile(99.9) / 1000), "max_ms": top}


def together(restarts: list[dict]) -> int:
    """The most workers that exited within NEAR_S of one another: what jitter spreads."""
    exits = sorted(r["exit_s"] for r in restarts)
    return max((sum(1 for t in exits if first <= t <= first + NEAR_S) for first in exits),
               default=0)


def summarize(outcomes: list[Outcome], restarts: list[dict]) -> dict:
    """The run's tail, errors by kind, and each second's worst: with a restart near it, or not."""
    kinds = collections.Counter(o.kind for o in outcomes)
    answered = [o.latency_ms for o in outcomes if o.kind in ("ok", "4xx", "5xx")]
    worst = collections.defaultdict(float)
    for o in outcomes:
        worst[math.floor(o.intended)] = max(worst[math.floor(o.intended)], o.latency_ms)
    near = {s for r in restarts for s in worst if abs(s + 0.5 - r["exit_s"]) <= 0.5 + NEAR_S}
    return {"requests": len(outcomes), "outcomes": dict(kinds), "restarts": len(restarts),
            "together": together(restarts), **tail(answered),
            "worst_second_near_restart_ms": round(max((worst[s] for s in near), default=0), 1),
            "worst_second_elsewhere_ms": round(max((v for s, v in worst.items()
                                                    if s not in near), default=0), 1)}


def cell(value) -> str:
    return "-" if value is None else f"{value:,.1f}" if isinstance(value, float) else f"{value:,}"


def tail_table(rows: list[dict]) -> str:
    head = ("| variant | repeat | restarts | most within 1 s | p99 ms | p99.9 ms | max ms | "
            "worst second near a restart, ms | elsewhere, ms | failed (kind) |")
    lines = [head, "|---" * (head.count("|") - 1) + "|"]
    for r in rows:
        failed = ", ".join(f"{n} {k}" for k, n in r["outcomes"].items() if k != "ok") or "0"
        lines.append(f"| {r['variant']} | {r['repeat']} | {r['restarts']} | "
                     f"{r['together']} | {cell(r['p99_ms'])} | {cell(r['p999_ms'])} | "
                     f"{cell(r['max_ms'])} | {cell(r['worst_second_near_restart_ms'])} | "
                     f"{cell(r['worst_second_elsewhere_ms'])} | {failed} |")
    return "\n".join(lines)


def metrics_table(rows: list[dict]) -> str:
    lines = ["| child_exit | repeat | restarts | files (of exited workers) | KiB | "
             "scrape ms (median) | scrape ms (max) | requests scraped / answered |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['variant']} | {r['repeat']} | {r['restarts']} | {r['files']} "
                     f"({r['dead_files']}) | "
                     f"{r['bytes'] / 1024:,.0f} | {r['scrape_ms_median']:,.2f} | "
                     f"{r['scrape_ms_max']:,.2f} | {r['counted']:,.0f} / {r['answered']:,} |")
    return "\n".join(lines)


def paired(rows: list[dict], over: str, under: str, key: str = "p999_ms") -> dict:
    """The paired test (stats.step) of `over`'s `key` against `under`'s, a ratio within
    each repeat."""
    from benchmarks.analysis import stats

    by = {(r["variant"], r["repeat"]): r[key] for r in rows}
    repeats = sorted({r["repeat"] for r in rows})
    return stats.step([by[(over, k)] / by[(under, k)] for k in repeats
                       if by.get((over, k)) and by.get((under, k))])


def label(workers: int) -> str:
    """`1 worker`, `4 workers`."""
    return f"{workers} worker{'' if workers == 1 else 's'}"


def steps(rows: list[dict], workers: list[int], max_requests: int, jitter: list[int]) -> str:
    """Each recycled variant's p99.9 against no recycling, and each jitter against none,
    for every worker count: their count, then a line each, tested as one family
    (stats.family: Holm's method)."""
    from benchmarks.analysis import stats

    said = []
    for w in workers:
        plain = f"{label(w)}, no recycling"
        names = {j: f"{label(w)}, max_requests {max_requests}, jitter {j}" for j in jitter}
        said += [(f"{name} / no recycling", paired(rows, name, plain))
                 for name in names.values()]
        said += [(f"{label(w)}, jitter {j} / jitter 0", paired(rows, names[j], names[0]))
                 for j in jitter if j and 0 in names]
    tested = list(zip((n for n, _ in said), stats.family([t for _, t in said]), strict=True))
    return "\n".join([stats.family_line(tested, start=True) + ":", "",
                      *[f"- {name}, p99.9: {stats.verdict(t)}" for name, t in tested]])


def growth_table(rows: list[dict]) -> str:
    lines = ["| exited workers | files | a scrape, ms | folded: files | folded: a scrape, ms |",
             "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['exited_workers']:,} | {r['files']:,} | {r['scrape_ms']:,.2f} | "
                     f"{r['folded_files']} | {r['folded_scrape_ms']:,.2f} |")
    return "\n".join(lines)
