"""The floor's figures, and each stage's CPU per request as a multiple of them.

benchmarks/studies/floor.py measures (the app in-process, no server) and writes
`floor.json`; this module reads it, so the study, `python -m
benchmarks.analysis.report` and a notebook say the same thing:

    from benchmarks.analysis import floor
    data = floor.read(run_dir)                      # None where the folder has none
    print(floor.table(floor.summarize(data)))       # each request type and the mix
    print(floor.section(run_dir))                   # report.md's: the stages against it

All figures are ms per request; geometric means over the study's repeats with 95%
intervals (stats.interval, log scale: a time's interval cannot cross zero). A stage's
multiple is the geometric mean of its figure over its repeats divided by the floor's
mix's: `app_cpu_ms_per_request` against the app's own CPU,
`server_cpu_ms_per_request` (app, Nginx and Redis) against the app's and Redis's.
"""

from __future__ import annotations

import csv
from pathlib import Path

from benchmarks.analysis import stats
from benchmarks.run import results

MIX = "mix"  # the row of the weighted mix
FIGURES = ("app_cpu_ms", "redis_cpu_ms", "wall_ms")  # per request, each type, each repeat
CSV_COLUMNS = ("type", "weight", "requests", *(f"{f}_{part}" for f in FIGURES
                                               for part in ("gmean", "low", "high")))
# the stage figures (benchmarks/analysis/metrics.py) and the floor's they are read against
AGAINST = {"app_cpu_ms_per_request": ("app_cpu_ms",),
           "server_cpu_ms_per_request": ("app_cpu_ms", "redis_cpu_ms")}


# where the study put Redis (its --redis-cpu, or --redis-cpus), in the report's words
REDIS_CPU = {"server": "on the app's CPU, as in the stages (`--redis-cpu server`)",
             "apart": "on a CPU of its own, apart from the app (`--redis-cpu apart`)",
             "given": "on the CPUs given (`--redis-cpus`)"}


def read(folder: Path) -> dict | None:
    path = Path(folder) / results.FLOOR_JSON
    return results.read_json(path) if path.exists() else None


def mix(repeat: dict, weights: dict, figure: str) -> float:
    """One repeat's figure over the mix: each type's, weighted as the scenario weights it."""
    return sum(weights[t] * repeat[t][figure] for t in weights) / sum(weights.values())


def summarize(data: dict) -> list[dict]:
    """A row per request type, then the mix: weight, requests timed (every repeat's), and
    each of FIGURES as an interval over the repeats."""
    weights, repeats = data["weights"], data["repeats"]
    rows = [{"type": t, "weight": w, "requests": sum(r[t]["requests"] for r in repeats),
             **{f: stats.interval([r[t][f] for r in repeats]) for f in FIGURES}}
            for t, w in weights.items()]
    rows.append({"type": MIX, "weight": sum(weights.values()),
                 "requests": sum(row["requests"] for row in rows),
                 **{f: stats.interval([mix(r, weights, f) for r in repeats]) for f in FIGURES}})
    return rows


def shown(iv: dict, digits: int = 3) -> str:
    """`0.412 [0.405, 0.419]` (geometric mean [95% interval]), the mean alone with one
    repeat, `-` with none."""
    if iv["mean"] is None:
        return "-"
    if iv["low"] is None:
        return f"{iv['mean']:.{digits}f}"
    return f"{iv['mean']:.{digits}f} [{iv['low']:.{digits}f}, {iv['high']:.{digits}f}]"


def table(rows: list[dict]) -> str:
    lines = ["| request type | weight | requests timed | app CPU ms | Redis CPU ms | "
             "wall ms |", "|---|---|---|---|---|---|"]
    lines += [f"| {'**mix**' if r['type'] == MIX else r['type']} | {r['weight']} | "
              f"{r['requests']:,} | {shown(r['app_cpu_ms'])} | {shown(r['redis_cpu_ms'])} | "
              f"{shown(r['wall_ms'])} |" for r in rows]
    return "\n".join(lines)


def write(folder: Path, data: dict) -> None:
    """floor.json (the study's figures, every repeat) and floor.csv (the table)."""
    results.write_json(Path(folder) / results.FLOOR_JSON, data)
    with open(Path(folder) / results.FLOOR_CSV, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        for r in summarize(data):
            writer.writerow({"type": r["type"], "weight": r["weight"], "requests": r["requests"],
                             **{f"{fig}_{part}": _round(r[fig][key]) for fig in FIGURES
                                for part, key in (("gmean", "mean"), ("low", "low"),
                                                  ("high", "high"))}})


def _round(value):
    return None if value is None else round(value, 4)


def about(data: dict) -> str:
    """What was measured, in a sentence: the app, its settings, where it ran."""
    settings = ", ".join(f"`{k}={v}`" for k, v in data["settings"].items())
    n = len(data["repeats"])
    cost = data.get("loop_us")
    loop = (f" The loop's own CPU (its caller around a WSGI app that does nothing), in "
            f"every figure: {cost['GET']:g} us a GET, {cost['POST']:g} us a POST."
            if cost else "")
    box = data.get("box")
    busy = (f" While it was measured, the load average went from {box['load_average'][0]:g} "
            f"to {box['load_average'][1]:g} and other processes used "
            f"{box['others_cpu_pct']:g}% of the app's CPU." if box else
            " What else the box did was not recorded (a study from before floor.json kept "
            "`box`).")
    where = REDIS_CPU[data.get("redis_cpu", "apart")]  # before the option: apart
    return (f"Stage {data['stage']}'s app called in-process as a WSGI callable (no socket, "
            f"no server; benchmarks/studies/floor.py), Redis real {where}: Redis on CPU "
            f"{data['cpus']['redis']}, the app on {data['cpus']['app']}. Settings: "
            f"{settings}. Each request type for {data['seconds']:g} s per repeat, {n} "
            f"repeat(s), commit `{data.get('git_commit')}`; ms per request, geometric "
            "mean [95% interval, log scale] over the repeats. App CPU = this process's CPU "
            "time (every thread: "
            "the app and its Socket.IO queue listener); Redis CPU = redis-server's; wall = "
            "elapsed time per request, Redis's round trips included. The mix weights the "
            "types as ChatUser does (benchmarks/chat_mix.py)." + loop + busy)


def bases(data: dict) -> dict[str, list[float]]:
    """Each of AGAINST's figures' floor, a value per repeat of the study: the mix of the
    floor's figures it is read against, summed (the app's, or the app's and Redis's)."""
    return {k: [sum(mix(r, data["weights"], p) for p in parts) for r in data["repeats"]]
            for k, parts in AGAINST.items()}


def stages_against(run_dir: Path, data: dict) -> list[dict]:
    """Each measured stage of the run: its CPU figures (interval over its repeats) and each
    as a multiple of its floor (bases): the ratio of their geometric means, with its
    interval (stats.ratio: the stage's repeats and the study's are not paired)."""
    floors = bases(data)
    found: dict[str, dict] = {}
    for root in results.repeat_dirs(run_dir):
        for stage, folder in results.measured_stages(root):
            m = results.read_json(folder / results.METRICS_JSON)
            entry = found.setdefault(stage.key, {"stage": stage, **{k: [] for k in AGAINST}})
            for k in AGAINST:
                entry[k].append(m.get(k))
    out = []
    for entry in found.values():
        row = {"stage": entry["stage"]}
        for k in AGAINST:
            row[k] = stats.interval(entry[k])
            row[f"{k}_x"] = stats.ratio([v for v in entry[k] if v is not None], floors[k])
        out.append(row)
    return out


def section(run_dir: Path) -> str:
    """report.md's section for a run folder that holds floor.json, or ""."""
    data = read(run_dir)
    if data is None:
        return ""
    rows = summarize(data)
    app, both = (stats.interval(v)["mean"] for v in bases(data).values())
    lines = ["## The floor", "", about(data), "", table(rows), ""]
    against = stages_against(run_dir, data)
    if against:
        lines += [f"Each stage's CPU per request (geometric mean [95% interval] over its "
                  f"repeats) and "
                  f"its multiple of the floor's mix with its 95% interval (the stage's "
                  "repeats and the study's are apart, not paired: Welch's t on the logs, "
                  "stats.ratio): the app server's "
                  f"(`app_cpu_ms_per_request`) against the app's own {app:.3f} ms, every "
                  f"server role's (`server_cpu_ms_per_request`: app, Nginx, Redis) against "
                  f"the app's and Redis's {both:.3f} ms. What lies above 1x is what "
                  "the server (its HTTP handling, its worker, Nginx) costs; stages before 7 "
                  "also run the slower code stage 7 removed. The stages' mix adds the "
                  "Socket.IO users' messages, which their RPS does not count.", "",
                  "| stage | app server CPU ms | x floor | every server role CPU ms | "
                  "x floor |", "|---|---|---|---|---|"]
        lines += [f"| {r['stage'].dirname} | {shown(r['app_cpu_ms_per_request'])} | "
                  f"{_times(r['app_cpu_ms_per_request_x'])} | "
                  f"{shown(r['server_cpu_ms_per_request'])} | "
                  f"{_times(r['server_cpu_ms_per_request_x'])} |" for r in against]
        lines.append("")
    return "\n".join(lines)


def _times(x: dict) -> str:
    """`2.03x [1.61, 2.56]`, the multiple alone when a side has one repeat, `-` if none."""
    if x["ratio"] is None:
        return "-"
    if x["low"] is None:
        return f"{x['ratio']:.2f}x"
    return f"{x['ratio']:.2f}x [{x['low']:.2f}, {x['high']:.2f}]"


def write_report(folder: Path) -> str:
    """A floor study's own folder: report.md from floor.json; the table."""
    data = read(folder)
    text = "\n".join([f"# The floor ({Path(folder).name})", "", about(data), "",
                      table(summarize(data)), ""])
    (Path(folder) / results.REPORT_MD).write_text(text)
    return table(summarize(data))
