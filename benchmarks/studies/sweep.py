"""sweep: workers versus cores. One stage, gunicorn `-w 1,2,4,8`, R repeats each.

Purpose: show where adding gunicorn workers stops helping on this machine's
cores, and how much one measurement varies from the next. Each point is a
full `lab run` of one stage (benchmarks/run/runner.py's `run_stage`: its own
network namespace, Redis, the app, seeded users, endpoint verification,
warm-up, the measured Locust run with the sampler beside it), with only the
worker count changed (`with_workers`, a copy of the registry's stage).

Usage:

    python -m benchmarks.studies.sweep                  # stage 2, -w 1,2,4,8, 3 repeats, 10 s
    python -m benchmarks.studies.sweep --stage 3 --user-class ChatUser
    python -m benchmarks.studies.sweep --workers 1,2 --repeats 1 --duration 3 --warmup 1

Writes results/<timestamp>-sweep/: `sweep.csv` (workers, repeat, rps, p50,
p95, p99, failures, app_cpu, locust_cpu, app_cpu_ms_per_req, cs_vol_per_req,
cs_invol_per_req, load1), `summary.csv` (means and the standard deviation
of rps per worker count) and one lab stage folder per point
(`w2-r1/02-connection-pool/...`, the same files as `lab run` writes); prints
a table of mean ± stdev per worker count. Repeats are the outer loop: a
slow change of the machine (another job) spreads over every worker count.

`app_cpu` and `locust_cpu` are the sampler's mean CPU during the measured
run, in % of one core (200% = both cores of a 2-core box): the app is the
gunicorn master and its workers, Locust is the load generator, on its own
CPU set unless `--server-cpus`/`--client-cpus` make them overlap (the sweep
then says so). `app_cpu_ms_per_req` is
the app's CPU time per request (what one request costs, whatever the load).
`cs_vol_per_req`/`cs_invol_per_req` are the context switches of the app's
gunicorn processes per request (`SwitchWatch`): voluntary (it waited for a
socket) and involuntary (preempted: more runnable processes than cores).
`load1` is the machine's 1-minute load average after the point: above the
core count, other jobs were competing too.

Requirements: as `python -m benchmarks.lab run` (redis-server, the venv; root
for network namespaces, else host mode on free loopback ports).

Overhead: one point takes about warm-up + duration + 10 s of set-up; the
default 4 worker counts x 3 repeats x (5 + 10 s) is about 5 minutes, with
both cores busy for most of it. SwitchWatch walks /proc twice a second.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import os
import statistics
import sys
import threading
import time
from pathlib import Path

import psutil

from benchmarks import stages
from benchmarks.analysis import metrics
from benchmarks.capture import csvfile
from benchmarks.run import cli, locust_cli, options, results, runner
from benchmarks.run.cli import StageFailed, say
from benchmarks.sandbox import hosts
from benchmarks.stages import Stage

CSV_COLUMNS = ("workers", "repeat", "rps", "p50", "p95", "p99", "failures", "app_cpu",
               "locust_cpu", "app_cpu_ms_per_req", "cs_vol_per_req", "cs_invol_per_req", "load1")
SUMMARY_COLUMNS = ("workers", "n", "rps_mean", "rps_sd", "p50_mean", "p95_mean", "p99_mean",
                   "failures", "app_cpu_mean", "locust_cpu_mean", "app_cpu_ms_per_req_mean",
                   "cs_vol_per_req_mean", "cs_invol_per_req_mean", "load1_mean")


def with_workers(stage: Stage, workers: int) -> Stage:
    """A copy of `stage` whose gunicorn command runs `workers` workers.

    The stage's config file (`-c gunicorn/sync.conf.py`) stays the one source of
    truth: `-w N` goes on the command line right after it, and gunicorn's
    command line wins over the file. Key, slug and checks stay the stage's, so
    its results folder (`02-connection-pool`) and its checks read the same as in
    `lab run`.
    """
    server = list(stage.server)
    if stage.gunicorn_config is None:
        raise ValueError(f"stage {stage.key} ({server[0]}) has no gunicorn config (`-c`): "
                         "not a gunicorn stage")
    if "-w" in server:
        server[server.index("-w") + 1] = str(workers)
    else:
        at = server.index("-c") + 2
        server[at:at] = ["-w", str(workers)]
    return dataclasses.replace(stage, server=tuple(server))


class SwitchWatch:
    """Context switches of the app's gunicorn processes in one network namespace.

    A thread sums `voluntary_ctxt_switches` (the process waited: for a socket,
    for Redis) and `nonvoluntary_ctxt_switches` (the scheduler took the core
    away: more runnable processes than cores) over the namespace's gunicorn
    processes twice a second; `per_second(t0, t1)` is the rate between two
    times (the measured run's, from sampler.csv). Cheap: a /proc walk per
    sample. Host mode has no namespace to tell this run's gunicorn from
    another's, so it records nothing there.
    """

    def __init__(self, netns: str | None, interval: float = 0.5):
        self.netns, self.interval = netns, interval
        self.samples: list[tuple[float, int, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> None:
        try:
            ns = os.stat(f"/run/netns/{self.netns}").st_ino
        except OSError:
            return
        vol = invol = 0
        for proc in psutil.process_iter(["cmdline"]):
            try:
                if "gunicorn" not in " ".join(proc.info["cmdline"] or ()):
                    continue
                if os.stat(f"/proc/{proc.pid}/ns/net").st_ino != ns:
                    continue
                switches = proc.num_ctx_switches()
            except (psutil.Error, OSError):
                continue
            vol, invol = vol + switches.voluntary, invol + switches.involuntary
        if vol or invol:
            self.samples.append((time.time(), vol, invol))

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def __enter__(self):
        if self.netns:
            self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def per_second(self, t0: float, t1: float) -> tuple[float, float] | None:
        inside = [s for s in self.samples if t0 <= s[0] <= t1]
        if len(inside) < 2 or inside[-1][0] - inside[0][0] <= 0:
            return None
        (ta, va, ia), (tb, vb, ib) = inside[0], inside[-1]
        return (vb - va) / (tb - ta), (ib - ia) / (tb - ta)


def measured_window(sampler_csv: Path) -> tuple[float, float] | None:
    """First and last `ts` of the sampler: the measured run."""
    ts = [row["ts"] for row in csvfile.rows(sampler_csv) if "ts" in row]
    return (ts[0], ts[-1]) if len(ts) >= 2 else None


def run_options(args) -> options.RunOptions:
    """The options `runner.run_stage` reads: the lab's defaults, the sweep's values."""
    return options.RunOptions(
        stages=(stages.get(args.stage),), duration=args.duration, users=args.users,
        spawn_rate=args.spawn_rate, warmup=args.warmup, wait_max=args.wait_max,
        locust_args=options.split_locust_args(args.locust_args), sandbox=args.sandbox,
        results=Path(args.results), server_cpus=args.server_cpus, client_cpus=args.client_cpus)


def run_point(stage: Stage, workers: int, repeat: int, sweep_dir: Path,
              opts: options.RunOptions, user_class: str) -> dict:
    """One (workers, repeat) point: a lab stage run with `workers` workers.

    Tried twice: the lab starts measuring once gunicorn's port answers, and on
    a busy 2-core box eight freshly forked workers may still be importing
    the app when the endpoint check's first request arrives (it then times
    out after 5 s). The failed try's folder is kept, with `-failed` appended.
    """
    point = with_workers(stage, workers)
    point = dataclasses.replace(point, users=(user_class,))
    point_dir = sweep_dir / f"w{workers}-r{repeat}"
    # the name runner.run_stage's Sandbox gives the point's namespace
    netns = (f"{hosts.NS_PREFIX}{os.getpid()}-{point.key}-app" if opts.sandbox == "netns"
             else None)
    for attempt in (1, 2):
        point_dir.mkdir()
        try:
            with SwitchWatch(netns) as switches:
                result = runner.run_stage(point, point_dir, opts)
            break
        except StageFailed as e:
            if attempt == 2:
                raise
            point_dir.rename(point_dir.with_name(point_dir.name + "-failed"))
            say(f"  the point failed to run ({str(e).splitlines()[0]}); trying once more")
    stage_dir = results.stage_dir(point_dir, point)
    samples = stage_dir / results.SAMPLER_CSV
    m = result["metrics"]
    rps, app_cpu = m.get("rps"), metrics.mean_cpu(samples, "cpu_app")
    window = measured_window(samples)
    rates = switches.per_second(*window) if window else None
    return {"workers": workers, "repeat": repeat, "rps": rps, "p50": m.get("p50_ms"),
            "p95": m.get("p95_ms"), "p99": m.get("p99_ms"), "failures": m.get("failures"),
            "app_cpu": app_cpu,
            "locust_cpu": metrics.mean_cpu(samples, "cpu_locust"),
            # CPU time the app spent per request: % of a core x 10 ms / (requests/s)
            "app_cpu_ms_per_req": round(app_cpu * 10 / rps, 2) if app_cpu and rps else None,
            "cs_vol_per_req": round(rates[0] / rps, 2) if rates and rps else None,
            "cs_invol_per_req": round(rates[1] / rps, 2) if rates and rps else None,
            # the machine's 1-minute load average just after the point: other jobs
            # on the same cores show here
            "load1": round(os.getloadavg()[0], 1)}


def _mean(values, digits: int = 1):
    values = [v for v in values if v is not None]
    return round(statistics.fmean(values), digits) if values else None


def summarize(rows: list[dict]) -> list[dict]:
    """Mean (and the standard deviation of rps) per worker count, in sweep order."""
    out = []
    for workers in dict.fromkeys(r["workers"] for r in rows):
        mine = [r for r in rows if r["workers"] == workers]
        rps = [r["rps"] for r in mine if r["rps"] is not None]
        out.append({
            "workers": workers, "n": len(mine), "rps_mean": _mean(rps),
            "rps_sd": round(statistics.stdev(rps), 1) if len(rps) > 1 else None,
            "p50_mean": _mean(r["p50"] for r in mine), "p95_mean": _mean(r["p95"] for r in mine),
            "p99_mean": _mean(r["p99"] for r in mine),
            "failures": sum(r["failures"] or 0 for r in mine),
            "app_cpu_mean": _mean(r["app_cpu"] for r in mine),
            "locust_cpu_mean": _mean(r["locust_cpu"] for r in mine),
            "app_cpu_ms_per_req_mean": _mean([r.get("app_cpu_ms_per_req") for r in mine], 2),
            "cs_vol_per_req_mean": _mean([r.get("cs_vol_per_req") for r in mine], 2),
            "cs_invol_per_req_mean": _mean([r.get("cs_invol_per_req") for r in mine], 2),
            "load1_mean": _mean(r.get("load1") for r in mine)})
    return out


def _fmt(value, spec=".0f") -> str:
    return "-" if value is None else format(value, spec)


def table(summary: list[dict]) -> str:
    lines = [f"{'workers':>7}  {'n':>2}  {'req/s (mean ± sd)':>18}  {'p50 ms':>6}  "
             f"{'p95 ms':>6}  {'p99 ms':>6}  {'fail':>4}  {'app CPU%':>8}  {'locust CPU%':>11}"
             f"  {'CPU ms/req':>10}  {'cs/req vol':>10}  {'invol':>5}  {'load':>4}"]
    for s in summary:
        rps = f"{_fmt(s['rps_mean'])} ± {_fmt(s['rps_sd'])}"
        lines.append(f"{s['workers']:>7}  {s['n']:>2}  {rps:>18}  {_fmt(s['p50_mean']):>6}  "
                     f"{_fmt(s['p95_mean']):>6}  {_fmt(s['p99_mean']):>6}  "
                     f"{s['failures']:>4}  {_fmt(s['app_cpu_mean']):>8}  "
                     f"{_fmt(s['locust_cpu_mean']):>11}  "
                     f"{_fmt(s['app_cpu_ms_per_req_mean'], '.2f'):>10}  "
                     f"{_fmt(s['cs_vol_per_req_mean'], '.2f'):>10}  "
                     f"{_fmt(s['cs_invol_per_req_mean'], '.2f'):>5}  "
                     f"{_fmt(s['load1_mean'], '.1f'):>4}")
    return "\n".join(lines)


def write_csv(path: Path, columns, rows) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.studies.sweep", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--stage", default="2",
                   help="a gunicorn stage, key or slug (default 2: sync workers and a pool; "
                        "3 or 3g: eventlet or gevent)")
    p.add_argument("--workers", type=cli.int_list(1, "worker counts"), default=[1, 2, 4, 8],
                   help="gunicorn -w values, comma separated (default 1,2,4,8)")
    p.add_argument("--repeats", type=int, default=3, help="runs per worker count (default 3)")
    p.add_argument("--duration", type=float, default=10, help="seconds measured per point")
    p.add_argument("--warmup", type=float, default=5, help="seconds of load before measuring")
    p.add_argument("--users", type=int, default=50, help="Locust users")
    p.add_argument("--spawn-rate", type=float, default=50, help="users started per second")
    p.add_argument("--user-class", default="KeyValueUser",
                   choices=("KeyValueUser", "ChatUser"),
                   help="KeyValueUser: the book's one-URL SET+GET, no think time (default); "
                        "ChatUser: the chat mix")
    p.add_argument("--wait-max", type=float, default=0.01,
                   help="ChatUser: most seconds between tasks (CHAT_WAIT_MAX)")
    p.add_argument("--locust-args", default="", help="more Locust options")
    cli.add_sandbox_options(p, per="point")
    return p


def placed(opts: options.RunOptions) -> str:
    """Where the points ran: `server CPU 1, client CPU 0 (of 2)`."""
    cpus = opts.placement.as_dict()
    return (f"server CPU {cpus['server_cpus']}, client CPU {cpus['client_cpus']} "
            f"(of {os.cpu_count()})")


def run_sweep(args) -> int:
    stage = stages.get(args.stage)
    try:
        with_workers(stage, 1)  # a clear error now for a stage that is not gunicorn
    except ValueError as e:
        raise options.OptionsError(str(e)) from e
    if args.repeats < 1:
        raise options.OptionsError(f"--repeats must be >= 1 (got {args.repeats})")
    opts = dataclasses.replace(run_options(args), sandbox=cli.resolve_sandbox(args.sandbox))
    locust_cli.check_locust_args(opts)
    sweep_dir = results.new_run(opts.results, suffix="sweep")
    say(f"sweep: stage {stage.key} {stage.slug}, -w {','.join(map(str, args.workers))}, "
        f"{args.repeats} repeat(s), {opts.duration:g} s each, {opts.users} "
        f"{args.user_class}, {placed(opts)}; results in {results.rel(sweep_dir)}")
    if opts.placement.overlap:
        say(f"note: the server and Locust share CPU {opts.placement.as_dict()['overlap']}: "
            "the points then depend on how much CPU Locust takes")
    rows: list[dict] = []
    try:
        for repeat in range(1, args.repeats + 1):
            # repeats on the outside: a slow drift of the machine (another job, thermal)
            # spreads over every worker count instead of biasing one
            for workers in args.workers:
                say(f"\n== -w {workers}, repeat {repeat}/{args.repeats}")
                rows.append(run_point(stage, workers, repeat, sweep_dir, opts, args.user_class))
                write_csv(sweep_dir / "sweep.csv", CSV_COLUMNS, rows)
    finally:
        if rows:
            rows.sort(key=lambda r: (args.workers.index(r["workers"]), r["repeat"]))
            write_csv(sweep_dir / "sweep.csv", CSV_COLUMNS, rows)
            summary = summarize(rows)
            write_csv(sweep_dir / "summary.csv", SUMMARY_COLUMNS, summary)
            say(f"\nstage {stage.key} {stage.slug}, {args.user_class}, {opts.users} users, "
                f"{opts.duration:g} s per point, {placed(opts)}")
            say(table(summary))
            say(f"\n{results.rel(sweep_dir / 'sweep.csv')}")
    return 0


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    return cli.main("sweep", run_sweep, args, leftovers=runner.leftovers)


if __name__ == "__main__":
    sys.exit(main())
