"""The app's metrics served by gunicorn's several workers: prometheus_client's multiprocess
mode, per request and per scrape (lab 17).

    python -m benchmarks.studies.instruments.served [--workers 4] [--rate 150]
        [--seconds 10] [--repeats 5]

The in-process study (study.py) measures app/watchers/metrics.py in one process, where
prometheus_client keeps its values in memory. Under gunicorn's several workers the lab
(and gunicorn/today.conf.py) runs it in multiprocess mode: PROMETHEUS_MULTIPROC_DIR set,
every sample written into a worker's mmapped file, and every scrape reading and merging
every worker's files. This part serves stage 8's gunicorn (today.conf.py, --workers
workers, no recycling) on the lab's server CPU, a real Redis beside it, three ways:

- `bare`: no metrics;
- `single`: FLASK_METRICS=1 without the folder (each worker counts in memory and
  `/metrics` answers for one worker only: wrong under several workers, here as the
  price of the mode alone);
- `multiprocess`: FLASK_METRICS=1 with a fresh PROMETHEUS_MULTIPROC_DIR, as the lab.

Each runs the recycling study's open-model load (benchmarks/studies/recycling/load.py:
authenticated `GET /users/me` at --rate a second for --seconds) from the lab's client
CPU; the figure is the CPU of gunicorn's master and workers while it ran, per request
answered. Then, with metrics on, SCRAPES scrapes of `/metrics` one after another: their
median time and the server's CPU per scrape. The variants' order turns by one each
repeat; each variant's CPU per request is a paired step against bare (stats.step), the
steps' p adjusted together (stats.family).

Writes results/<timestamp>-instruments-served/ (served.json, report.md). Requirements:
redis-server, taskset, the venv. No root. About (--seconds + 4) x 3 x --repeats seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from benchmarks import stages
from benchmarks.analysis import stats
from benchmarks.run import cli, environment, results
from benchmarks.run.cli import say
from benchmarks.run.options import OptionsError
from benchmarks.sandbox import hosts, procs
from benchmarks.studies import floor
from benchmarks.studies.recycling import load, scrape, server
from benchmarks.studies.recycling.server import Variant

PROG = "python -m benchmarks.studies.instruments.served"
PATH = "/users/me"  # the recycling study's route: an authenticated read
THREADS = 32  # the load's senders: more than the requests in flight at --rate
START_DELAY_S = 0.3
SCRAPES = 50  # one after another: their median time, and the server's CPU per scrape
SERVED_JSON = "served.json"


@dataclass(frozen=True)
class Mode:
    name: str
    metrics: bool
    folder: bool


PLAN = (Mode("bare", False, False), Mode("single", True, False),
        Mode("multiprocess", True, True))


def tree_cpu_s(pid: int) -> float:
    """CPU seconds of a process and its children alive now, every thread, to the
    nanosecond (/proc/PID/schedstat's first field: psutil's cpu_times count in ticks of
    10 ms, a scrape's whole cost)."""
    out = 0.0
    try:
        top = psutil.Process(pid)
        for p in [top, *top.children(recursive=True)]:
            out += int(Path(f"/proc/{p.pid}/schedstat").read_text().split()[0]) / 1e9
    except (psutil.NoSuchProcess, FileNotFoundError):
        pass
    return out


def env_for(mode: Mode, redis_port: int, scratch: Path) -> dict:
    env = {**floor.app_env(redis_port), **stages.get(floor.STAGE).env}
    if mode.metrics:
        env["FLASK_METRICS"] = "1"
    if mode.folder:
        env["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="metrics-", dir=scratch)
    return env


def serve_once(mode: Mode, args, redis_port: int, workdir: Path, scratch: Path) -> dict:
    """One variant: gunicorn up, the load, its CPU per request; with metrics the scrapes."""
    workdir.mkdir(parents=True)
    config = workdir / "gunicorn.conf.py"
    config.write_text(server.config_text(Variant(mode.name, args.workers, 0)))
    port, env = procs.free_port(), env_for(mode, redis_port, scratch)
    cpus = hosts.format_cpus(hosts.placement().server)
    proc = procs.start(["taskset", "-c", cpus, *server.command(config, port)],
                       log=workdir / "gunicorn.log", env=procs.child_env(**env),
                       cwd=stages.ROOT)
    try:
        procs.wait_until_serving(f"http://127.0.0.1:{port}/healthz", proc)
        token = server.sign_in(port)
        load.run(port, PATH, token, args.rate, 1.0, THREADS,
                 time.perf_counter())  # a second's warm-up: every worker imported and served
        cpu0 = tree_cpu_s(proc.pid)
        outcomes = load.run(port, PATH, token, args.rate, args.seconds, THREADS,
                            time.perf_counter() + START_DELAY_S)
        cpu = tree_cpu_s(proc.pid) - cpu0
        answered = sum(o.kind == "ok" for o in outcomes)
        row = {"mode": mode.name, "requests": len(outcomes), "answered": answered,
               "cpu_us_per_request": round(1e6 * cpu / max(1, answered), 1)}
        if mode.metrics:
            cpu0, times = tree_cpu_s(proc.pid), []
            for _ in range(SCRAPES):
                times.append(scrape.scrape(port)[0])
            row.update({"scrape_ms_median": round(statistics.median(times), 2),
                        "scrape_cpu_ms": round(1000 * (tree_cpu_s(proc.pid) - cpu0)
                                               / SCRAPES, 2)})
        if mode.folder:
            row["files"] = len(list(Path(env["PROMETHEUS_MULTIPROC_DIR"]).glob("*.db")))
        return row
    finally:
        procs.stop(proc)


def steps(rows: list[dict]) -> list[tuple[str, dict]]:
    """Each mode's CPU per request over bare's within each repeat, tested as a family."""
    by = {(r["mode"], r["repeat"]): r["cpu_us_per_request"] for r in rows}
    repeats = sorted({r["repeat"] for r in rows})
    names = [m.name for m in PLAN[1:]] + ["multiprocess / single"]
    pairs = [(m.name, "bare") for m in PLAN[1:]] + [("multiprocess", "single")]
    tests = [stats.step([by[(a, k)] / by[(b, k)] for k in repeats
                         if by.get((a, k)) and by.get((b, k))]) for a, b in pairs]
    return list(zip(names, stats.family(tests), strict=True))


def table(rows: list[dict]) -> str:
    lines = ["| mode | CPU us/request | extra us over bare | scrape ms (median) | "
             "scrape CPU ms | files |", "|---|---|---|---|---|---|"]
    bare = stats.interval([r["cpu_us_per_request"] for r in rows if r["mode"] == "bare"])
    for m in PLAN:
        mine = [r for r in rows if r["mode"] == m.name]
        iv = stats.interval([r["cpu_us_per_request"] for r in mine])
        extra = "-" if m.name == "bare" else f"{iv['mean'] - bare['mean']:+.1f}"
        scrape_ms = stats.mean([r.get("scrape_ms_median") for r in mine])
        scrape_cpu = stats.mean([r.get("scrape_cpu_ms") for r in mine])
        files = stats.mean([r.get("files") for r in mine])
        lines.append(f"| {m.name} | {_shown(iv)} | {extra} | "
                     f"{'-' if scrape_ms is None else f'{scrape_ms:.2f}'} | "
                     f"{'-' if scrape_cpu is None else f'{scrape_cpu:.2f}'} | "
                     f"{'-' if files is None else f'{files:g}'} |")
    return "\n".join(lines)


def _shown(iv: dict) -> str:
    if iv["low"] is None:
        return f"{iv['mean']:.1f}"
    return f"{iv['mean']:.1f} [{iv['low']:.1f}, {iv['high']:.1f}]"


def report(data: dict) -> str:
    rows, n = data["rows"], data["options"]["repeats"]
    tested = steps(rows)
    load_avg = data["load_average"]
    return "\n".join([
        "# The app's metrics served: prometheus_client's multiprocess mode", "",
        f"`{data['command']}`", "",
        f"Stage {floor.STAGE}'s gunicorn (gunicorn/today.conf.py), {data['options']['workers']} "
        f"workers on CPU {data['cpus']['server']}, a real Redis; an open-model load of "
        f"`GET {PATH}` at {data['options']['rate']:g} a second for "
        f"{data['options']['seconds']:g} s from CPU {data['cpus']['client']}, after a "
        "second's warm-up; each mode once a repeat, the order turned by one each repeat, "
        f"{n} repeat(s); commit `{data.get('git_commit')}`. CPU us/request: gunicorn's "
        "master and workers over the load, per request answered, geometric mean [95% "
        f"interval]; with metrics, {SCRAPES} scrapes of `/metrics` after the load: their "
        "median time and the server's CPU per scrape (arithmetic means over the repeats). "
        f"The box's load average before and after: {load_avg[0]:g}, {load_avg[1]:g} "
        "(2 cores, shared).", "",
        table(rows), "",
        f"Steps, CPU per request (paired within each repeat), {stats.family_line(tested)}:",
        "", *[f"- {name}: {stats.verdict(t)}" for name, t in tested], "",
        "Each repeat:", "",
        "| repeat | mode | answered | CPU us/request | scrape ms | files |",
        "|---|---|---|---|---|---|",
        *[f"| {r['repeat']} | {r['mode']} | {r['answered']:,} | {r['cpu_us_per_request']} | "
          f"{r.get('scrape_ms_median', '-')} | {r.get('files', '-')} |" for r in rows], ""])


def check(args) -> None:
    if args.workers < 2 or args.rate <= 0 or not 2 <= args.seconds <= 120 or args.repeats < 1:
        raise OptionsError("--workers must be at least 2 (the mode is for several), --rate "
                           "above 0, --seconds 2-120, --repeats at least 1 (got "
                           f"{args.workers}, {args.rate:g}, {args.seconds:g}, {args.repeats})")
    procs.require_binary("redis-server", procs.REDIS_HINT)
    procs.require_binary("taskset", "Install util-linux (it has taskset).")


def run(args) -> int:
    check(args)
    out_dir = results.new_run(Path(args.results), suffix="instruments-served")
    place = hosts.placement()
    say(f"instruments, served: stage 8's gunicorn, {args.workers} workers on CPU "
        f"{hosts.format_cpus(place.server)}, {args.rate:g} requests/s for {args.seconds:g} s "
        f"a mode, {len(PLAN)} modes x {args.repeats} repeats; results in "
        f"{results.rel(out_dir)}")
    rows, affinity, load0 = [], os.sched_getaffinity(0), os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="served-") as tmp, \
            procs.redis_server(Path(tmp) / "redis") as redis_port:
        os.sched_setaffinity(0, place.client)
        try:
            for repeat in range(1, args.repeats + 1):
                turn = (repeat - 1) % len(PLAN)
                for mode in PLAN[turn:] + PLAN[:turn]:
                    say(f"repeat {repeat}: {mode.name}")
                    workdir = out_dir / f"repeat-{repeat}" / mode.name
                    rows.append({"repeat": repeat, **serve_once(mode, args, redis_port,
                                                                workdir, Path(tmp))})
        finally:
            os.sched_setaffinity(0, affinity)
    data = {**environment.environment(),
            "command": " ".join([PROG, *sys.argv[1:]]),
            "options": {k: v for k, v in vars(args).items() if k != "results"},
            "cpus": {"server": hosts.format_cpus(place.server),
                     "client": hosts.format_cpus(place.client)},
            "load_average": [round(load0, 2), round(os.getloadavg()[0], 2)], "rows": rows}
    (out_dir / SERVED_JSON).write_text(json.dumps(data, indent=1))
    text = report(data)
    (out_dir / results.REPORT_MD).write_text(text)
    say("\n" + text)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("--workers", type=int, default=4, help="gunicorn workers (4)")
    p.add_argument("--rate", type=float, default=150, help="requests a second (150)")
    p.add_argument("--seconds", type=float, default=10, help="seconds of load a mode (10)")
    p.add_argument("--repeats", type=int, default=5, help="runs of every mode (5)")
    p.add_argument("--results", default=str(results.RESULTS), help="where its folder goes")
    return p


def main(argv=None) -> int:
    return cli.main("instruments-served", run, build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
