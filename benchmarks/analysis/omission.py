"""The closed and the open model side by side: a coordinated-omission study's figures.

benchmarks/studies/omission.py measures; this module reads what it wrote
(`omission.csv`, a row per Locust run) and turns it into intervals, a table, the
report's section and two plots, so the study, `python -m benchmarks.analysis.report`
and the notebook say the same thing:

    from benchmarks.analysis import omission
    rows = omission.read(run_dir)                   # [] where the run has no such file
    print(omission.table(omission.summarize(rows)))
    omission.hockey_stick(rows, out="p99.png")      # p99 against offered load
    omission.spectrum(rows, out="spectrum.png")     # latency at 50 ... 99.99% under the stall

Latencies are in ms. The closed model's count from when a user sent its request;
the open model's from each request's intended start. Percentiles follow the lab's one
rule (stats.percentile, Locust's) on each run's `latency.hlog` (HdrHistogram, 3
significant digits: column `percentiles_from`; a study from before it has Locust's
buckets), and the table and the spectrum show one only where the runs had the
requests to support it (stats.too_few).
"""

from __future__ import annotations

import csv
from pathlib import Path

from benchmarks.analysis import stats

# matplotlib is imported by the plots only (drawing.py): the report imports this module,
# and `lab list` imports the report

OMISSION_CSV = "omission.csv"
SUMMARY_CSV = "omission-summary.csv"
MODELS = ("closed", "open")
STALL = "stall"  # the level of the runs with the app's workers stopped for a while
SPECTRUM = (50, 90, 99, 99.9, 99.99)  # percentiles drawn by `spectrum`
SLOW_MS = 1000  # a request this slow counts in `slow` (the stall's mark)
COLUMNS = ("stage", "model", "level", "rate", "repeat", "users", "requests", "failures",
           "rps", *(f"p{str(p).replace('.', '_')}" for p in SPECTRUM), "max", "slow",
           "late", "stall_s", "unreliable", "percentiles_from")
SUMMARY_COLUMNS = ("stage", "level", "rate", "model", "n", "rps_mean", "p50_gmean", "p50_low",
                   "p50_high", "p99_gmean", "p99_low", "p99_high", "slow_mean", "late",
                   "unreliable", "percentiles_from")
FILES = {"hdrhistogram": "latency.hlog", "locust": "locust.json"}  # (results.py's names)
COLORS = {"closed": "#1f77b4", "open": "#d62728"}


def column(p: float) -> str:
    """`p99_9` for 99.9: the CSV column of a percentile."""
    return f"p{str(p).replace('.', '_')}"


def figures(times: dict[int, int]) -> dict:
    """The spectrum, the slowest and how many took over SLOW_MS, from a histogram."""
    out = {column(p): stats.percentile(times, p / 100) for p in SPECTRUM}
    out["max"] = max(times) if times else None
    out["slow"] = sum(n for ms, n in times.items() if ms > SLOW_MS)
    return out


def ms(row: dict, p: float) -> str:
    """`1800 ms`, or `too few (2,936)` when the run's requests cannot support the `p`th
    percentile (a row of omission.csv, or of the summary with `requests`: its fewest)."""
    if stats.too_few(p / 100, row["requests"]):
        return f"too few ({row['requests'] or 0:,})"
    return f"{_fmt(row[column(p)])} ms"


def read(run_dir: Path) -> list[dict]:
    """omission.csv's rows with numbers as numbers ([] without the file)."""
    path = Path(run_dir) / OMISSION_CSV
    if not path.exists():
        return []
    with open(path, newline="") as f:
        return [{k: _number(v) for k, v in row.items()} for row in csv.DictReader(f)]


def _number(text: str):
    if text in ("", None):
        return None
    try:
        value = float(text)
    except ValueError:
        return text
    return int(value) if value.is_integer() and "." not in text else value


def write(path: Path, columns, rows: list[dict]) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)


def _key(level) -> tuple:
    """Load levels in order (50, 80, 95, 110), the stall last."""
    return (1, 0) if level == STALL else (0, float(level))


def summarize(rows: list[dict]) -> list[dict]:
    """Per stage, level and model: the repeats' p50/p99, each a geometric mean with its 95%
    interval (stats.interval, log scale); RPS and the slow requests, arithmetic means."""
    out = []
    for stage in dict.fromkeys(str(r["stage"]) for r in rows):
        mine = [r for r in rows if str(r["stage"]) == stage]
        for level in sorted(dict.fromkeys(r["level"] for r in mine), key=_key):
            for model in MODELS:
                runs = [r for r in mine if r["level"] == level and r["model"] == model]
                if not runs:
                    continue
                p50, p99 = (stats.interval(r[c] for r in runs) for c in ("p50", "p99"))
                out.append({"stage": stage, "level": level, "rate": runs[0]["rate"],
                            "model": model, "n": p99["n"],
                            "requests": min(r["requests"] or 0 for r in runs),
                            "rps_mean": _r(stats.mean(r["rps"] for r in runs)),
                            **{f"{name}_{k}": _r(iv[key], 3) for name, iv in (("p50", p50),
                                                                          ("p99", p99))
                               for k, key in (("gmean", "mean"), ("low", "low"),
                                              ("high", "high"))},
                            "slow_mean": _r(stats.mean(r["slow"] for r in runs)),
                            "late": sum(r.get("late") or 0 for r in runs),
                            "unreliable": sum(bool(r.get("unreliable")) for r in runs),
                            "percentiles_from": source(runs)})
    return out


def _r(value, digits: int = 1):
    return None if value is None else round(value, digits)


def shown(s: dict, name: str) -> str:
    """`120 [95, 145]`, or the mean alone with one repeat; `too few (N)` when the fewest
    requests of a run cannot support the percentile."""
    mean, low, high = s[f"{name}_gmean"], s[f"{name}_low"], s[f"{name}_high"]
    if mean is None:
        return "-"
    if stats.too_few(float(name[1:]) / 100, s.get("requests")):
        return f"too few ({s['requests']:,})"
    if low is None:
        return _ms(mean)
    return f"{_ms(mean)} [{_ms(low)}, {_ms(high)}]"


def _ms(value: float) -> str:
    """Whole ms; under 1 ms two significant digits, so that a low bound reads as the
    positive time it is (0.12, not 0)."""
    return f"{value:.0f}" if value >= 1 else f"{value:.2g}"


def level_name(level) -> str:
    return "stall" if level == STALL else f"{level:g}%"


def table(summary: list[dict]) -> str:
    """A Markdown table: per stage and level, both models' p50 and p99 (ms) side by side;
    the repeats whose open-model schedule slipped are counted as unreliable."""
    lines = ["| stage | load | offered req/s | model | answered req/s | p50 ms | p99 ms | "
             f"over {SLOW_MS} ms | repeats |", "|---|---|---|---|---|---|---|---|---|"]
    for s in summary:
        lines.append(f"| {s['stage']} | {level_name(s['level'])} | {s['rate']:g} | "
                     f"{s['model']} | {_fmt(s['rps_mean'])} | {shown(s, 'p50')} | "
                     f"{shown(s, 'p99')} | {_fmt(s['slow_mean'])} | {s['n']}"
                     + (f" ({s['unreliable']} unreliable)" if s.get("unreliable") else "")
                     + " |")
    return "\n".join(lines)


def _fmt(value) -> str:
    return "-" if value is None else f"{value:.0f}"


def source(rows: list[dict]) -> str:
    """Where the rows' percentiles come from: `hdrhistogram`, `locust` (a study from before
    the .hlog) or both, `+`-joined."""
    return "+".join(sorted({r.get("percentiles_from") or "locust" for r in rows}))


def source_line(rows: list[dict]) -> str:
    """`Percentiles: HdrHistogram, 3 digits (each run's latency.hlog).`"""
    return "Percentiles: " + "; ".join(f"{stats.SOURCES[s]} (each run's {FILES[s]})"
                                       for s in source(rows).split("+")) + "."


def section(run_dir: Path) -> str:
    """report.md's section for a run that has both models, or ""."""
    rows = read(run_dir)
    if not {r["model"] for r in rows} >= set(MODELS):
        return ""
    return "\n".join([
        "## The closed and the open model", "",
        "The same chat mix at the same offered rate: the closed model's users each wait "
        "for their answer (paced to the rate), the open model starts requests on a "
        "schedule and times them from their intended start. Over the repeats: p50 and "
        "p99 geometric means with their 95% intervals in brackets (log scale: a "
        "time's interval cannot cross zero), answered req/s and the slow requests "
        "arithmetic means; `stall` is a run with the app's workers stopped "
        "for a few seconds, 1 s after its load reached the app "
        "(benchmarks/studies/omission.py). A percentile is shown where every run had "
        f"at least {stats.ENOUGH} requests beyond it (p99: {stats.needed(0.99):,}).", "",
        table(summarize(rows)), "", source_line(rows), ""])


def write_report(run_dir: Path) -> str:
    """A study folder's summary CSV, plots and report.md, rebuilt from omission.csv; the
    table."""
    run_dir = Path(run_dir)
    rows = read(run_dir)
    summary = summarize(rows)
    write(run_dir / SUMMARY_CSV, SUMMARY_COLUMNS, summary)
    hockey_stick(rows, out=run_dir / "hockey_stick.png")
    spectrum(rows, out=run_dir / "spectrum.png")
    (run_dir / "report.md").write_text(
        f"# Coordinated omission, {run_dir.name}\n\n" + section(run_dir)
        + "\n![p99 against offered load](hockey_stick.png)\n\n"
        "![Percentile spectrum under the stall](spectrum.png)\n")
    return table(summary) + "\n\n" + source_line(rows)


def _stages(rows: list[dict]) -> list[str]:
    return list(dict.fromkeys(str(r["stage"]) for r in rows))


def hockey_stick(rows: list[dict], out=None):
    """p99 against offered load (% of the capacity), a line per model, a panel per stage,
    the repeats' 95% interval as error bars; None without load levels."""
    summary = [s for s in summarize(rows) if s["level"] != STALL]
    if not summary:
        return None
    from benchmarks.analysis.drawing import figure, finish
    names = _stages(rows)
    fig = figure(4 * len(names) + 0.5, 3.2)
    for ax, stage in zip(fig.subplots(1, len(names), squeeze=False)[0], names, strict=True):
        for model in MODELS:
            pts = [s for s in summary if s["stage"] == stage and s["model"] == model]
            xs = [float(s["level"]) for s in pts]
            ys = [s["p99_gmean"] for s in pts]
            low = [s["p99_gmean"] - s["p99_low"] if s["p99_low"] is not None else 0
                   for s in pts]
            high = [s["p99_high"] - s["p99_gmean"] if s["p99_high"] is not None else 0
                    for s in pts]
            ax.errorbar(xs, ys, yerr=[low, high], marker="o",
                        capsize=3, color=COLORS[model], label=f"{model} model")
        _style(ax, stage, "offered load, % of capacity", "p99 latency, ms")
    fig.suptitle("p99 against offered load: the closed and the open model", fontsize=11)
    return finish(fig, "hockey_stick", out)


def _style(ax, stage: str, xlabel: str, ylabel: str) -> None:
    """A stage's panel: log latency, its labels, a light grid, the models' legend."""
    ax.set_yscale("log")
    ax.set_title(f"stage {stage}", fontsize=10)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)


def spectrum(rows: list[dict], level=STALL, out=None):
    """Latency at 50, 90, 99, 99.9, 99.99% per model (geometric mean over repeats), a panel per
    stage, for the runs at `level` (default: the stall); None without them."""
    chosen = [r for r in rows if r["level"] == level]
    if not chosen:
        return None
    from benchmarks.analysis.drawing import figure, finish
    names = _stages(chosen)
    fig = figure(4 * len(names) + 0.5, 3.2)
    ticks = list(range(len(SPECTRUM)))
    for ax, stage in zip(fig.subplots(1, len(names), squeeze=False)[0], names, strict=True):
        for model in MODELS:
            runs = [r for r in chosen if str(r["stage"]) == stage and r["model"] == model]
            if not runs:
                continue
            fewest = min(r["requests"] or 0 for r in runs)
            ys = [None if stats.too_few(p / 100, fewest) else
                  stats.interval(r[column(p)] for r in runs)["mean"] for p in SPECTRUM]
            ax.plot(ticks, ys, marker="o", color=COLORS[model], label=f"{model} model")
        fewest = min(r["requests"] or 0 for r in chosen if str(r["stage"]) == stage)
        ax.set_xticks(ticks, [f"{p:g}%" + ("\ntoo few" if stats.too_few(p / 100, fewest)
                                          else "") for p in SPECTRUM])
        _style(ax, stage, "percentile", "latency, ms")
    what = "under a stall of the app" if level == STALL else f"at {level_name(level)} load"
    fig.suptitle(f"Percentile spectrum {what} (drawn where every run had {stats.ENOUGH} "
                 "requests beyond the percentile)", fontsize=10)
    return finish(fig, "spectrum", out)
