"""`python -m benchmarks.studies.recycling`: see the package's docstring."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from dataclasses import asdict
from pathlib import Path

import psutil

from benchmarks import stages
from benchmarks.run import cli, environment, results
from benchmarks.run.cli import say
from benchmarks.run.options import OptionsError
from benchmarks.sandbox import hosts, procs
from benchmarks.studies import floor
from benchmarks.studies.recycling import __doc__ as DOC
from benchmarks.studies.recycling import load, report, scrape, server
from benchmarks.studies.recycling.server import Variant

PATH = "/users/me"  # an authenticated read: the token checked against Redis
THREADS = 64  # the load's senders: enough that a restart's stall holds up no slot's send
START_DELAY_S = 0.3  # the watcher reads the workers before the first slot


def variants(args) -> list[Variant]:
    """For each worker count: no recycling, then max_requests with each jitter; then the
    metrics part's hooks, on the most workers."""
    tail = []
    for w in args.workers:
        tail += [Variant(f"{report.label(w)}, no recycling", w, 0)] + [
            Variant(f"{report.label(w)}, max_requests {args.max_requests}, jitter {j}", w,
                    args.max_requests, j) for j in args.jitter]
    hooks = [Variant(hook, max(args.workers), args.metrics_max_requests, 0, hook, metrics=True)
             for hook in args.metrics_exit]
    return tail + hooks


def app_env(variant: Variant, redis_port: int, scratch: Path) -> dict:
    """Stage 8's settings (its gevent Socket.IO mode too), this Redis; with metrics, a
    fresh multiprocess folder in `scratch`, as prometheus_client asks (empty before the
    server starts)."""
    env = {**floor.app_env(redis_port), **stages.get(floor.STAGE).env}
    if variant.metrics:
        folder = Path(tempfile.mkdtemp(prefix="metrics-", dir=scratch))
        env.update({"FLASK_METRICS": "1", "PROMETHEUS_MULTIPROC_DIR": str(folder)})
    return env


def serve_and_load(variant: Variant, args, redis_port: int, workdir: Path,
                   scratch: Path) -> dict:
    """Start the variant's gunicorn (its config and log in `workdir`), load it for
    --seconds, read its restarts (and with metrics its folder and scrapes), stop it."""
    workdir.mkdir(parents=True)
    config = workdir / "gunicorn.conf.py"
    config.write_text(server.config_text(variant))
    port, env = procs.free_port(), app_env(variant, redis_port, scratch)
    cpus = hosts.format_cpus(hosts.placement().server)
    proc = procs.start(["taskset", "-c", cpus, *server.command(config, port)],
                       log=workdir / "gunicorn.log", env=procs.child_env(**env),
                       cwd=stages.ROOT)
    try:
        procs.wait_until_serving(f"http://127.0.0.1:{port}/healthz", proc)
        token = server.sign_in(port)
        start = time.perf_counter() + START_DELAY_S
        watcher = server.Watcher(proc.pid, start)
        thread = threading.Thread(target=watcher.run, daemon=True)
        thread.start()
        outcomes = load.run(port, PATH, token, args.rate, args.seconds, THREADS, start)
        watcher.stopping.set()
        thread.join()
        row = report.summarize(outcomes, watcher.restarts())
        if variant.metrics:
            alive = {c.pid for c in psutil.Process(proc.pid).children(recursive=True)}
            row.update(scrape.measure(port, Path(env["PROMETHEUS_MULTIPROC_DIR"]), alive))
            row["answered"] = sum(n for k, n in row["outcomes"].items() if k != "reset")
        return {"variant": variant.name, "restart_times": watcher.restarts(), **row}
    finally:
        procs.stop(proc)


def check(args) -> None:
    """Every value, before anything starts."""
    if args.rate <= 0 or not 2 <= args.seconds <= 600 or args.repeats < 1:
        raise OptionsError("--repeats must be at least 1, --rate above 0 and --seconds "
                           f"2-600 (got {args.repeats}, {args.rate:g}, {args.seconds:g})")
    if args.max_requests < 1 or args.metrics_max_requests < 1 or min(args.jitter, default=0) < 0:
        raise OptionsError("--max-requests and --metrics-max-requests must be at least 1, "
                           "each --jitter at least 0")
    unknown = sorted(set(args.metrics_exit) - set(server.EXIT_HOOKS))
    if unknown:
        raise OptionsError(f"--metrics-exit {','.join(unknown)}: not a hook; pick from "
                           f"{', '.join(server.EXIT_HOOKS)}")
    procs.require_binary("redis-server", procs.REDIS_HINT)
    procs.require_binary("taskset", "Install util-linux (it has taskset).")


def run(args) -> int:
    check(args)
    out_dir = results.new_run(Path(args.results), suffix="recycling")
    plan = variants(args)
    say(f"recycling: stage 8's gunicorn, {'/'.join(map(str, args.workers))} workers on CPU "
        f"{hosts.format_cpus(hosts.placement().server)}; {args.rate:g} requests/s for "
        f"{args.seconds:g} s a variant, {len(plan)} variants x {args.repeats} repeats; "
        f"results in {results.rel(out_dir)}")
    rows, affinity, load_before = [], os.sched_getaffinity(0), os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="recycling-") as tmp, \
            procs.redis_server(Path(tmp) / "redis") as redis_port:
        os.sched_setaffinity(0, hosts.placement().client)
        try:
            for repeat in range(1, args.repeats + 1):
                for n, variant in enumerate(plan, 1):  # interleaved: a drift spreads over all
                    say(f"repeat {repeat}: {variant.name}")
                    workdir = out_dir / f"repeat-{repeat}" / f"variant-{n}"
                    rows.append({"repeat": repeat, **serve_and_load(
                        variant, args, redis_port, workdir, Path(tmp))})
                    # each row as it comes: an error or a Ctrl-C later loses none of them
                    (out_dir / "rows.json").write_text(json.dumps(rows, indent=1))
            files = scrape_growth(args, Path(tmp))
        finally:
            os.sched_setaffinity(0, affinity)
    # what else the box did: this machine is shared, the report says how busy it was
    write(out_dir, args, plan, rows, [round(load_before, 2), round(os.getloadavg()[0], 2)],
          files)
    return 0


def scrape_growth(args, scratch: Path) -> list[dict]:
    """With the metrics part: the scrape against K exited workers' files, from a real
    worker's files of the run (any variant's folder)."""
    if not args.metrics_exit:
        return []
    for folder in sorted(scratch.glob("metrics-*")):
        if list(folder.glob("counter_*.db")):
            say(f"the scrape against {args.growth} exited workers' files")
            return scrape.growth(folder, args.growth, scratch)
    return []


def write(out_dir: Path, args, plan: list[Variant], rows: list[dict],
          load_average: list[float], files: list[dict]) -> None:
    names = {v.name for v in plan if v.metrics}
    tails = [r for r in rows if r["variant"] not in names]
    hooks = [r for r in rows if r["variant"] in names]
    command = " ".join(["python -m benchmarks.studies.recycling", *sys.argv[1:]])
    data = {**environment.environment(), "command": command,
            "options": {k: v for k, v in vars(args).items() if k != "results"},
            "load_average": load_average, "variants": [asdict(v) for v in plan], "rows": rows,
            "growth": files}
    (out_dir / "recycling.json").write_text(json.dumps(data, indent=1))
    text = (f"# Workers recycled\n\n`{data['command']}`\n\nThe box's load average "
            f"before and after: {load_average[0]:g}, {load_average[1]:g} (2 cores).\n\n"
            "## The tail\n\n"
            f"{report.tail_table(tails)}\n\n## Steps (paired over the repeats)\n\n"
            f"{report.steps(tails, args.workers, args.max_requests, args.jitter)}\n")
    if hooks:
        text += f"\n## prometheus_client's files\n\n{report.metrics_table(hooks)}\n"
    if files:
        text += ("\n## The scrape against exited workers' files\n\n"
                 f"{report.growth_table(files)}\n")
    (out_dir / results.REPORT_MD).write_text(text)
    say("\n" + text)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.studies.recycling",
                                description=DOC.split("\n\n")[0])
    p.add_argument("--workers", type=cli.int_list(1, "a worker count"), default=[1, 4],
                   help="gunicorn workers, a set of variants each (1,4: stage 8's one per "
                        "core on the lab's one server core, and the book's -w 4)")
    p.add_argument("--rate", type=float, default=200, help="requests a second (200)")
    p.add_argument("--seconds", type=float, default=20, help="seconds of load a variant (20)")
    p.add_argument("--repeats", type=int, default=3, help="runs of every variant (3)")
    p.add_argument("--max-requests", type=int, default=300,
                   help="gunicorn's max_requests in the recycled variants (300)")
    p.add_argument("--jitter", type=cli.int_list(0, "a jitter"), default=[0, 150],
                   help="max_requests_jitter values, a variant each (0,150)")
    p.add_argument("--metrics-exit", type=lambda s: [x for x in s.split(",") if x],
                   default=[], help="child_exit hooks to compare with FLASK_METRICS=1: "
                                    f"{','.join(server.EXIT_HOOKS)} (none run by default)")
    p.add_argument("--metrics-max-requests", type=int, default=50,
                   help="max_requests in the metrics part: many restarts (50)")
    p.add_argument("--growth", type=cli.int_list(0, "a count of exited workers"),
                   default=[0, 10, 100, 1000],
                   help="with --metrics-exit: the scrape timed against the files of this many "
                        "exited workers, as they are and folded (0,10,100,1000)")
    p.add_argument("--results", default=str(results.RESULTS), help="where its folder goes")
    return p


def main(argv=None) -> int:
    return cli.main("recycling", run, build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
