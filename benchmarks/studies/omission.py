"""omission: how not to measure latency. The closed model against the open model.

    python -m benchmarks.studies.omission [--stages 2,5] [--levels 50,80,95,110]
        [--capacity R] [--repeats 3] [--duration 10] [--stall 2]

For each stage: the stage up (as `lab up`), then

1. its capacity: the chat mix from 50 closed-model users with no think time, for
   --duration seconds (answered requests a second), unless --capacity gives it;
2. at each level (% of that capacity, the offered rate), turn about, the closed
   model paced to the rate (benchmarks/arrivals.py's `PacedUser`: --users users,
   each waiting for its answer, then for the rest of its share of the rate) and
   the open model (`ArrivalUser`: requests started on a schedule, each timed from
   its intended start), --repeats times over (repeats outside, levels inside);
3. under each model at the lowest level, a run with the app's workers stopped
   (SIGSTOP) for --stall seconds, 1 s after the load reaches the app (its access
   log grows), then continued (SIGCONT; on every
   way out, Ctrl-C included). The closed model records about one slow request per
   user; the open model records every request scheduled into the stall.

Only the room's history reads and posts are timed (`/rooms/[id]/messages`, 9 of
the mix's 11): the sessions' log-ins at the start are not the load.

Writes results/<timestamp>-omission/: `omission.csv` (a row per Locust run:
p50, p90, p99, p99.9, p99.99 by the lab's one rule (benchmarks/analysis/stats.py)
on the run's `latency.hlog` (every time to 3 significant digits; the table and the
plots show a percentile only where the run had the requests to support it), max,
requests over 1 s, late starts), a folder per run with Locust's files and its
.hlog, `omission-summary.csv` (means with 95% intervals over the repeats),
`hockey_stick.png` and `spectrum.png`, `report.md` (`python -m
benchmarks.analysis.report FOLDER` rebuilds them) and `study.json` (the options,
commit, versions, kernel); prints the table.

Requirements: as `lab up` (root for network namespaces, redis-server, the venvs).
Overhead: per stage, about 15 s to come up, then (duration + 3 s) per run:
2 models x 4 levels x 3 repeats + 3 runs is about 7 minutes at 10 s.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import time
from pathlib import Path

import psutil

from benchmarks import latency_log
from benchmarks.analysis import metrics, omission
from benchmarks.run import cli, environment, locust_cli, open_model, options, results, runner
from benchmarks.run.cli import StageFailed, say
from benchmarks.sandbox import procs, sandbox
from benchmarks.stages import ROOT

CLASSES = {"closed": "PacedUser", "open": locust_cli.ARRIVAL_CLASS}
TIMED = "/rooms/[id]/messages"  # the requests whose times count (not the log-ins)
UNPACED = 1_000_000  # PacedUser's rate for the capacity run: no pause between requests
DEFAULT_LEVELS = (50, 80, 95, 110)
STUDY_JSON = "study.json"  # the environment (commit, versions, kernel) and the options
STARTUP_S = 30  # most seconds for Locust to come up and the load to reach the app


def histogram(out_dir: Path) -> tuple[dict[float, int], int, float]:
    """The timed requests' {ms: count} from the run's .hlog (every time to 3 significant
    digits, where Locust's buckets are 100 ms wide past a second), their failures from
    Locust's --json-file, and the answered requests a second of the whole mix (as the
    offered rate counts them)."""
    entries = results.read_json(out_dir / results.LOCUST_JSON)
    timed = [e for e in entries if e["name"] == TIMED]
    hlog = out_dir / results.LATENCY_HLOG
    if not timed or not sum(e["num_requests"] for e in timed) or not hlog.exists():
        raise StageFailed(f"Locust timed no {TIMED} request (or wrote no {hlog.name}); see "
                          f"{out_dir / 'locust.log'}")
    times = latency_log.times_ms(hlog, lambda tag: latency_log.name_of(tag) == TIMED)
    return times, sum(e["num_failures"] for e in timed), metrics.group_rps(entries)


def workers_of(master_pid: int) -> list[psutil.Process]:
    """The app server's workers: the children of the gunicorn under the stage's process
    (`ip netns exec` and `taskset` exec it, so usually that process itself)."""
    root = psutil.Process(master_pid)
    tree = [root, *root.children(recursive=True)]
    master = next((p for p in tree if "gunicorn" in " ".join(p.cmdline())), None)
    if master is None or not master.children():
        raise StageFailed(f"no gunicorn workers under pid {master_pid}: a stall needs a "
                          "gunicorn stage")
    return master.children()


@contextlib.contextmanager
def stalled(pids: list[int]):
    """SIGSTOP to the workers, SIGCONT on the way out, whichever way that is (a Ctrl-C
    while they are stopped continues them before it goes on)."""
    stopped = []
    try:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
                stopped.append(pid)
        yield stopped
    finally:
        with sandbox.uninterrupted():
            for pid in stopped:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)


def wait_for_load(log: Path, timeout: float = STARTUP_S) -> None:
    """Until the app's access log grows by a few lines: the load has reached it."""
    size, end = log.stat().st_size if log.exists() else 0, time.monotonic() + timeout
    while time.monotonic() < end:
        if log.exists() and log.stat().st_size > size + 2000:
            return
        time.sleep(0.1)
    raise StageFailed(f"no load reached the app within {timeout:.0f} s ({log})")


def locust_options(url: str, users: int, rate: float, seconds: int, users_file: Path,
                   out_dir: Path) -> list[str]:
    # the closed model's users start over one pacing period (users / rate seconds), so
    # their requests spread over it instead of leaving in step, fifty at a time
    spawn = f"{min(max(1.0, rate), 1000):g}"
    return ["--headless", "-u", str(users), "-r", spawn, "-t", f"{seconds}s",
            "--host", url, "--only-summary", "--stop-timeout", "5",
            "--arrival-rate", f"{rate:g}", "--arrival-file",
            str(out_dir / locust_cli.ARRIVALS_JSON),
            "--chat-users-file", str(users_file),
            "--json-file", str(out_dir / results.LOCUST_JSON.removesuffix(".json")),
            "--latency-file", str(out_dir / results.LATENCY_HLOG)]


def run_load(ctx: dict, model: str, rate: float, out_dir: Path, stall: float = 0.0) -> dict:
    """One Locust run of `model` at `rate` (requests a second in all); with `stall`, the
    app's workers stopped that many seconds once the load flows. Its figures."""
    out_dir.mkdir(parents=True)
    users = 1 if model == "open" else ctx["users"]
    cmd = locust_cli.command((CLASSES[model],), locust_options(
        ctx["url"], users, rate, ctx["duration"], ctx["users_file"], out_dir))
    (out_dir / "locust-command.txt").write_text(" ".join(cmd) + "\n")
    proc = procs.start([*ctx["client"], *cmd], log=out_dir / "locust.log",
                       env=procs.child_env(), cwd=ROOT)
    try:
        if stall:
            wait_for_load(ctx["access_log"])
            time.sleep(1)
            with stalled([w.pid for w in workers_of(ctx["app_pid"])]):
                time.sleep(stall)
        proc.wait(timeout=ctx["duration"] + STARTUP_S + 30)
    finally:
        if proc.poll() is None:
            procs.stop(proc)
    times, failures, rps = histogram(out_dir)
    counts = open_model.read(out_dir) or {}
    return {"model": model, "rate": round(rate, 1), "users": users,
            "requests": sum(times.values()), "failures": failures, "rps": rps,
            **omission.figures(times), "percentiles_from": "hdrhistogram",
            "late": counts.get("late"), "stall_s": stall,
            # the open model's figures are the client's too when it could not keep the
            # schedule (benchmarks/run/open_model.py)
            "unreliable": open_model.unreliable(counts) if counts else ""}


def capacity(ctx: dict, out_dir: Path) -> float:
    """Answered requests a second of the closed model with no pause: what the stage
    serves flat out (every request of the mix, the log-ins left out)."""
    got = run_load(ctx, "closed", UNPACED, out_dir)
    if not got["rps"]:
        raise StageFailed(f"the capacity run answered nothing; see {out_dir}")
    return got["rps"]


def study_stage(stage, opts: options.RunOptions, args, run_dir: Path, rows: list[dict]) -> None:
    with runner.running_stage(stage, opts) as (box, stack, users_file):
        say(f"stage {stage.key} {stage.slug}, up at {stack.url}")
        ctx = {"url": stack.url, "client": box.prefix("client"), "users": args.users,
               "duration": args.duration, "users_file": users_file,
               "app_pid": stack.procs["app"].pid,
               "access_log": stack.dir / results.app_access_log("app")}
        base = run_dir / stage.dirname
        cap = args.capacity or capacity(ctx, base / "capacity")
        say(f"  capacity {cap:.0f} req/s" + (" (given)" if args.capacity else
                                              f" ({args.users} closed users, no pause)"))

        def record(row: dict, level, repeat: int) -> None:
            rows.append({"stage": stage.key, "level": level, "repeat": repeat, **row})
            omission.write(run_dir / omission.OMISSION_CSV, omission.COLUMNS, rows)
            say(f"  {omission.level_name(level):>5} {row['model']:<6} {row['rate']:>6.0f}/s "
                f"-> {row['rps']:>6.0f}/s  p50 {omission.ms(row, 50)}  p99 {omission.ms(row, 99)}  "
                f"over 1 s {row['slow']}" + (f"  late {row['late']}" if row["late"] else "")
                + (f"\n        UNRELIABLE: {row['unreliable']}" if row["unreliable"] else ""))

        for repeat in range(1, 0 if args.stall_only else args.repeats + 1):
            for level in args.levels:
                for model in omission.MODELS:
                    rate = cap * level / 100
                    out = base / f"{level}-{model}-r{repeat}"
                    record(run_load(ctx, model, rate, out), level, repeat)
        if args.stall:
            rate = cap * min(args.levels) / 100
            for model in omission.MODELS:
                out = base / f"stall-{model}"
                record(run_load(ctx, model, rate, out, args.stall), omission.STALL, 1)


def finish(run_dir: Path) -> None:
    say("\n" + omission.write_report(run_dir))
    say(f"\n{results.rel(run_dir / omission.OMISSION_CSV)}; report.md and the plots beside it")


def check(args) -> None:
    """Every value, before anything starts."""
    if args.repeats < 1 or args.duration < 4 or args.users < 1:
        raise options.OptionsError("--repeats and --users must be at least 1, --duration at "
                                   "least 4 s (a stall needs load around it)")
    if not 0 <= args.stall <= 10 or (args.stall_only and not args.stall):
        raise options.OptionsError(f"--stall must be 0-10 s, and above 0 with --stall-only "
                                   f"(got {args.stall:g})")
    if args.capacity is not None and args.capacity <= 0:
        raise options.OptionsError(f"--capacity must be above 0 (got {args.capacity:g})")
    if args.capacity and args.capacity * max(args.levels) / 100 > options.MAX_ARRIVAL_RATE:
        raise options.OptionsError(f"--capacity x the top level is over "
                                   f"{options.MAX_ARRIVAL_RATE} req/s, more than one Locust "
                                   "process starts on time")
    for stage in args.chosen:
        if stage.gunicorn_config is None or stage.app_hosts > 1:
            raise options.OptionsError(f"stage {stage.key}: the study stalls gunicorn's "
                                       "workers on one app host; choose a gunicorn stage "
                                       "such as 1, 2, 5 or 8")


def run(args) -> int:
    args.chosen = options.select_stages(args.stages)
    check(args)
    opts = options.RunOptions(stages=tuple(args.chosen), sandbox=cli.resolve_sandbox(args.sandbox),
                              apply_host_sysctls=args.apply_host_sysctls,
                              results=Path(args.results), server_cpus=args.server_cpus,
                              client_cpus=args.client_cpus)
    runner.refuse_if_up(opts.results)
    run_dir = results.new_run(opts.results, suffix="omission")
    results.write_json(run_dir / STUDY_JSON, {
        **environment.environment(opts.stages), "parameters": {
            k: v for k, v in vars(args).items() if k != "chosen"}})
    runs = ("the stall runs only" if args.stall_only else
            f"levels {','.join(map(str, args.levels))}% of capacity, {args.repeats} repeat(s)")
    say(f"omission: stages {args.stages}, {runs}, {args.duration} s each, stall "
        f"{args.stall:g} s; results in {results.rel(run_dir)}")
    rows: list[dict] = []
    try:
        for stage in args.chosen:
            study_stage(stage, opts, args, run_dir, rows)
    finally:
        if rows:
            finish(run_dir)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.studies.omission",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--stages", default="2,5", help="gunicorn stages (default 2,5)")
    p.add_argument("--levels", type=cli.int_list(1, "load levels"), default=list(DEFAULT_LEVELS),
                   help="offered rates in %% of the capacity (default 50,80,95,110)")
    p.add_argument("--capacity", type=float, default=None,
                   help="the capacity in requests a second (default: measured per stage)")
    p.add_argument("--repeats", type=int, default=3, help="runs per level and model")
    p.add_argument("--duration", type=int, default=10, help="seconds per run (default 10)")
    p.add_argument("--users", type=int, default=50, help="the closed model's users (50)")
    p.add_argument("--stall", type=float, default=2.0,
                   help="seconds the app's workers are stopped in the stall runs (0: none)")
    p.add_argument("--stall-only", action="store_true",
                   help="only the stall runs, at the lowest level's rate (give --capacity)")
    cli.add_sandbox_options(p)
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    return cli.main("omission", run, args, leftovers=runner.leftovers)


if __name__ == "__main__":
    sys.exit(main())
