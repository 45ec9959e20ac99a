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
multiple of the floor's mix: `app_cpu_ms_per_request` against the app's own CPU,
`server_cpu_ms_per_request` (app, Nginx and Redis) against the app's and Redis's.
When `lab run --floor` measured a floor after every repeat's stages (floor.json in each
repeat's folder), the multiple is paired: the ratio within each repeat, judged as a
step between stages is (stats.step: geometric mean, interval, p). Otherwise (a floor
of its own, `--into`) it is the ratio of the geometric means (stats.ratio, unpaired);
the report says which.
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
            " What else the box did: each repeat's row below." if "box" in data else
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


def floors(run_dir: Path) -> list[tuple[Path, dict]]:
    """(folder, floor.json) of each of the run's repeat folders that has one: the run
    folder's own (`--into`, or repeat 1's), then repeats/K's (`lab run --floor`)."""
    found = [(folder, read(folder)) for folder in results.repeat_dirs(run_dir)]
    return [(folder, data) for folder, data in found if data is not None]


def paired(run_dir: Path, found: list[tuple[Path, dict]]) -> bool:
    """Whether every repeat folder with a measured stage has the floor `lab run --floor`
    measured after that repeat's stages (its `lab_repeat`): then each stage's multiple
    is a ratio within each repeat. A floor written later with `--into` is not."""
    after = {folder for folder, data in found if data.get("lab_repeat")}
    measured = [f for f in results.repeat_dirs(run_dir) if any(results.measured_stages(f))]
    return bool(measured) and all(f in after for f in measured)


def pooled(found: list[tuple[Path, dict]]) -> dict:
    """One floor.json of every floor found: their repeats together (each pass of the
    study one), the first's settings; `box` per floor is each_repeat's to say."""
    first = found[0][1]
    if len(found) == 1:
        return first
    return {**first, "repeats": [r for _, data in found for r in data["repeats"]],
            "box": None}


def stages_against(run_dir: Path, found: list[tuple[Path, dict]], pair: bool) -> list[dict]:
    """Each measured stage of the run: its CPU figures (interval over its repeats) and each
    as a multiple of the floor (bases). Paired (`pair`): its figure over the floor of the
    same repeat folder in each repeat, judged as a step is (stats.step: the geometric mean
    of the ratios, its interval and p). Else the ratio of the geometric means of the
    stage's repeats and of every floor's (stats.ratio: Welch's t on the logs, unpaired)."""
    own = {folder: {k: stats.interval(v)["mean"] for k, v in bases(data).items()}
           for folder, data in found}
    every = bases(pooled(found))
    rows: dict[str, dict] = {}
    for root in results.repeat_dirs(run_dir):
        for stage, folder in results.measured_stages(root):
            m = results.read_json(folder / results.METRICS_JSON)
            row = rows.setdefault(stage.key, {"stage": stage, **{k: [] for k in AGAINST},
                                              **{f"{k}_pairs": [] for k in AGAINST}})
            for k in AGAINST:
                row[k].append(m.get(k))
                if pair and m.get(k) is not None and own[root][k]:
                    row[f"{k}_pairs"].append(m[k] / own[root][k])
    for row in rows.values():
        for k in AGAINST:
            values = row[k]
            row[k] = stats.interval(values)
            row[f"{k}_x"] = (stats.step(row[f"{k}_pairs"]) if pair else
                             stats.ratio([v for v in values if v is not None], every[k]))
    if pair:  # the multiples tested together, as one family (Holm's method)
        cells = [(row, f"{k}_x") for row in rows.values() for k in AGAINST]
        for (row, key), test in zip(cells, stats.family([r[key] for r, key in cells]),
                                    strict=True):
            row[key] = test
    return list(rows.values())


def each_repeat(found: list[tuple[Path, dict]]) -> str:
    """A row per floor: its repeat, its mix's figures and what else the box did."""
    lines = ["| repeat | app CPU ms (mix) | app + Redis CPU ms | load average | others' "
             "CPU of the app's |", "|---|---|---|---|---|"]
    for folder, data in found:
        app, both = (stats.interval(v)["mean"] for v in bases(data).values())
        box = data.get("box") or {}
        load = " to ".join(f"{x:g}" for x in box.get("load_average", [])) or "-"
        others = f"{box['others_cpu_pct']:g}%" if "others_cpu_pct" in box else "-"
        lines.append(f"| {data.get('lab_repeat') or folder.name} | {app:.3f} | {both:.3f} | "
                     f"{load} | {others} |")
    return "\n".join(lines)


def section(run_dir: Path) -> str:
    """report.md's section for a run folder that holds floor.json (in any repeat's
    folder), or ""."""
    found = floors(run_dir)
    if not found:
        return ""
    data, pair = pooled(found), paired(run_dir, found)
    app, both = (stats.interval(v)["mean"] for v in bases(data).values())
    lines = ["## The floor", "", about(data), ""]
    if len(found) > 1 or data.get("lab_repeat"):
        lines += ["Measured by `lab run --floor` after each repeat's stages, one pass a "
                  "repeat, into that repeat's folder; the table pools them, and each "
                  "repeat's floor is:", "", each_repeat(found), ""]
    lines += [table(summarize(data)), ""]
    against = stages_against(run_dir, found, pair)
    if against:
        lines += [_how(pair, app, both), "",
                  "| stage | app server CPU ms | x floor | every server role CPU ms | "
                  "x floor |", "|---|---|---|---|---|"]
        lines += [f"| {r['stage'].dirname} | {shown(r['app_cpu_ms_per_request'])} | "
                  f"{_times(r['app_cpu_ms_per_request_x'])} | "
                  f"{shown(r['server_cpu_ms_per_request'])} | "
                  f"{_times(r['server_cpu_ms_per_request_x'])} |" for r in against]
        if pair:
            tests = [r[f"{k}_x"] for r in against for k in AGAINST]
            lines += ["", f"The multiples' tests: {stats.family_line(tests)}."]
        lines.append("")
    return "\n".join(lines)


PAIRED = ("paired: in each repeat, the stage's figure over the floor measured right after "
          "that repeat's stages (`lab run --floor`); the multiple is the geometric mean of "
          "those ratios, with its 95% interval and p, the paired t test on their logs "
          "(stats.step), as a step between stages is judged; p tests the multiple against "
          "1x, a server that costs nothing above the floor")
UNPAIRED = ("unpaired: the floor was not measured after every repeat's stages (`python -m "
            "benchmarks.studies.floor --into`, or a repeat's floor missing), so the "
            "multiple is the ratio of the geometric means of the stage's repeats and the "
            "floor's, its 95% interval from Welch's t on the logs (stats.ratio), no p; "
            "`lab run --floor` pairs them")


def _how(pair: bool, app: float, both: float) -> str:
    return ("Each stage's CPU per request (geometric mean [95% interval] over its repeats) "
            f"and its multiple of the floor's mix, {PAIRED if pair else UNPAIRED}: the app "
            "server's (`app_cpu_ms_per_request`) against the app's own CPU "
            f"({app:.3f} ms over every floor), every server role's "
            "(`server_cpu_ms_per_request`: app, Nginx, Redis) against the app's and "
            f"Redis's ({both:.3f} ms). What lies above 1x is what the server (its HTTP "
            "handling, its worker, Nginx) costs; stages before 7 also run the slower code "
            "stage 7 removed. The stages' mix adds the Socket.IO users' messages, which "
            "their RPS does not count.")


def _times(x: dict) -> str:
    """Paired: stats.verdict's `2.03x [1.61, 2.56], p = 0.004: significant`; unpaired:
    `2.03x [1.61, 2.56]`, the multiple alone when a side has one repeat; `-` if none."""
    if x["ratio"] is None:
        return "-"
    if "p" in x:
        return stats.verdict(x)
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
