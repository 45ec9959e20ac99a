"""Write a run's `summary.csv`, `report.md` and `plots/*.png` from its stage folders.

    python -m benchmarks.analysis.report [RUN_DIR]     # default: results/latest

A folder that holds both models' runs (`omission.csv`, benchmarks/studies/omission.py)
gets their percentiles side by side (benchmarks/analysis/omission.py), one that holds
`floor.json` (benchmarks/studies/floor.py) each stage against the floor
(benchmarks/analysis/floor.py); a study folder of its own gets only that.

Reads each stage folder's `metrics.json` and `checks.json` (written by the lab
runner), and for the plots its `sampler.csv`, `locust_stats_history.csv` and
`sysctl.json` (see benchmarks/analysis/plots.py), so a report can be rebuilt from a
results folder at any time.
"""

from __future__ import annotations

import argparse
import csv
import sys
import traceback
from pathlib import Path

from benchmarks import checks
from benchmarks.analysis import floor, metrics, omission, repeats, stats
from benchmarks.analysis.metrics import SUMMARY_COLUMNS
from benchmarks.run import open_model, results, slo

TABLE_COLUMNS = (("stage", "stage"), ("rps", "RPS"), ("rps_independent", "RPS (server)"),
                 ("p50_ms", "p50 ms"),
                 ("p95_ms", "p95 ms"), ("p99_ms", "p99 ms"), ("failures", "failures"),
                 ("tw_redis_peak", "TW redis"), ("tw_upstream_peak", "TW upstream"),
                 ("tw_front_peak", "TW front"), ("client_cpu_p95", "client CPU p95 %"),
                 ("foreign_cpu_pct", "others' CPU %"),
                 ("sio_rps", "WS acks/s"), ("sio_p95_ms", "ack p95 ms"),
                 ("checks", "checks"))
# the table's percentiles: their fraction and the count of what they are taken over
PERCENTILES = {"p50_ms": (0.5, "requests"), "p95_ms": (0.95, "requests"),
               "p99_ms": (0.99, "requests"), "sio_p95_ms": (0.95, "sio_requests")}


def stage_results(run_dir: Path) -> list[dict]:
    """[{stage, metrics, checks}] for every stage folder that has metrics, in registry order."""
    return [{"stage": stage, "dir": d,
             "metrics": results.read_json(d / results.METRICS_JSON),
             "checks": results.read_json(d / results.CHECKS_JSON)}
            for stage, d in results.measured_stages(run_dir)]


def _cell(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.1f}" if value % 1 else f"{value:.0f}"
    return str(value)


def rows(run_dir: Path) -> list[dict]:
    out = []
    over = repeats.by_stage(run_dir)
    for r in stage_results(run_dir):
        row = {"stage": r["stage"].dirname}
        row.update({c: r["metrics"].get(c) for c in (*SUMMARY_COLUMNS[1:], "requests",
                                                     "sio_requests")})
        row.update(repeats.columns(over[r["stage"].key]))
        judged = checks.counted(r["checks"])
        row["checks"] = f"{sum(c['passed'] for c in judged)}/{len(judged)}"
        out.append(row)
    return out


def _shown(row: dict, key: str) -> str:
    """A table cell; a percentile of too few requests (stats.too_few) as `too few (N)`."""
    if key in PERCENTILES and row.get(key) is not None:
        fraction, count = PERCENTILES[key]
        if stats.too_few(fraction, row.get(count)):
            return f"too few ({row.get(count) or 0:,})"
    return _cell(row.get(key))


def summary_table(run_dir: Path) -> str:
    """The summary as a Markdown table (also readable on a terminal)."""
    header = [label for _, label in TABLE_COLUMNS]
    body = [[_shown(row, key) for key, _ in TABLE_COLUMNS] for row in rows(run_dir)]
    widths = [max(len(h), *(len(b[i]) for b in body)) if body else len(h)
              for i, h in enumerate(header)]
    def line(cells):
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"
    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(header), sep, *(line(b) for b in body)])


def sources_line(run_dir: Path) -> str:
    """Which source each stage's p50/p95/p99 come from, and its precision (stats.SOURCES):
    an open-model stage's from its .hlog (open_model.tail_source), others Locust's."""
    by_source: dict[str, list[str]] = {}
    acks = False
    for r in stage_results(run_dir):
        by_source.setdefault(open_model.tail_source(r["dir"]), []).append(
            r["stage"].dirname)
        acks = acks or r["metrics"].get("sio_p95_ms") is not None
    files = {"locust": results.LOCUST_JSON, "hdrhistogram": results.LATENCY_HLOG}
    said = [f"{stats.SOURCES[source]} (`{files[source]}`) in {', '.join(names)}"
            for source, names in by_source.items()]
    if not said:
        return ""
    return "p50, p95, p99 from " + "; from ".join(said) + (
        ". Ack p95 from Locust's." if acks else ".")


def repeats_section(run_dir: Path) -> str:
    """With --repeats: each stage's geometric mean and 95% interval, each step between
    consecutive stages (and the first stage against the last) with its paired test,
    and every check that failed in a repeat. Empty for a run of one repeat."""
    over = repeats.by_stage(run_dir)
    if len(over) > 1 and max(e["repeats"] for e in over.values()) < 2:
        return ("One repeat: no step between stages is tested (`--repeats 3` runs each "
                "stage three times and judges each step with a paired test).")
    if not over or max(e["repeats"] for e in over.values()) < 2:
        return ""

    def one(x: float) -> str:  # under 1, two significant digits: a bound stays above 0
        return f"{x:.1f}" if x >= 1 else f"{x:.2g}"

    def shown(iv: dict) -> str:
        if iv["mean"] is None:
            return "-"
        if iv["low"] is None:
            return one(iv["mean"])
        return f"{one(iv['mean'])} [{one(iv['low'])}, {one(iv['high'])}]"

    lines = ["## Repeats", "",
             "Each stage ran once per repeat, the stages interleaved (0,1,2,0,1,2...) so "
             "that a drift of the machine hits them alike. Geometric mean [95% interval] over "
             "the repeats (Student's t on the logs: a rate or a time cannot go below "
             "zero, and with 3 repeats the interval is wide). A step is "
             "judged within each repeat, where a slow spell of the box moves both "
             "stages: its ratio in each repeat, their geometric mean with its 95% "
             "interval, and p, the two-sided paired t test on the log ratios. "
             f"*Significant* means p < {stats.ALPHA:g}; a step is a finding only then.",
             "",
             "| stage | passed every check | RPS | p95 ms | p99 ms | ack p95 ms | "
             "others' CPU %, each repeat |", "|---|---|---|---|---|---|---|"]
    lines += [f"| {e['stage'].dirname} | {e['passed']}/{e['repeats']} | {shown(e['rps'])} "
              f"| {shown(e['p95_ms'])} | {shown(e['p99_ms'])} | {shown(e['sio_p95_ms'])} | "
              f"{', '.join(_cell(v) for v in e['values'][repeats.FOREIGN])} |"
              for e in over.values()]
    lines += ["", tail_sources(over)]
    tested = repeats.tested(over)
    if len(over) > 1:
        family = [t for each in tested.values() for *_, t in each]
        lines += ["", stats.family_line(family, start=True) + ".", "", "Steps, RPS:", ""]
        lines += step_lines(tested["rps"])
        lines += ["", "Steps, the tail (the later stage's percentile over the earlier's: "
                  "below 1x the tail is shorter; p95, p99 of the HTTP requests, ack p95 of "
                  "the Socket.IO acks, tested like the rate):", ""]
        for figure, label in (("p95_ms", "p95"), ("p99_ms", "p99"), ("sio_p95_ms", "ack p95")):
            lines += step_lines(tested[figure], label)
        lines += ["", "Steps, the server roles' CPU per request (the app's servers, Nginx "
                  "and Redis, ms: below 1x a request costs less):", ""]
        lines += step_lines(tested[repeats.CPU], "server CPU/request")
    failed = [(repeat, e["stage"], c) for e in over.values() for repeat, c in e["failed_checks"]]
    lines += ["", "Checks that failed:" if failed else "No check failed in any repeat.", ""]
    lines += [f"- repeat {repeat}, stage {stage.key}: `{c['expected']}`, measured "
              f"`{c['measured']}`" for repeat, stage, c in failed]
    return "\n".join(lines) + "\n"


def tail_sources(over: dict) -> str:
    """Where the repeats' p95, p99 and ack p95 come from, stage by stage (repeats.tail)."""
    files = {"hdrhistogram": results.LATENCY_HLOG, "locust": results.LOCUST_JSON}
    by_source: dict[str, list[str]] = {}
    for e in over.values():
        for source in sorted(e["sources"]):
            by_source.setdefault(source, []).append(e["stage"].key)
    return "p95, p99 and ack p95 over the repeats from " + "; from ".join(
        f"{stats.SOURCES[source]} (each run's `{files[source]}`) in stage(s) "
        f"{', '.join(keys)}" for source, keys in by_source.items()) + (
        "; a percentile of too few requests is left out.")


def step_lines(tested: list, label: str = "") -> list[str]:
    """Each step's verdict (stats.verdict) of one figure's `tested` steps
    (repeats.tested), a line each; a step whose stages lost CPU to other processes says so
    when its test finds nothing."""
    limit, out = metrics.FOREIGN_CPU_LIMIT, []
    for a, b, ratios, test in tested:
        each = (f" (each repeat {', '.join(f'{r:.2f}' for r in ratios)})"
                if len(ratios) > 1 else "")
        lost = repeats.disturbed(a, limit) + repeats.disturbed(b, limit)
        why = (f"; in {lost} of their {a['repeats'] + b['repeats']} runs other processes "
               f"took over {limit:g}% of the server's CPUs: see What else ran"
               if lost and test["significant"] is False else "")
        name = f" {label}" if label else ""
        out.append(f"- {a['stage'].key} -> {b['stage'].key}{name}: {stats.verdict(test)}"
                   f"{each}{why}")
    return out


def foreign_section(run_dir: Path, info: dict) -> str:
    """What else ran: the pre-flight at rest, and each stage whose server CPU set lost more
    than FOREIGN_CPU_LIMIT to other processes, with the throughput that cost."""
    rest = info.get("at_rest")
    lines = ["## What else ran", ""]
    if rest:
        busiest = ", ".join(f"`{p['name']}` {p['cpu_pct']:g}%" for p in rest["busiest"])
        lines += [f"Before the first stage, {rest['seconds']:g} s at rest: the server's CPUs "
                  f"were {rest['busy_pct']['server']:g}% busy, the client's "
                  f"{rest['busy_pct']['client']:g}%. Busiest other processes: "
                  f"{busiest or 'none'}.", ""]
    lines += [f"Others' CPU % = the share of the server's CPU set that processes not the "
              f"stage's used while it was measured (`foreign_cpu_pct`; p95 in summary.csv). "
              f"Past {metrics.FOREIGN_CPU_LIMIT:g}% the stage's numbers are partly the "
              "neighbour's:", ""]
    dirs = results.repeat_dirs(run_dir)
    flagged = [(k, r) for k, folder in enumerate(dirs, start=1) for r in stage_results(folder)
               if metrics.neighbour_cost(r["metrics"])]
    for k, r in flagged:
        m = r["metrics"]
        which = f" (repeat {k})" if len(dirs) > 1 else ""
        lines.append(f"- **{r['stage'].dirname}**{which}: other processes used "
                     f"{m['foreign_cpu_pct']:g}% of the server's CPUs (p95 "
                     f"{m['foreign_cpu_p95']:g}%). It answered {m['rps']:g} req/s; with all of "
                     f"its CPUs a server bound by them would answer about "
                     f"{metrics.neighbour_cost(m):g} (RPS x 100 / (100 - "
                     f"{m['foreign_cpu_pct']:g})): do not compare it with the other stages.")
    if not flagged:
        lines.append("- no stage: every stage had its server CPUs to itself.")
    return "\n".join(lines) + "\n"


def checks_section(run_dir: Path) -> str:
    lines = []
    for r in stage_results(run_dir):
        s = r["stage"]
        lines.append(f"### {s.dirname}: {s.title}\n\nExpected: {s.see}.\n")
        for c in r["checks"]:
            mark = "pass" if c["passed"] else "**FAIL**"
            if c.get("left_out"):
                mark = f"{checks.LEFT_OUT} (would {'pass' if c['passed'] else 'fail'})"
            lines.append(f"- {mark}: `{c['expected']}`, measured `{c['measured']}` "
                         f"({c['why']})")
        if metrics.count_gap_too_big(r["metrics"]):
            lines.append(f"- note: Locust's RPS and the server's own count differ by "
                         f"{r['metrics']['rps_gap']:.1%} (over {metrics.COUNT_GAP_LIMIT:.0%}): "
                         "one of them is not counting what it should")
        if metrics.neighbour_cost(r["metrics"]):
            lines.append(f"- note: other processes used {r['metrics']['foreign_cpu_pct']:g}% "
                         "of the server's CPUs (see What else ran)")
        if metrics.client_bound(r["metrics"]):
            lines.append(f"- note: Locust's CPU (p95) passed {metrics.CLIENT_CPU_LIMIT:.0f}% of "
                         "its core; "
                         "these numbers measure the client as much as the server")
        lines.append("")
    return "\n".join(lines)


def plots_section(run_dir: Path) -> str:
    """Write run_dir/plots/*.png; their Markdown, each with its how-to-read sentence.

    A plot that cannot be drawn is named in the report rather than stopping it: the
    summary and checks of a finished run matter more than one picture.
    """
    # here, not at the top: pandas and matplotlib take most of a second to import, and
    # `lab list` or `lab exec` (which import this module through the lab) never draw
    from benchmarks.analysis import plots

    out_dir = run_dir / results.PLOTS
    lines = []
    for name, draw in plots.PLOTS.items():
        path = out_dir / f"{name}.png"
        try:
            fig = draw(run_dir, out=path)
        except Exception as e:  # reported in report.md and on stderr
            traceback.print_exc()
            print(f"report: plot {name} failed: {e}", file=sys.stderr)
            lines += [f"### {plots.TITLES[name]}", "", f"(not drawn: `{e!r}`)", ""]
            continue
        if fig is None:  # nothing to draw in this run (e.g. no Nginx stage)
            path.unlink(missing_ok=True)
            continue
        lines += [f"### {plots.TITLES[name]}", "",
                  f"![{plots.TITLES[name]}]({results.PLOTS}/{path.name})", "",
                  f"*How to read it:* {plots.HOW_TO_READ[name]}", ""]
    return "\n".join(lines)


def not_run_section(run_dir: Path, info: dict) -> str:
    """Stages the lab tried and that did not produce results, with the error it recorded."""
    lines = []
    for key, entry in (info.get("stages") or {}).items():
        measured = (run_dir / entry.get("dir", "-") / results.METRICS_JSON).exists()
        if "error" in entry or not measured:
            first = str(entry.get("error", "no metrics.json")).strip().splitlines()[:1]
            lines.append(f"- stage {key} ({entry.get('dir')}) did not run: "
                         f"{first[0] if first else 'no metrics.json'}")
    return "\n".join(lines)


def header(run_dir: Path, info: dict) -> list[str]:
    """report.md's title, what was run, and how to read the table."""
    params = info.get("parameters", {})
    return [
        f"# Lab run {run_dir.name}" + ("" if run_dir.name[:1].isdigit()  # results/<timestamp>
                                       else f" (a copy of the run of {info.get('started')})"),
        "",
        f"Started {info.get('started')}; "
        f"{params.get('duration_s')} s measured per stage, {params.get('users')} Locust users"
        + (f" from {params['client_hosts']} client hosts (Locust's master on `client`, a "
           "worker on each; client CPU is the busiest host's)"
           if (params.get("client_hosts") or 1) > 1 else "") + ", "
        f"sandbox `{params.get('sandbox')}`; kernel {info.get('kernel')}, "
        f"{info.get('cores')} cores, commit `{info.get('git_commit')}`." + "".join(
            f" Stage(s) {', '.join(a['stages'])} added from the run of {a['started']}, "
            f"commit `{a['git_commit']}`." for a in info.get("added", [])),
        "",
        "TW = peak TIME_WAIT sockets of each connection class: `redis` app to Redis, "
        "`upstream` Nginx to app, `front` client to the entry point. RPS = answered HTTP "
        "requests a second as Locust counted them; the Socket.IO users' messages (stages "
        "3 and up: a steady background beside the same HTTP users) are reported apart, "
        "as WS acks/s and their ack round trip; "
        "RPS (server) = the same, counted in the entry point's access log. Client CPU = "
        "Locust's p95 over the load (its start-up left out), in % of one core. Every figure "
        "comes from the files in the stage's folder: `locust.json` (RPS, percentiles, "
        f"failures; an open-model stage's percentiles from `{results.LATENCY_HLOG}`, every "
        "request's time to 3 significant digits), `count.json` (the server's count), "
        "`sampler.csv` (sockets, CPU), `metrics.json` (all derived numbers), `checks.json`. "
        f"A percentile is shown when at least {stats.ENOUGH} requests lie beyond it (p95 needs "
        f"{stats.needed(0.95):,} requests, p99 {stats.needed(0.99):,}); otherwise "
        "`too few (N)`.",
        "",
    ]


NOT_DRAWN = ("Not drawn (`--no-plots`): `python -m benchmarks.analysis.report {run}` "
             "draws them.\n")


def write(run_dir: Path, plots: bool = True) -> None:
    """summary.csv, report.md and (unless `plots` is False: `lab run --no-plots`)
    plots/*.png in run_dir."""
    run_dir = Path(run_dir)
    table = rows(run_dir)
    with open(run_dir / results.SUMMARY_CSV, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=(*SUMMARY_COLUMNS, *repeats.COLUMNS),
                                extrasaction="ignore")
        writer.writeheader()
        writer.writerows(table)
    info = results.run_info(run_dir)
    text = [
        *header(run_dir, info),
        summary_table(run_dir),
        "",
        sources_line(run_dir),
        "",
    ]
    text += [foreign_section(run_dir, info), ""]
    over_repeats = repeats_section(run_dir)
    if over_repeats:
        text += [over_repeats, ""]
    missing = not_run_section(run_dir, info)
    if missing:
        text += [missing, ""]
    gates = objectives_section(run_dir)
    if gates:
        text += [gates, ""]
    both = omission.section(run_dir)
    if both:
        text += [both, ""]
    against_floor = floor.section(run_dir)
    if against_floor:
        text += [against_floor, ""]
    text += [
        "## Plots",
        "",
        "Drawn by `benchmarks/analysis/plots.py` from the same files; "
        "`notebooks/lab-analysis.ipynb` shows them again beside the data.",
        "",
        plots_section(run_dir) if plots else NOT_DRAWN.format(run=results.rel(run_dir)),
        "## Checks",
        "",
        checks_section(run_dir),
    ]
    (run_dir / results.REPORT_MD).write_text("\n".join(text))


def objectives_section(run_dir: Path) -> str:
    """`--slo`'s objectives, each stage's verdict (first repeat's folders), or ""."""
    judged = [(stage, slo.read(folder)) for stage, folder in results.present_stages(run_dir)]
    judged = [(stage, j) for stage, j in judged if j]
    if not judged:
        return ""
    lines = ["## Objectives (--slo)", "",
             "Latencies are the client's (what a user waits), the entry point's own in "
             "brackets; a stage that misses one makes `lab run` exit 1.", "",
             "| stage | objective | measured | met |", "|---|---|---|---|"]
    for stage, rows in judged:
        for j in rows:
            measured = "not measured" if j["measured"] is None else f"{j['measured']:g}"
            if j.get("server") is not None:
                measured += f" (server {j['server']:g})"
            lines.append(f"| {stage.dirname} | `{j['objective']}` | {measured} | "
                         f"{'yes' if j['met'] else '**no**'} |")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.analysis.report",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("run_dir", nargs="?", type=Path, default=results.RESULTS / results.LATEST,
                   help="a lab run's folder (default: results/latest)")
    return p


def main(argv=None) -> int:
    run_dir = build_parser().parse_args(argv).run_dir
    if not results.is_run(run_dir) and (run_dir / omission.OMISSION_CSV).exists():
        print(omission.write_report(run_dir))  # a coordinated-omission study's folder
        return 0
    if not results.is_run(run_dir) and floor.read(run_dir) is not None:
        print(floor.write_report(run_dir))  # a floor study's own folder
        return 0
    if not results.is_run(run_dir):
        print(f"report: {run_dir} is not a lab run folder (no run.json); "
              "run `make lab` first or name a folder under results/")
        return 2
    write(run_dir.resolve())
    print(summary_table(run_dir))
    print(sources_line(run_dir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
