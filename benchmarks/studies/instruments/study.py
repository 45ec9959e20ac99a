"""What each instrument costs the app per request: the floor, bare and instrumented.

    python -m benchmarks.studies.instruments
        [--instruments bare,prometheus,flask-exporter,otel,otel-10]
        [--repeats 3] [--seconds 2] [--redis-cpu server|apart] [--app-cpus CPUS] [--redis-cpus CPUS]

Stage 8's app called in-process as a WSGI callable, as the floor study calls it
(benchmarks/studies/floor.py: the chat mix's request types, each warmed up, then a
timed loop of --seconds; CPU per request of the process, every thread), once bare and
once with each instrument (variants.py): app/watchers/metrics.py's Prometheus counters and
histogram, prometheus-flask-exporter's defaults, OpenTelemetry (app/watchers/tracing.py) at 100%
and at a sampled share. Each instrument's app is a process of its own (worker.py),
pinned to the lab's server CPU, so that nothing of one (the Redis patch, the default
metrics registry) reaches another; Redis is real, started here, on the app's CPU or
apart (--redis-cpu, as the floor). Traces go over OTLP/HTTP to a receiver started here
(otlp_sink.py), pinned to the lab's client CPUs: its CPU is recorded beside, not in the
app's. Every repeat measures every instrument, one after another in an order that
turns by one each repeat, so a drift of the box moves bare and the rest alike: each
instrument's cost is a paired step against bare (benchmarks/analysis/stats.py step:
the ratio within each repeat, its 95% interval and p). Spans: every span the sink
receives is counted against the spans the app made and the requests sent; spans lost
are reported.

Writes results/<timestamp>-instruments/ (instruments.json: every repeat's figures;
instruments.csv and report.md: the table; a log per process).

Requirements: redis-server and taskset (util-linux), the venv. No root.
Overhead: one core for instruments x 6 types x (--seconds x --repeats + a warm-up of
0.5 s), and a few seconds a worker to start: about 4 min with the defaults.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.chat_mix import WEIGHTS
from benchmarks.run import cli, environment, results
from benchmarks.run.cli import say
from benchmarks.run.options import OptionsError
from benchmarks.sandbox import hosts, procs
from benchmarks.studies import floor
from benchmarks.studies.instruments import services, table, variants

PROG = "python -m benchmarks.studies.instruments"
MEASURE_S = 60  # a worker's answer may take this beyond its types' seconds (flushes, a busy box)


def check(args) -> list[dict]:
    """Every value, before anything starts; the instruments as variants.parse gives them."""
    chosen = variants.chosen(args.instruments)
    if args.repeats < 1 or not floor.MIN_SECONDS <= args.seconds <= floor.MAX_SECONDS:
        raise OptionsError(f"--repeats must be at least 1 and --seconds "
                           f"{floor.MIN_SECONDS:g}-{floor.MAX_SECONDS:g} (got {args.repeats}, "
                           f"{args.seconds:g})")
    floor.check_cpu_sets(args, ("app_cpus", "redis_cpus", "sink_cpus"))
    procs.require_binary("redis-server", procs.REDIS_HINT)
    procs.require_binary("taskset", "Install util-linux (it has taskset).")
    return chosen


def placement(args) -> dict[str, frozenset[int]]:
    """The app's CPUs (the lab's server CPU), Redis's (with it, or apart on the client
    CPUs), the sink's (the client CPUs, as a host of its own would be)."""
    app, redis = floor.placement(args)
    sink = hosts.parse_cpus(args.sink_cpus) if args.sink_cpus else hosts.placement().client
    return {"app": app, "redis": redis, "sink": sink}


class Box:
    """What else used the app's CPUs (and the sink's) while the study measured: busy
    time of those CPUs less the study's own processes on them, in % (others_cpu_pct)."""

    def __init__(self, cpus: dict, pids: dict[str, int]):
        self.cpus, self.pids, self.sets = cpus, pids, {"app": cpus["app"], "sink": cpus["sink"]}
        self.load0 = os.getloadavg()[0]
        self.wall0, self.busy0, self.own0 = time.perf_counter(), self.busy(), self.own()

    def busy(self) -> dict:
        return {k: floor.busy_seconds(v) for k, v in self.sets.items()}

    def own(self) -> dict:
        """Our processes' CPU on each set, by where each is pinned."""
        out = dict.fromkeys(self.sets, 0.0)
        for role, pid in self.pids.items():
            where = "app" if role.startswith("worker") else role
            for k, cpus in self.sets.items():
                if self.cpus[where] & cpus:
                    out[k] += floor.cpu_seconds(pid)
                    break
        return out

    def result(self) -> dict:
        wall, busy, own = time.perf_counter() - self.wall0, self.busy(), self.own()
        pct = {k: round(100 * max(0.0, busy[k] - self.busy0[k] - own[k] + self.own0[k])
                        / (wall * len(self.sets[k])), 1) for k in self.sets}
        return {"load_average": [round(self.load0, 2), round(os.getloadavg()[0], 2)],
                "others_cpu_pct": pct["app"], "others_sink_cpu_pct": pct["sink"]}


def start_workers(box_services, chosen, cpus, redis, sink, out_dir, seconds) -> dict:
    """A worker per instrument, one at a time (each warms up alone), and what the sink
    received while each started: {name: (Worker, {spans, server spans} received)}."""
    workers = {}
    for v in chosen:
        before = counted(sink)
        worker = box_services.worker(v["name"], cpus["app"], redis, sink and sink[1],
                                     out_dir / f"worker-{v['name']}.log",
                                     min(floor.WARMUP_S, seconds))
        worker.reply(services.READY_S)
        workers[v["name"]] = (worker, received(sink, before))
    return workers


def received(sink, before: dict | None) -> dict:
    """Spans (all, and SERVER: one per request) the sink counted since `before`."""
    if not sink:
        return {"spans": 0, "server_spans": 0, "sink_cpu_s": 0.0}
    now = services.sink_count(sink[1])
    return {"spans": now["spans"] - before["spans"],
            "server_spans": now["by_kind"].get("SERVER", 0) - before["by_kind"].get("SERVER", 0),
            "sink_cpu_s": floor.cpu_seconds(sink[0].pid) - before.get("cpu_s", 0.0)}


def counted(sink) -> dict | None:
    return {**services.sink_count(sink[1]), "cpu_s": floor.cpu_seconds(sink[0].pid)} \
        if sink else None


def measure(workers: dict, sink, repeats: int, seconds: float) -> list[dict]:
    """Every repeat, every instrument, in an order that turns by one each repeat:
    [{instrument: {types, requests, spans received, sink CPU}}]."""
    names, out = list(workers), []
    timeout = len(WEIGHTS) * seconds + MEASURE_S
    for repeat in range(repeats):
        say(f"repeat {repeat + 1}/{repeats}")
        order, figures = names[repeat % len(names):] + names[:repeat % len(names)], {}
        for name in order:
            before = counted(sink)
            answer = workers[name][0].ask({"seconds": seconds}, timeout)
            figures[name] = {"types": answer["types"], **received(sink, before)}
        out.append({name: figures[name] for name in names})
    return out


def finish(workers: dict, sink) -> dict:
    """Each worker told to stop (its last flush), and its totals: requests sent, spans
    made, spans the sink received from it over its life (start, repeats, stop)."""
    totals = {}
    for name, (worker, at_start) in workers.items():
        before = counted(sink)
        worker.proc.stdin.close()
        done = worker.reply(MEASURE_S)
        worker.proc.wait(timeout=MEASURE_S)
        at_stop = received(sink, before)
        totals[name] = {"requests": done["requests"], "spans_made": done["spans_made"],
                        **{f"{k}_{when}": got[k] for when, got in (("at_start", at_start),
                                                                    ("at_stop", at_stop))
                           for k in ("spans", "server_spans")}}
    return totals


def run(args) -> int:
    chosen = check(args)
    cpus = placement(args)
    out_dir = results.new_run(Path(args.results), suffix="instruments")
    say(f"instruments: stage {floor.STAGE}'s app in-process on CPU "
        f"{hosts.format_cpus(cpus['app'])}, {', '.join(v['name'] for v in chosen)}, Redis on "
        f"CPU {hosts.format_cpus(cpus['redis'])}; {args.repeats} repeat(s) of {args.seconds:g} "
        f"s per request type; results in {results.rel(out_dir)}")
    started = services.Services()
    try:
        with tempfile.TemporaryDirectory(prefix="instruments-redis-") as workdir:
            redis = started.redis(cpus["redis"], Path(workdir))
            sink = started.sink(cpus["sink"], out_dir / "sink.log") \
                if any(v["ratio"] for v in chosen) else None
            workers = start_workers(started, chosen, cpus, redis, sink, out_dir, args.seconds)
            pids = {"redis": redis[0].pid, **({"sink": sink[0].pid} if sink else {}),
                    **{f"worker-{n}": w.proc.pid for n, (w, _) in workers.items()}}
            box = Box(cpus, pids)
            repeats = measure(workers, sink, args.repeats, args.seconds)
            box = box.result()
            totals = finish(workers, sink)
    finally:
        started.stop_all()
    data = {**environment.environment(), "stage": floor.STAGE, "command": command(args),
            "instruments": chosen, "cpus": {k: hosts.format_cpus(v) for k, v in cpus.items()},
            "redis_cpu": floor.layout(args), "seconds": args.seconds, "weights": WEIGHTS,
            "box": box, "repeats": repeats, "totals": totals,
            "prometheus_multiprocess": bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))}
    table.write(out_dir, data)
    say("\n" + table.table(table.summarize(data)))
    say(f"\n{results.rel(out_dir / results.INSTRUMENTS_JSON)}; {results.REPORT_MD} beside it")
    return 0


def command(args) -> str:
    """The command that made the run, as a user would type it."""
    return " ".join([PROG, *sys.argv[1:]]) if sys.argv[0].endswith("__main__.py") else \
        f"{PROG} --instruments {args.instruments} --repeats {args.repeats} --seconds " \
        f"{args.seconds:g} --redis-cpu {args.redis_cpu}" + \
        (f" --redis-cpus {args.redis_cpus}" if args.redis_cpus else "")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("--instruments", default=variants.DEFAULT,
                   help=f"comma-separated, bare among them ({variants.DEFAULT}); otel-N "
                        "keeps N%% of the traces")
    p.add_argument("--repeats", type=int, default=3, help="runs of every instrument (3)")
    p.add_argument("--seconds", type=float, default=floor.DEFAULT_SECONDS,
                   help="seconds of requests per type, instrument and repeat (2)")
    p.add_argument("--results", default=str(results.RESULTS),
                   help="where the study's folder goes (results/)")
    floor.add_placement_options(p)
    p.add_argument("--sink-cpus", metavar="CPUS",
                   help="CPUs of the OTLP sink (default: the lab's client CPUs)")
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    return cli.main("instruments", run, args)


if __name__ == "__main__":
    sys.exit(main())
