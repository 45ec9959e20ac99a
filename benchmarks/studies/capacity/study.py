"""How many chat users one box holds: connected users raised in steps until an objective breaks.

    python -m benchmarks.studies.capacity [--stages 9,9e,9t,9a] [--users 1000,2000,4000,7000,10000]
        [--room-size 10] [--send-every 60] [--seconds 30] [--objective-ms 250]
        [--repeats 1] [--load-processes 1] [--client-hosts 1] [--realtime-python ROOT]
        [--census]

For each stage (one with a Socket.IO server: stage 9 and its `realtime` twins), each
repeat: the stage up on its hosts (as `lab up`), the study's users seeded in rooms of
--room-size (`flask seed-users --rooms-of`), the server's memory read at rest; then for
each step of --users, the load processes (client.py, on the load hosts) connect users up
to the step's count, each on the websocket transport, logged in over HTTP and joined to
its room; every user sends a message every --send-every seconds (a random phase each)
for --seconds, then a grace of --grace for what is on its way. Around the traffic the
study reads each server role (servers.py: CPU, RSS and PSS, descriptors, threads, and
the server's own counts: websockets held, messages stored). A step that breaks its
objective (verdict.py) ends the stage: "holds N users; at M: what broke; limited by".

Writes results/<stamp>-capacity/: capacity.csv (a row per stage, repeat and step),
capacity.json (the rows and each stage's verdict), and per step an HdrHistogram log
(`<stage>/repeat-R/step-N.hlog`: delivery, ack and connect latencies in µs, tagged).
With --census, `<stage>/repeat-R/census/` holds the real-time server's census files
(app/watchers/gc_census.py), at rest and at each step's end, and each step's row a connected
user's objects and bytes by type (census.py).

With --realtime-python ROOT, each stage runs a second time with its real-time server from
that Python root (setup/python314-root.sh: Debian forky's python3.14), chrooted
(benchmarks/sandbox/python_root.py) and measured as the other: a row labelled with the
Python the server says it runs (`10 py3.14.8`), compared with the same stage on the
repository's venv. Every row has the server's Python and its collector's thresholds.

The load side shows it is not the limit: each load process's CPU, memory and event-loop
lag are in every row, and a step whose load was saturated says so as its limit.
Users per load process: a few thousand each (--load-processes; they go to the load hosts
in turn, --client-hosts 2 for two).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import sys
import time
from pathlib import Path

from benchmarks import latency_log, stages
from benchmarks.profile import record
from benchmarks.run import cli, limits, options, results, runner
from benchmarks.run.cli import StageFailed, say
from benchmarks.sandbox import procs, python_root
from benchmarks.studies.capacity import census, clients, fanout, plots, report, servers, verdict

CSV_NAME, JSON_NAME = "capacity.csv", "capacity.json"
DEFAULT_STAGES = "9,9e,9t,9a"
USERS_FILE = "capacity-users.json"
PREFIX = "cap"
CENSUS_DIR = "census"  # in each repeat's folder: the real-time server's census files


def seed(stack, users: int, room_size: int) -> Path:
    """The study's users in group rooms, inside the stage (as the stage's own seeding)."""
    out = stack.dir / USERS_FILE
    code = procs.run_quiet([*stack.box.prefix("app"), procs.tool("flask"), "--app", "app",
                            "seed-users", "--count", str(users), "--friends", "0",
                            "--rooms-of", str(room_size), "--prefix", PREFIX, "--out", str(out)],
                           stack.app_env(), stack.dir / "seed-capacity.log", timeout=600)
    if code != 0 or not out.exists():
        raise StageFailed(f"seeding the study's users failed (exit {code}); "
                          f"see {stack.dir / 'seed-capacity.log'}")
    return out


def traffic(args) -> dict:
    """The load processes' traffic options (client.py's)."""
    found = {"send_every": args.send_every, "seconds": args.seconds, "grace": args.grace,
             "connect_timeout": args.connect_timeout}
    return {**found, "deflate": ""} if args.deflate else found


def step_limit(args, users: int) -> float:
    """Seconds the study waits for a step's connects: generous (a slow server is a finding,
    not a hang), and bounded."""
    return 60 + users * 0.05 + args.connect_timeout


def save_histograms(path: Path, events: list[dict]) -> None:
    per_process = [{"histograms": e["histograms"], "first_ms": 0, "last_ms": 1} for e in events]
    latency_log.save(path, per_process, total=False)


def census_of(stack, out: Path, on: bool) -> dict | None:
    """The real-time server's census now (--census), else None: written in the stage's
    folder (`measured_stage`), kept in the repeat's."""
    if not on:
        return None
    return census.take(census.workers(servers.roles(stack)["realtime"]),
                       stack.dir / CENSUS_DIR, out / CENSUS_DIR)


def run_steps(stage, stack, users_file: Path, args, out: Path, server_cpus: int) -> list[dict]:
    box, rows = stack.box, []
    at_rest = census_of(stack, out, args.census)  # before the memory at rest: census.py
    rest = servers.read(stack, memory=True)
    prefixes = [box.prefix(role) for role in stage.clients_for(args.client_hosts)]
    limit = sum(step_limit(args, u) + args.seconds + args.grace + 60 for u in args.users)
    with clients.Clients(prefixes, stack.url, users_file, args.users, args.room_size,
                         args.load_processes, traffic(args), out, limit) as load:
        for n, users in enumerate(args.users, 1):
            connected = load.events("connected", step_limit(args, users))
            before, t0 = servers.read(stack), time.monotonic()
            profiled = out / f"step-{n}"
            profiled.mkdir()
            with record.recording(servers.roles(stack)["realtime"], box.prefix("client"),
                                  profiled, args.seconds, on=args.profile):
                load.go()
                held = load.events("held", args.seconds + args.grace + 60)
            wall = time.monotonic() - t0
            after = servers.read(stack, memory=True)
            save_histograms(out / f"step-{n}.hlog", [
                {"histograms": {**c["histograms"], **h["histograms"]}}
                for c, h in zip(connected, held, strict=True)])
            row = verdict.step_row(n, users, connected, held, rest, before, after, wall,
                                   args.objective_ms, server_cpus, servers.log_signs(stack))
            row["listener_share"] = fanout.listener_share(profiled / results.PROFILE_STACKS)
            if at_rest:  # once the step's figures are read: a census pauses the server
                row.update(census.per_user(at_rest, census_of(stack, out, True),
                                           row["connected"]))
            rows.append(row)
            say(f"  {line(row)}")
            if row["broke"]:
                break
            load.go()
    if rows:
        rows[-1].update(after_leaving(stack, rest))
    return rows


def after_leaving(stack, rest) -> dict:
    """What the real-time server keeps once every user has left (the load processes
    closed their websockets): its PSS above its rest (app/gc_policy.py's price: the
    cycles among frozen objects stay)."""
    deadline = time.monotonic() + LEAVE_WAIT
    while servers.read(stack).held and time.monotonic() < deadline:
        time.sleep(1)
    time.sleep(LEAVE_SETTLE)  # what the server does as its sessions close
    left = servers.read(stack, memory=True)
    return {"left_held": left.held, "left_pss_mib": round(
        (left.roles["realtime"].pss_kib - rest.roles["realtime"].pss_kib) / 1024, 1)}


def line(row: dict) -> str:
    verdict_words = "held" if not row["broke"] else "BROKE: " + "; ".join(row["broke"])
    return (f"{row['users']:>6} users: {row['connected']} connected, "
            f"{row['received']}/{row['expected']} delivered, p99 {row['delivery_p99_ms']} ms; "
            f"{row['pss_kib_per_user']} KiB PSS/user, realtime "
            f"{row['realtime_cpu_percent']}% ({row['realtime_us_per_delivery']} µs/delivery); "
            f"load {row['load_cpu_percent_max']}% -> {verdict_words}")


LEAVE_WAIT, LEAVE_SETTLE = 60, 5  # seconds: for the websockets to close, then to settle
NOFILE_OWN = 1024  # a server's descriptors beside its websockets: logs, Redis, listeners
NARROW = "narrow-ports"
GC_LOG_MS = "20"  # the real-time server logs each collection this long (app/watchers/gc_log.py)


def measured_stage(stage, processes: int, census_dir: Path | None = None):
    """The stage as the study runs it: its real-time server on `processes` processes;
    without the narrowed port range (lab 06's 1,000 ports, there to show TIME_WAIT):
    Nginx takes a local port for each websocket it opens to the real-time server, so
    that range would cap the users at 1,000 whatever the server; its collections of
    20 ms or more logged (app/watchers/gc_log.py), which the study reads; with `census_dir`
    (--census), its census written there on demand (census.py)."""
    env = {**stage.env, "FLASK_GC_LOG_MS": GC_LOG_MS,
           **(census.census_env(census_dir) if census_dir else {})}
    wide = dataclasses.replace(stage, sysctl=tuple(p for p in stage.sysctl if p != NARROW),
                               env=env)
    return fanout.with_processes(wide, processes)


def run_stage(base, processes: int, root: Path | None, opts, args, run_dir: Path,
              repeat: int) -> list[dict]:
    """One repeat of `base` on `processes` processes, from the Python root `root` (None:
    the repository's venv); its rows, labelled with the Python its server said it runs
    where it ran from a root."""
    # a census is written in the stage's folder (Stack.dir), which a rooted server can write
    inbox = results.up_dir(opts.results, base) / CENSUS_DIR if args.census else None
    stage = measured_stage(base, processes, inbox)
    rooted = dataclasses.replace(opts, python_root=root)
    with runner.running_stage(stage, rooted) as (box, stack, _users):
        python = servers.python(stack)
        version = python["python"].split()[-1] if root and python["python"] else None
        if root and not version:
            raise StageFailed(f"the real-time server from {root} did not say its Python "
                              f"(app/watchers/gc_log.py's first line); see {stack.dir}")
        name = fanout.label(base, processes, version)
        out = run_dir / (base.dirname + (f"-py{version}" if version else "")
                         + ("" if processes == 1 else f"-x{processes}")) / f"repeat-{repeat}"
        out.mkdir(parents=True)
        say(f"stage {name} {stage.slug}, repeat {repeat}: up ({box.describe()}; "
            f"{python['python']}); seeding {args.users[-1]} users in rooms of {args.room_size}")
        users_file = seed(stack, args.users[-1], args.room_size)
        cpus = len(box.placement.cpus(["redis"])["redis"])  # the server roles' CPU set
        rows = run_steps(stage, stack, users_file, args, out, cpus)
    for row in rows:
        row.update({"stage": name, "processes": processes, "repeat": repeat, **python})
    say(verdict.summary(name, rows))
    return rows


def write(run_dir: Path, rows: list[dict], verdicts: dict, objective_ms: float) -> None:
    columns = list(dict.fromkeys(k for r in rows for k in r))
    with open(run_dir / CSV_NAME, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows({k: json.dumps(v) if isinstance(v, (dict, list)) else v
                          for k, v in r.items()} for r in rows)
    (run_dir / JSON_NAME).write_text(json.dumps({"rows": rows, "verdicts": verdicts},
                                                indent=1) + "\n")
    report.write(run_dir, rows, " ".join(["python -m benchmarks.studies.capacity",
                                          *sys.argv[1:]]))
    plots.draw(run_dir, rows, objective_ms)


def chosen_stages(spec: str) -> list:
    chosen = [stages.get(k.strip()) for k in spec.split(",") if k.strip()]  # KeyError: said
    plain = [s.key for s in chosen if not s.front]
    if not chosen or plain:
        raise options.OptionsError(f"--stages {spec!r}: the study needs stages with Nginx in "
                                   f"front and the websocket transport (9, 9e, 9t, 9a); "
                                   f"not {', '.join(plain) or 'none'}")
    return chosen


def check_args(args) -> None:
    if not args.users or any(b <= a for a, b in zip(args.users, args.users[1:], strict=False)):
        raise options.OptionsError("--users: rising counts, comma-separated (1000,2000,4000)")
    if args.users[0] < args.room_size or args.room_size < 2:
        raise options.OptionsError("--room-size: at least 2, and at most the first step's users")
    for name in ("send_every", "seconds", "objective_ms", "connect_timeout"):
        if getattr(args, name) <= 0:
            raise options.OptionsError(f"--{name.replace('_', '-')} must be above 0")
    if args.grace < 0 or args.repeats < 1 or args.load_processes < 1:
        raise options.OptionsError("--grace >= 0, --repeats and --load-processes >= 1")
    if not args.processes or min(args.processes) < 1 or max(args.processes) > 8:
        raise options.OptionsError("--processes: counts from 1 to 8, comma-separated (1,2,3)")
    if args.realtime_python and (said := python_root.problem(args.realtime_python)):
        raise options.OptionsError(f"--realtime-python: {said}")
    # a descriptor a websocket in the real-time server (all of them on one process) and
    # in the load process that holds it; NOFILE_OWN for each one's own files
    short = limits.check_nofile(args.users[-1] + NOFILE_OWN,
                                f"--users {args.users[-1]:,} (a descriptor a websocket)")
    if short:
        raise options.OptionsError(short)


def run(args) -> int:
    check_args(args)
    chosen = chosen_stages(args.stages)
    for stage in chosen:
        if args.census and census.refused(stage):
            raise options.OptionsError(f"--census: {census.refused(stage)}")
        try:
            [fanout.with_processes(stage, n) for n in args.processes]
        except ValueError as e:
            raise options.OptionsError(f"--processes: {e}") from None
    opts = options.RunOptions(stages=tuple(chosen), sandbox=cli.resolve_sandbox(args.sandbox),
                              apply_host_sysctls=args.apply_host_sysctls,
                              results=Path(args.results), server_cpus=args.server_cpus,
                              client_cpus=args.client_cpus, client_hosts=args.client_hosts)
    runner.refuse_if_up(opts.results)
    run_dir = results.new_run(opts.results, suffix="capacity")
    rows, verdicts = [], {}
    roots = [None, args.realtime_python] if args.realtime_python else [None]
    for repeat in range(1, args.repeats + 1):
        for stage in chosen:  # interleaved, as the lab's repeats are
            for n in args.processes:
                for root in roots:
                    found = run_stage(stage, n, root, opts, args, run_dir, repeat)
                    rows += found
                    name = found[0]["stage"] if found else fanout.label(stage, n)
                    verdicts.setdefault(name, []).append(verdict.summary(name, found))
                    write(run_dir, rows, verdicts, args.objective_ms)
    say("")
    for said in verdicts.values():
        for n, words in enumerate(said, 1):
            say(f"repeat {n}: {words}")
    say(f"\n{results.rel(run_dir / CSV_NAME)}, {JSON_NAME} beside it")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.studies.capacity",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--stages", default=DEFAULT_STAGES,
                   help=f"stage keys, comma-separated (default {DEFAULT_STAGES})")
    p.add_argument("--users", type=cli.int_list(2, "--users"),
                   default=[1000, 2000, 4000, 7000, 10000],
                   help="connected users at each step, rising (default 1000,2000,4000,7000,"
                        "10000)")
    p.add_argument("--room-size", type=int, default=10, help="members a room (default 10)")
    p.add_argument("--send-every", type=float, default=60.0,
                   help="seconds between a user's messages (default 60)")
    p.add_argument("--seconds", type=float, default=30.0, help="each step's traffic (30)")
    p.add_argument("--grace", type=float, default=5.0,
                   help="seconds after the traffic for deliveries on their way (5)")
    p.add_argument("--objective-ms", type=float, default=250.0,
                   help="delivery p99 a step must keep (default 250)")
    p.add_argument("--connect-timeout", type=float, default=15.0,
                   help="seconds a connect may take before it counts as failed (15)")
    p.add_argument("--repeats", type=int, default=1, help="runs of each stage, interleaved")
    p.add_argument("--load-processes", type=int, default=1,
                   help="load processes (client.py), spread over the load hosts")
    p.add_argument("--client-hosts", type=int, default=1, choices=(1, 2),
                   help="load hosts (default 1)")
    p.add_argument("--processes", type=cli.int_list(1, "--processes"), default=[1],
                   help="the fan-out: each stage with its real-time server on each of these "
                        "process counts (1,2,3); default 1")
    p.add_argument("--realtime-python", type=Path, metavar="ROOT",
                   help="each stage a second time, its real-time server run from this Python "
                        "root (chrooted; `sh setup/python314-root.sh` makes Debian forky's "
                        "python3.14 one and prints its folder): a row labelled with the "
                        "Python the server says it runs (`10 py3.14.8`) beside the venv's")
    p.add_argument("--deflate", action="store_true",
                   help="the load offers permessage-deflate, as browsers do: whether the "
                        "server accepts it, and what a compression context costs a user")
    p.add_argument("--profile", action="store_true",
                   help="py-spy on the real-time server during each step's traffic: its "
                        "flame graph, and the message queue listener's share of its samples")
    p.add_argument("--census", action="store_true",
                   help="the real-time server counts its objects by type at rest and at the "
                        "end of each step (app/watchers/gc_census.py): a connected user's objects "
                        "and bytes in the report; each census pauses the server, so off by "
                        "default")
    cli.add_sandbox_options(p)
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    return cli.main("capacity", run, args, leftovers=runner.leftovers)
