"""The lab's command line.

    python -m benchmarks.lab run [--stages main] [--duration 30] [--users 50]
    python -m benchmarks.lab book              # the book's benchmark, beside its figures
    python -m benchmarks.lab up STAGE          # one stage, until Ctrl-C, with Locust's web
                                               # UI at http://127.0.0.1:8089 (--ui-port);
                                               # a server that exits ends it (exit 1)
    python -m benchmarks.lab exec -- CMD ...   # a command inside the running stage
    python -m benchmarks.lab worker --master-host HOST   # a Locust worker for a master
                                               # on another machine (`run`, `up`)
    python -m benchmarks.lab list              # the stages (benchmarks/stages.py)
    python -m benchmarks.lab clean             # what a killed lab left behind

`run` takes each stage of benchmarks/stages.py through benchmarks/run/runner.py:
sandbox up, Redis, app server and Nginx up, seed users, verify the endpoints,
warm up, measure with Locust while the sampler records sockets and CPU,
snapshot `ss`/`netstat`, evaluate the stage's checks, tear down. Results go to
results/<timestamp>/ (results/latest points at the newest run; the layout is
benchmarks/run/results.py's).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlparse

from benchmarks import checks, lab_range, stages
from benchmarks.analysis import metrics, report
from benchmarks.run import (
    cli,
    environment,
    locust_cli,
    options,
    prometheus,
    results,
    runner,
    slo,
)
from benchmarks.run.cli import say
from benchmarks.sandbox import hosts, procs, sandbox, unreachable
from benchmarks.sockets_tab import stage_shot, web_ui
from benchmarks.stages import ROOT
from benchmarks.studies import book


def cmd_run(args) -> int:
    opts = options.from_args(args)
    if args.target:
        if opts.metrics:
            raise options.OptionsError("--metrics watches the lab's own stage (its app's "
                                       "/metrics, Nginx, Redis); a --target run has none: "
                                       "leave --metrics out")
        if opts.floor_seconds is not None:
            raise options.OptionsError("--floor measures stage 8's app on this machine "
                                       "beside the lab's own stages; a --target run has "
                                       "none: leave --floor out")
        return cmd_run_target(args, opts)
    opts, note = options.on_sandbox(opts, cli.resolve_sandbox(opts.sandbox), args.stages)
    if note:
        say(f"note: {note}")
    locust_cli.check_locust_args(opts)
    run_dir = results.new_run(opts.results)
    done, failed = run_and_report(opts, run_dir)
    missed = [f"{r['stage'].key} ({', '.join(slo.missed(r['slo']))})" for r in done
              if slo.missed(r.get("slo", []))]
    if missed:
        say(f"lab: objectives missed: stage {'; stage '.join(missed)}")
    say(checks.verdict_line(done, strict=opts.strict and not (failed or missed)))
    if failed or missed:
        return 1
    return 3 if opts.strict and checks.failures(done) else 0


def run_and_report(opts: options.RunOptions, run_dir: Path) -> tuple[list[dict], list[str]]:
    """Every stage of `opts` into run_dir, then the report; (what ran, keys that failed)."""
    cpus = opts.placement.as_dict()
    apps = f", app hosts' CPUs {cpus['app_cpus']}" if "app_cpus" in cpus else ""
    say(f"lab: {len(opts.stages)} stage(s), {opts.duration:g} s each, {opts.users} users, "
        f"sandbox {opts.sandbox}, server CPUs {cpus['server_cpus']}{apps}, "
        f"client CPUs {cpus['client_cpus']}; results in {results.rel(run_dir)}")
    if opts.placement.overlap:
        say(f"note: the server and the client share CPU {opts.placement.as_dict()['overlap']}: "
            "the numbers then depend on how much CPU Locust takes")
    try:
        done, failed = runner.run_stages(opts, run_dir, screenshot=stage_shot.screenshot)
    except KeyboardInterrupt:
        if opts.repeats > 1:  # what the finished repeats measured stays, said once
            finished = results.run_info(run_dir).get("repeats_done", 0)
            say(f"lab: interrupted during repeat {finished + 1} of {opts.repeats}; the "
                f"{finished} finished repeat(s) stay in {results.rel(run_dir)} (their "
                f"report: python -m benchmarks.analysis.report {results.rel(run_dir)})")
        raise
    if done:
        report.write(run_dir, plots=opts.plots)
        say("")
        say(report.summary_table(run_dir))
        say(report.sources_line(run_dir))
        over_repeats = report.repeats_section(run_dir)
        if over_repeats:
            say("")
            say(over_repeats.rstrip())
        say(f"\nreport: {results.rel(run_dir / results.REPORT_MD)}")
    if failed:
        say(f"lab: stage(s) {', '.join(failed)} failed to run")
    return done, failed


def cmd_book(args) -> int:
    """The book's benchmark: /kv, 100 clients, no think time, the server on one core."""
    opts = book.run_options(args.stages, duration=args.duration, warmup=args.warmup,
                            sandbox=cli.resolve_sandbox(args.sandbox),
                        apply_host_sysctls=args.apply_host_sysctls,
                        results=Path(args.results), server_cpus=args.server_cpus,
                        client_cpus=args.client_cpus)
    run_dir = results.new_run(opts.results, suffix="book")
    done, failed = run_and_report(opts, run_dir)
    rows = book.write_csv(run_dir)
    say("")
    say(book.table(rows))
    say(f"\n{results.rel(run_dir / book.BOOK_CSV)}")
    return 1 if failed else 0


def cmd_run_target(args, opts: options.RunOptions) -> int:
    """Load and client-side capture only, against a stack that runs elsewhere."""
    url = args.target.rstrip("/")
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise options.OptionsError(f"--target needs a URL like http://host:8080, not {url!r}")
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    refusal = hosts.outside_refusal(url, f"python -m benchmarks.lab run --target {url}")
    if refusal:
        raise options.OptionsError(f"--target {refusal}")
    locust_cli.check_locust_args(opts)
    # its own folder name, and `results/latest` stays on the newest full run: a target
    # run has no servers to report on, so it writes no report.md or summary.csv
    run_dir = results.new_run(opts.results, suffix="target")
    stage_dir = run_dir / "target"
    stage_dir.mkdir()
    results.write_json(run_dir / results.RUN_JSON, {
        **environment.environment(), "target": url,
        "parameters": {k: v for k, v in opts.parameters().items()
                       if k in ("duration_s", "users", "locust_args")}})
    say(f"lab: load against {url} for {opts.duration:g} s; results in {results.rel(stage_dir)}")
    runner.check_endpoints([], url, stage_dir, None)
    load = runner.Load(client=[], url=url, warmup_url=url, sampler={"classes": {"front": port}},
                       server_pids={}, snapshots={".": []})
    runner.measure(load, stage_dir, None, opts,
                   locust_cli.load_classes(args.user_classes.split(","), opts))
    totals = metrics.locust_totals(stage_dir)
    say(json.dumps(totals))
    return 1 if slo.missed(runner.judge_objectives(stage_dir, totals, opts)) else 0


def cmd_up(args) -> int:
    stage, = options.with_app_hosts((stages.get(args.stage),), args.app_hosts)
    opts = options.RunOptions(stages=(stage,), sandbox=cli.resolve_sandbox(args.sandbox),
                              apply_host_sysctls=args.apply_host_sysctls,
                              results=Path(args.results), server_cpus=args.server_cpus,
                              client_cpus=args.client_cpus, app_cpus=args.app_cpus,
                              client_hosts=args.client_hosts, metrics=args.metrics)
    state = results.up_state(opts.results)
    runner.refuse_if_up(opts.results)
    listener = web_ui.claim_port(args.ui_port, args.ui_address)  # before anything starts
    ui_address, ui_port = listener.getsockname()[:2]   # (host mode hands it to Locust)
    # --metrics: Prometheus's UI on the machine, at the same address as Locust's
    watching = web_ui.claim_port(args.metrics_port, args.ui_address) if args.metrics else None
    with runner.running_stage(stage, opts) as (box, stack, users_file), \
            web_ui.stage_ui(stage, box, stack, users_file, listener) as ui_url, \
            web_ui.prometheus_ui(box, watching) as metrics_url:
        results.write_json(state, {
            "stage": stage.key, "pid": os.getpid(), "mode": box.mode, "url": stack.url,
            "ui_url": ui_url, "metrics_url": metrics_url,
            "sockets_csv": str(stack.dir / results.SAMPLER_CSV),
            "users_file": str(users_file), "user_classes": list(stage.users),
            "chat_settings": stage.chat_settings,
            "hosts": {role: {"prefix": box.prefix(role), "address": box.address(role),
                             "port": box.port(role) if role not in box.clients else None}
                      for role in box.roles}})
        try:
            say_up(stage, box, stack, ui_url, ui_port, ui_address)
            if metrics_url:
                say(metrics_line(metrics_url, watching.getsockname()[1], ui_address))
            say("  Ctrl-C stops it")
            # a stage whose server died is not served on: say which, and stop
            while (down := stack.down()) is None:
                time.sleep(1)
            say(f"lab: {down}")
            return 1
        finally:
            state.unlink(missing_ok=True)
    return 0


def say_up(stage: stages.Stage, box: sandbox.Sandbox, stack: runner.Stack, ui_url: str,
           ui_port: int, ui_address: str) -> None:
    """`lab up`'s banner, said."""
    for line in up_banner(stage, box, stack.url, stack.dir / results.SAMPLER_CSV, ui_url,
                          ui_port, ui_address):
        say(line)


def up_banner(stage: stages.Stage, box: sandbox.Sandbox, url: str, sampler: Path,
              ui_url: str, ui_port: int, ui_address: str = "127.0.0.1") -> list[str]:
    """`lab up`'s banner: the hosts, where the UI is, what to type next (the labs quote
    it; tests/lab/test_doc_outputs.py renders it for each)."""
    lines = [f"note: {note}" for note in box.notes]
    lines.append(f"stage {stage.key} {stage.slug} is up: {url}")
    width = max(len(role) for role in box.roles)
    for role in box.roles:
        where = box.address(role) + (f":{box.port(role)}" if role not in box.clients else "")
        cpus = " ".join(box.prefix(role)[-1:]) if "taskset" in box.prefix(role) else "-"
        lines.append(f"  host {role:<{width}} {where:<18} "
                     f"{box.namespace(role) or 'the machine'}, CPUs {cpus}")
        if stage.socketio_server and role in stage.app_roles:
            lines.append(f"  {'':<{width + 5}} {box.socketio_url(role).split('//')[1]:<18} "
                         "its Socket.IO server (/socket.io/)")
    # the port is the one chosen, with --ui-port 0
    if ui_address == "127.0.0.1":
        lines.append(f"  Locust's web UI (Sockets tab): {ui_url}  (from a laptop: "
                     f"ssh -L {ui_port}:127.0.0.1:{ui_port} user@this-machine)")
    else:  # a container's port mapping or a VM's own address reaches it
        lines.append(f"  Locust's web UI (Sockets tab): {ui_url}, listening on "
                     f"{ui_address}:{ui_port}  (from the laptop that runs this container "
                     f"or VM: http://localhost:{ui_port} through a port mapping, or "
                     f"http://VM_ADDRESS:{ui_port})")
    if len(box.clients) > 1:
        lines.append(f"  Locust's master on client, a worker on {' and '.join(box.clients)}; "
                     f"one more by hand, as on another machine: python -m benchmarks.lab exec "
                     f"--host {box.clients[-1]} -- python -m benchmarks.lab worker "
                     f"--master-host {box.address('client')}")
    lines.append(f"  sampler: {results.rel(sampler)}")
    others = [r for r in box.roles if r != "client"]
    lines.append(f"  in another terminal: python -m benchmarks.lab exec -- ss -s "
                 f"(--host {', '.join(others[:-1])} or {others[-1]} for the others)")
    return lines


def metrics_line(url: str, port: int, address: str) -> str:
    """`lab up --metrics`'s line: where Prometheus's UI is, reached as Locust's is."""
    if address == "127.0.0.1":
        return (f"  Prometheus (--metrics): {url}/classic/graph  (from a laptop: ssh -L "
                f"{port}:127.0.0.1:{port} user@this-machine)")
    return f"  Prometheus (--metrics): {url}/classic/graph, listening on {address}:{port}"


def cmd_exec(args) -> int:
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        raise options.OptionsError("exec needs a command: python -m benchmarks.lab exec -- ss -s")
    state_file = results.up_state(Path(args.results))
    if not state_file.exists():
        raise SystemExit("lab: no stage is up. Start one first: python -m benchmarks.lab up 0")
    state = results.read_json(state_file)
    if not hosts.pid_alive(state["pid"]):
        state_file.unlink(missing_ok=True)
        raise SystemExit("lab: the stage that was up has stopped. Start one: "
                         "python -m benchmarks.lab up 0")
    if args.host not in state["hosts"]:
        raise options.OptionsError(f"stage {state['stage']} has no host {args.host!r}; "
                                   f"its hosts: {', '.join(state['hosts'])}")
    prefix = state["hosts"][args.host]["prefix"]
    # a bare `locust` (pyproject.toml names benchmarks/chat.py) runs the stage's users,
    # logged in as its seeded accounts
    env = procs.child_env(LOCUST_HOST=state["url"], LOCUST_CHAT_USERS_FILE=state["users_file"],
                          LOCUST_USER_CLASSES=" ".join(state["user_classes"]),
                          **locust_cli.chat_env(state.get("chat_settings", {})))
    if state.get("sockets_csv"):  # and a headless run prints the Sockets tab's numbers
        files = locust_cli.locustfiles(state["user_classes"], sockets_tab=True)
        env.update(LOCUST_LOCUSTFILE=files, LOCUST_SOCKETS_CSV=state["sockets_csv"])
    try:
        return subprocess.run([*prefix, *command], env=env, cwd=ROOT).returncode
    except FileNotFoundError as e:
        raise SystemExit(f"lab: {e}") from e


WORKER_FILES = "benchmarks/chat.py,benchmarks/arrivals.py"  # every user class a master runs


def cmd_worker(args) -> int:
    """A Locust worker for the master at --master-host, once it answers; its Locust and
    locustfiles must be the master's (benchmarks/worker_messages.py checks as it joins)."""
    address = lab_range.lab_address_from_outside(args.master_host)
    if address:
        raise options.OptionsError(
            f"--master-host {args.master_host}: {address} is a lab address, only on the lab's "
            "hosts: python -m benchmarks.lab exec --host client2 -- python -m benchmarks.lab "
            f"worker --master-host {args.master_host}")
    reach_master(args.master_host, args.master_port, args.connect_timeout)
    cmd = [procs.tool("locust"), "-f", WORKER_FILES, "--worker", "--master-host",
           args.master_host, "--master-port", str(args.master_port)]
    say(f"lab worker: {' '.join(cmd[1:])}")
    # in the foreground: a Ctrl-C reaches it too, and subprocess.run stops it if it lingers
    return subprocess.run(cmd, cwd=ROOT, env=procs.child_env()).returncode


def reach_master(host: str, port: int, seconds: float) -> None:
    """Return once a TCP connection to the master's port opens; give up after `seconds`
    (Locust's own worker would retry for five minutes, saying nothing)."""
    deadline, why = time.monotonic() + seconds, ""
    while time.monotonic() < deadline:
        try:
            socket.create_connection((host, port), timeout=2).close()
            return
        except OSError as e:
            why = e.strerror or str(e)
            time.sleep(1)
    raise cli.StageFailed(f"cannot reach the master at {host}:{port} in {seconds:g} s "
                          f"({why}): is its Locust running (lab up, or lab run with --locust-args "
                          f"'--master ...'), and port {port} open between the machines?")


def cmd_list(args) -> int:
    say("sets, for make lab STAGES=NAME (a set of twins runs with the base stages they are "
        "measured against):")
    keys = {name: ",".join(s.key for s in stages.select(name)) for name in stages.SETS}
    width = max(len(k) for k in keys.values())
    for named in stages.SETS.values():
        say(f"  {named.name:<10} {keys[named.name]:<{width}} {named.about} ({named.lab})")
    say(f"  {stages.EVERYTHING:<10} {'every stage':<{width}} all of the above")
    for named in stages.SETS.values():
        say(f"{named.name}: make lab STAGES={named.name} ({named.lab})")
        for s in (s for s in stages.STAGES if s.set_name == named.name):
            say_stage(s)
    return 0


def say_stage(s: stages.Stage) -> None:
    """A stage as `lab list` shows it: its server commands, environment and settings."""
    front = f"nginx/{s.front}" if s.front else "no proxy"
    say(f"{s.key:>2}  {s.slug}: {s.title}")
    for role in s.app_roles:
        for server, command in s.commands(stages.ADDRESS[role]).items():
            say(f"    {' '.join(command)}" + ("  (/socket.io/)" if server == "socketio" else ""))
    env = stages.ENVIRONMENTS[s.environment]
    say(f"    from {env.venv}: {env.holds}")
    if s.socketio_server and s.server_environment("socketio") != s.environment:  # 9e
        env = stages.ENVIRONMENTS[s.server_environment("socketio")]
        say(f"    /socket.io/ from {env.venv}: {env.holds}")
    say(f"    Redis {s.redis_mode}, {front}, sysctl {' + '.join(s.sysctl)}, "
        f"users {' '.join(s.users)}")
    if s.balance or s.socketio_transport != "websocket":
        say(f"    Nginx upstream {s.balance or 'round robin'}, Socket.IO users on "
            f"{s.socketio_transport}")
    if s.burst_every:
        say(f"    chat users in bursts every {s.burst_every:g} s (--chat-burst-every)")
    if s.env:  # the app's settings other than its defaults (app/settings.py)
        say(f"    app {' '.join(f'{name}={value}' for name, value in s.env.items())}")
    say(f"    see: {s.see}")


def cmd_clean(args) -> int:
    """What labs that were killed left: their namespaces (and what runs in them), their
    processes, and host sysctls a host-mode run had changed. Never a running lab's."""
    cleaned = False
    # a dead lab's servers outlive it (each in a session of its own), in its namespaces
    for ns in hosts.clean(kill_orphans=True):
        say(f"deleted namespace {ns} (its lab, pid {hosts.owner_pid(ns)}, is gone)")
        cleaned = True
    for line in runner.orphans():
        say(f"stopped process {line} (its lab is gone)")
        cleaned = True
    if unreachable.remove_if_unused():
        say(f"deleted the route that made {hosts.BENCHMARK_NET} unreachable from this "
            "machine's network (no lab runs here any more)")
        cleaned = True
    for folder in prometheus.remove_stale():
        say(f"deleted {folder} (--metrics' database; its lab is gone)")
        cleaned = True
    for setting in sandbox.restore_stale_host_sysctls():
        say(f"restored host sysctl {setting}")
        cleaned = True
    if not cleaned:
        say("nothing to clean")
    return 0


def add_run_arguments(run: argparse.ArgumentParser, defaults: options.RunOptions) -> None:
    """`lab run`'s options (options.from_args reads them)."""
    run.add_argument("--stages", default="main",
                     help=f"sets ({', '.join(stages.SETS)}, {stages.EVERYTHING}; `lab list` "
                          "shows them) or keys/slugs: 0,1,2 or 3g")
    run.add_argument("--duration", type=float, default=defaults.duration,
                     help="seconds measured per stage (a stage in bursts, 5k: five "
                          "bursts at least)")
    run.add_argument("--users", type=int, default=defaults.users, help="Locust users")
    run.add_argument("--repeats", type=int, default=defaults.repeats,
                     help="run every stage this many times, interleaved (0,1,2,0,1,2...), "
                          "for a mean and a 95%% interval per stage (default 1)")
    run.add_argument("--spawn-rate", type=float, default=defaults.spawn_rate,
                     help="users started per second")
    run.add_argument("--warmup", type=float, default=defaults.warmup,
                     help="seconds of load before measuring")
    run.add_argument("--wait-max", type=float, default=defaults.wait_max,
                     help="most seconds a Locust user waits between tasks (CHAT_WAIT_MAX)")
    run.add_argument("--socketio-users", type=int, default=defaults.socketio_users,
                     help="Socket.IO users beside the HTTP users, in the stages that have "
                          "them (3 and up), reported apart")
    run.add_argument("--locust-args", default="",
                     help="more Locust options, e.g. '--processes 2'")
    run.add_argument("--target", help="load only this URL (a stack that runs elsewhere)")
    run.add_argument("--user-classes", default="ChatUser",
                     help="with --target: Locust user classes, comma separated")
    add_host_counts(run, defaults)
    run.add_argument("--strict", action="store_true",
                     help="exit 3 when a check fails (the last line names it)")
    run.add_argument("--leave-out-checks", default="", metavar="NAME[,NAME]",
                     help="checks not counted, by name (`tw_front_per_request`): under "
                          "emulation, where checks that depend on speed cannot hold; still "
                          "measured, and said as left out")
    run.add_argument("--arrival-rate", type=float, default=None, metavar="R",
                     help="an open-model load instead of the HTTP users: R requests started "
                          "a second on a schedule that does not wait for answers, each timed "
                          "from its intended start (benchmarks/arrivals.py)")
    run.add_argument("--slo", default="", metavar="OBJECTIVES",
                     help="objectives every stage (or the --target) must meet, else exit 1: "
                          + slo.GRAMMAR.replace("%", "%%"))
    run.add_argument("--floor", action="store_true",
                     help="after each repeat's stages, the floor study (stage 8's app "
                          "in-process, benchmarks/studies/floor.py) into that repeat's "
                          "folder: each stage's multiple of the floor is then paired, per "
                          "repeat, with its interval and p")
    run.add_argument("--floor-seconds", type=float, default=None, metavar="S",
                     help="with --floor: seconds per request type (default 2; 6 types)")
    run.add_argument("--no-screenshots", dest="screenshots", action="store_false",
                     help="skip each stage's picture of the Sockets tab (sockets-tab.png, "
                          "a few seconds of headless Chromium after the stage)")
    run.add_argument("--no-plots", dest="plots", action="store_false",
                     help="a report without its plots (plots/*.png: matplotlib, several "
                          "seconds of CPU); python -m benchmarks.analysis.report RUN_DIR "
                          "draws them later")
    add_metrics(run)
    run.add_argument("--no-profile", dest="profile", action="store_false",
                     help="skip py-spy on the app server while measured (profile.svg and "
                          "profile.folded, and the CPU shares by bucket in the metrics)")


def add_metrics(parser: argparse.ArgumentParser, ui: bool = False) -> None:
    """--metrics, for `run` and `up`; with `ui` (`up`), --metrics-port."""
    parser.add_argument("--metrics", action="store_true",
                        help="Prometheus on a host of its own (`metrics`), scraping the app's "
                             "/metrics and exporters beside Nginx and Redis every second; "
                             "`run` keeps each stage's answers and a graph in its "
                             "prometheus/ folder (Debian's prometheus, "
                             "prometheus-nginx-exporter, prometheus-redis-exporter)")
    if ui:
        parser.add_argument("--metrics-port", type=int, default=web_ui.PROMETHEUS_UI_PORT,
                            help="with --metrics: the machine's port for Prometheus's UI "
                                 f"(default {web_ui.PROMETHEUS_UI_PORT}), at --ui-address")


def add_host_counts(parser: argparse.ArgumentParser, defaults: options.RunOptions) -> None:
    """--client-hosts and --app-hosts, for `run` and `up`."""
    parser.add_argument("--client-hosts", type=int, default=defaults.client_hosts,
                        help="load hosts: with 2, Locust's master on `client` and a worker on "
                             "`client` and `client2` (Locust's own distributed mode)")
    parser.add_argument("--app-hosts", type=int, default=None,
                        help="app hosts behind Nginx, in stages that have it (default: the "
                             "stage's own, 2 in stage 6 and its twins)")
    parser.add_argument("--app-cpus", metavar="CPUS/CPUS",
                        help="a CPU set per app host, app's then app2's: 2-3/4-5 (default: "
                             "the server roles' set, shared); for scaling on a bigger box")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.lab", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    # the options' defaults, read off a stage that needs no second environment (making
    # RunOptions checks the stages' environments: `lab list` must work without them)
    defaults = options.RunOptions(stages=(stages.STAGES[0],))

    run = sub.add_parser("run", help="run stages and write a results folder")
    add_run_arguments(run, defaults)
    cli.add_sandbox_options(run)
    run.set_defaults(func=cmd_run)

    bk = sub.add_parser("book", help="the book's benchmark: stages 0, 1, 2, 3, 5 on /kv, "
                                     "100 clients, the server on one core")
    bk.add_argument("--duration", type=float, default=defaults.duration,
                    help="seconds measured per stage")
    bk.add_argument("--warmup", type=float, default=defaults.warmup,
                    help="seconds of load before measuring")
    bk.add_argument("--stages", default=",".join(book.STAGE_KEYS),
                    help="some of the book's stages, e.g. 0,2 (default: all five)")
    cli.add_sandbox_options(bk)
    bk.set_defaults(func=cmd_book)

    up = sub.add_parser("up", help="start one stage and keep it up until Ctrl-C "
                                   "(or until one of its servers exits)")
    up.add_argument("stage", help="key or slug, e.g. 0 or builtin")
    up.add_argument("--ui-port", type=int, default=web_ui.UI_PORT,
                    help="the machine's port for Locust's web UI (default 8089)")
    up.add_argument("--ui-address", default=web_ui.default_ui_address(),
                    help="where the web UI listens: 127.0.0.1, this machine only (the "
                         "default), or 0.0.0.0, every interface, for a container's port "
                         f"mapping or a VM's forwarded port (the image's default, from "
                         f"${web_ui.UI_ADDRESS_ENV}; a VM's, from {web_ui.BOX_CONF})")
    add_metrics(up, ui=True)
    add_host_counts(up, defaults)
    cli.add_sandbox_options(up)
    up.set_defaults(func=cmd_up)

    ex = sub.add_parser("exec", help="run a command inside the stage that is up")
    ex.add_argument("--results", default=str(results.RESULTS),
                    help="results folder of the `lab up` to reach")
    ex.add_argument("--host", default="client", choices=[h.role for h in stages.HOSTS],
                    help="the host to run it on (default: client, where Locust runs)")
    ex.add_argument("command", nargs=argparse.REMAINDER)
    ex.set_defaults(func=cmd_exec)

    wk = sub.add_parser("worker", help="a Locust worker for a master on another machine")
    wk.add_argument("--master-host", required=True, help="the master's machine")
    wk.add_argument("--master-port", type=int, default=5557, help="its Locust port (5557)")
    wk.add_argument("--connect-timeout", type=float, default=30.0,
                    help="seconds to wait for the master to answer (default 30)")
    wk.set_defaults(func=cmd_worker)

    sub.add_parser("list", help="list the stages").set_defaults(func=cmd_list)
    sub.add_parser("clean", help="remove what a killed lab left behind").set_defaults(
        func=cmd_clean)
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    return cli.main("lab", args.func, args, leftovers=runner.leftovers)


if __name__ == "__main__":
    sys.exit(main())
