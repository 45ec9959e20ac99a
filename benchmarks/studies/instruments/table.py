"""The instruments study's table: each instrument's CPU per request and its cost over bare.

    from benchmarks.studies.instruments import table
    rows = table.summarize(results.read_json(folder / results.INSTRUMENTS_JSON))
    print(table.table(rows))

Per instrument, from each repeat's figures (study.py): the mix's app CPU per request in
us (each type's, weighted as ChatUser weights the types: benchmarks/studies/floor.py's
`mix`), its geometric mean and 95% interval over the repeats (stats.interval); the step
from bare, judged on the ratio within each repeat (stats.step: geometric mean, 95%
interval, p of the paired t test on the logs); the extra us over bare, that ratio's
interval times bare's geometric mean (so it is the step's, not a statistic of its own);
spans per request (the mix's: each type's spans made per request, weighted), the spans
the sink received against those made (lost = the difference); the sink's CPU per
request timed.
"""

from __future__ import annotations

import csv
from pathlib import Path

from benchmarks.analysis import stats
from benchmarks.analysis.floor import REDIS_CPU, mix, shown
from benchmarks.run import results

BARE = "bare"
CSV_COLUMNS = ("instrument", "ratio_kept", "cpu_us", "cpu_us_low", "cpu_us_high", "extra_us",
               "extra_us_low", "extra_us_high", "x_bare", "x_bare_low", "x_bare_high", "p",
               "spans_per_request", "spans_made", "spans_received", "spans_lost",
               "server_spans_per_request", "sink_cpu_us", "sink_cpu_us_low", "sink_cpu_us_high",
               "redis_cpu_us", "requests_timed")


def us(repeat: dict, weights: dict, figure: str = "app_cpu_ms") -> float:
    return 1000 * mix(repeat["types"], weights, figure)


def timed(repeat: dict) -> int:
    return sum(t["requests"] for t in repeat["types"].values())


def spans(data: dict, name: str) -> dict:
    """Spans per request of the mix (made, each type weighted), SERVER spans received
    per request timed, and the totals over the worker's life (made, received, lost)."""
    weights, reps = data["weights"], [r[name] for r in data["repeats"]]
    per_type = [sum(w * r["types"][t]["spans_made"] / r["types"][t]["requests"]
                    for t, w in weights.items()) / sum(weights.values()) for r in reps]
    total = data["totals"].get(name, {})
    life = {k: sum(r[k] for r in reps) + total.get(f"{k}_at_start", 0)
            + total.get(f"{k}_at_stop", 0) for k in ("spans", "server_spans")}
    made = total.get("spans_made", 0)
    return {"per_request": stats.mean(per_type),
            "server_per_request": sum(r["server_spans"] for r in reps) / sum(map(timed, reps)),
            "made": made, "received": life["spans"], "lost": made - life["spans"],
            "server_received": life["server_spans"], "requests": total.get("requests")}


def summarize(data: dict) -> list[dict]:
    """A row per instrument, bare first."""
    weights, reps = data["weights"], data["repeats"]
    bare = [us(r[BARE], weights) for r in reps]
    base = stats.interval(bare)["mean"]
    rows = []
    for v in data["instruments"]:
        name = v["name"]
        mine = [us(r[name], weights) for r in reps]
        ratios = [m / b for m, b in zip(mine, bare, strict=True)]
        step = None if name == BARE else stats.step(ratios)
        extra = None if step is None else {k: None if step[k] is None else base * (step[k] - 1)
                                           for k in ("ratio", "low", "high")}
        rows.append({"instrument": name, "ratio_kept": v["ratio"],
                     "cpu_us": stats.interval(mine), "step": step, "extra_us": extra,
                     "spans": spans(data, name) if v["ratio"] else None,
                     "sink_cpu_us": stats.interval([1e6 * r[name]["sink_cpu_s"] / timed(r[name])
                                                    for r in reps]) if v["ratio"] else None,
                     "redis_cpu_us": stats.interval([us(r[name], weights, "redis_cpu_ms")
                                                     for r in reps]),
                     "requests": sum(timed(r[name]) for r in reps)})
    rows = sorted(rows, key=lambda r: r["instrument"] != BARE)
    tested = [r for r in rows if r["step"]]  # one family: Holm's method over the instruments
    for r, step in zip(tested, stats.family([r["step"] for r in tested]), strict=True):
        r["step"] = step
    return rows


def _extra(e: dict | None) -> str:
    if e is None:
        return "-"
    if e["low"] is None:
        return f"{e['ratio']:+.1f}"
    return f"{e['ratio']:+.1f} [{e['low']:+.1f}, {e['high']:+.1f}]"


def _spans(s: dict | None) -> str:
    if s is None:
        return "-"
    return (f"{s['per_request']:.2f} ({s['server_per_request']:.3f} server) | "
            f"{s['received']:,} of {s['made']:,}, {s['lost']:,} lost")


def table(rows: list[dict]) -> str:
    lines = ["| instrument | us CPU/request | extra us over bare | x bare, p | spans/request | "
             "spans received | sink CPU us/request | Redis CPU us/request |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        spans_cells = _spans(r["spans"]) if r["spans"] else "- | -"
        lines.append(f"| {r['instrument']} | {shown(r['cpu_us'], 1)} | {_extra(r['extra_us'])} | "
                     f"{stats.verdict(r['step']) if r['step'] else '-'} | {spans_cells} | "
                     f"{shown(r['sink_cpu_us'], 1) if r['sink_cpu_us'] else '-'} | "
                     f"{shown(r['redis_cpu_us'], 1)} |")
    return "\n".join(lines)


def csv_row(r: dict) -> dict:
    iv, step, extra = r["cpu_us"], r["step"] or {}, r["extra_us"] or {}
    s, sink = r["spans"] or {}, r["sink_cpu_us"] or {}
    return {"instrument": r["instrument"], "ratio_kept": r["ratio_kept"],
            "cpu_us": _r(iv["mean"]), "cpu_us_low": _r(iv["low"]), "cpu_us_high": _r(iv["high"]),
            "extra_us": _r(extra.get("ratio")), "extra_us_low": _r(extra.get("low")),
            "extra_us_high": _r(extra.get("high")), "x_bare": _r(step.get("ratio")),
            "x_bare_low": _r(step.get("low")), "x_bare_high": _r(step.get("high")),
            "p": _r(step.get("p"), 6), "spans_per_request": _r(s.get("per_request")),
            "spans_made": s.get("made"), "spans_received": s.get("received"),
            "spans_lost": s.get("lost"),
            "server_spans_per_request": _r(s.get("server_per_request")),
            "sink_cpu_us": _r(sink.get("mean")), "sink_cpu_us_low": _r(sink.get("low")),
            "sink_cpu_us_high": _r(sink.get("high")),
            "redis_cpu_us": _r(r["redis_cpu_us"]["mean"]),
            "requests_timed": r["requests"]}


def _r(value, digits: int = 3):
    return None if value is None else round(value, digits)


def about(data: dict) -> str:
    box, n = data["box"], len(data["repeats"])
    mode = "multiprocess" if data.get("prometheus_multiprocess") else "single-process"
    return (f"Stage {data['stage']}'s app in-process (benchmarks/studies/instruments/), bare "
            f"and with each instrument, a process each on CPU {data['cpus']['app']}; Redis on "
            f"CPU {data['cpus']['redis']} ({REDIS_CPU[data['redis_cpu']]}), the OTLP sink on "
            f"CPU {data['cpus']['sink']}. Each request type for {data['seconds']:g} s per "
            f"instrument and repeat, {n} repeat(s), the instruments' order turned by one each "
            f"repeat; commit `{data.get('git_commit')}`. us CPU/request: the app process's CPU "
            "(every thread; with tracing, each loop's force_flush counted in) per request of "
            "the chat mix, geometric mean [95% interval] over the repeats; x bare: the ratio "
            "within each repeat, geometric mean [95% interval], p of the paired t test on the "
            "logs (stats.step), adjusted for the instruments tested together by Holm's "
            "method (stats.family; the count is given under the table); extra us: bare's "
            "geometric mean x (that ratio - 1), its "
            "interval from the ratio's. Spans/request: spans made per request of the mix (each "
            "type's, weighted) and, in brackets, SERVER spans received per request timed; "
            "spans received: by the sink over each worker's life, against those its app made. "
            f"While it measured, the load average went from {box['load_average'][0]:g} to "
            f"{box['load_average'][1]:g}; other processes used {box['others_cpu_pct']:g}% of "
            f"the app's CPU and {box['others_sink_cpu_pct']:g}% of the sink's. prometheus "
            f"(app/watchers/metrics.py) in {mode} mode (PROMETHEUS_MULTIPROC_DIR); flask-exporter "
            "with PrometheusMetrics' defaults.")


def per_type(data: dict) -> str:
    """us of app CPU per request of each type (geometric mean over the repeats)."""
    names = [v["name"] for v in data["instruments"]]
    lines = ["| request type | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    for t in data["weights"]:
        cells = [stats.interval([1000 * r[n]["types"][t]["app_cpu_ms"] for r in data["repeats"]])
                 ["mean"] for n in names]
        lines.append(f"| {t} | " + " | ".join(f"{c:.1f}" for c in cells) + " |")
    return "\n".join(lines)


def write(folder: Path, data: dict) -> None:
    """instruments.json, instruments.csv and report.md."""
    folder = Path(folder)
    results.write_json(folder / results.INSTRUMENTS_JSON, data)
    rows = summarize(data)
    with open(folder / results.INSTRUMENTS_CSV, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        writer.writerows(csv_row(r) for r in rows)
    text = [f"# What each instrument costs ({folder.name})", "", "```bash", data["command"],
            "```", "", about(data), "", table(rows), "",
            f"Steps against bare: {stats.family_line([r['step'] for r in rows if r['step']])}.",
            "",
            "us of app CPU per request, by request type (geometric means):", "",
            per_type(data), ""]
    (folder / results.REPORT_MD).write_text("\n".join(text))
