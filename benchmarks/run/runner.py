"""The lab runner: one stage, start to finish, from a `RunOptions`.

`run_stage` takes a stage of benchmarks/stages.py through: sandbox up, Redis,
app server and Nginx up (`Stack`), seed users, check the endpoints, warm up,
measure with Locust while the sampler records sockets and CPU (`measure`),
snapshot `ss`/`netstat`, compute the metrics and evaluate the checks, tear
down. Paths come from benchmarks/run/results.py; the command line is lab.py's.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import psutil

from benchmarks.analysis import access_logs, metrics, nginx_errors
from benchmarks.capture import loop
from benchmarks.capture.tables import side_hosts
from benchmarks.profile import record as profile
from benchmarks.profile import threads
from benchmarks.run import (
    cli,
    crash,
    environment,
    fitting,
    locust_cli,
    open_model,
    progress,
    results,
    slo,
)
from benchmarks.run.cli import StageFailed, say
from benchmarks.run.fitting import PORT_RANGE
from benchmarks.run.options import OptionsError, RunOptions
from benchmarks.run.stack import Stack, socketio_name
from benchmarks.sandbox import hosts, nginx_conf, procs, sandbox
from benchmarks.stages import ROOT, Stage
from benchmarks.studies import floor as floor_study

FRIENDS_PER_USER = 5
WARMUP_PREFIX = "locust-warmup"  # its --json-file: the warm-up's requests a second
# What `lab run` passes to take a stage's Sockets tab after it is measured, with the
# stage, its folder and its entry URL (benchmarks/sockets_tab/stage_shot.py's screenshot).
Screenshot = Callable[[Stage, Path, str], None]


def _owned_processes() -> list[tuple[psutil.Process, int]]:
    """(process, the lab pid it carries) for every process a lab started."""
    found = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        try:
            owner = p.environ().get(procs.OWNER_ENV, "")
        except (psutil.Error, OSError):
            continue
        if owner.isdigit() and int(owner) != p.pid:
            found.append((p, int(owner)))
    return found


def _describe(p: psutil.Process) -> str:
    return f"{p.pid} {' '.join(p.info['cmdline'] or [])[:80]}"


def started_by(pid: int) -> list[str]:
    """Processes still running that the lab with this pid started (`pid command`)."""
    return [_describe(p) for p, owner in _owned_processes() if owner == pid]


def orphans() -> list[str]:
    """Stop the processes of labs that are gone (killed with -9); what was stopped."""
    stray = [p for p, owner in _owned_processes() if not hosts.pid_alive(owner)]
    for p in stray:
        try:
            p.terminate()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(stray, timeout=5)
    for p in alive:
        try:
            p.kill()
        except psutil.Error:
            pass
    return [_describe(p) for p in stray]


def leftovers(pid: int | None = None) -> list[str]:
    """Namespaces and processes of this lab that are still there."""
    pid = pid or os.getpid()
    return hosts.owned_namespaces(pid) + started_by(pid)


def seed_stage_users(stack: Stack, count: int) -> Path:
    """`flask seed-users` inside the stage: users (with friends) for Locust to log in as."""
    out = stack.dir / results.USERS_JSON
    code = procs.run_quiet([*stack.box.prefix("app"), procs.tool("flask"), "--app", "app",
                            "seed-users", "--count", str(count), "--friends",
                            str(FRIENDS_PER_USER), "--out", str(out)],
                           stack.app_env(), stack.dir / "seed.log", timeout=120)
    if code != 0 or not out.exists():
        raise StageFailed(f"seed-users failed (exit {code}); see {stack.dir / 'seed.log'}")
    return out


def check_endpoints(prefix: list[str], url: str, stage_dir: Path,
                    users_file: Path | None) -> dict:
    """benchmarks/run/verify.py against the stage: every endpoint answers as the API says."""
    out = stage_dir / results.VERIFY_JSON
    cmd = [*prefix, sys.executable, "-m", "benchmarks.run.verify", url, "--json", str(out)]
    if users_file:
        cmd += ["--users-file", str(users_file)]
    code = procs.run_quiet(cmd, procs.child_env(), stage_dir / "verify.log", timeout=60)
    result = json.loads(out.read_text()) if out.exists() else {"ok": False}
    if code != 0 or not result.get("ok"):
        log = (stage_dir / "verify.log").read_text(errors="replace")[-2000:]
        raise StageFailed(f"the endpoints at {url} did not answer correctly:\n{log}")
    return result


def probe_delivery(box: sandbox.Sandbox, stage: Stage, stage_dir: Path,
                   users_file: Path) -> None:
    """benchmarks/run/delivery.py from the client host: messages sent on the first app
    host, counted on the second (delivery.json, which the checks read); in a stage with
    a Socket.IO server of its own, posted over HTTP to the first app host's HTTP server
    and counted on the last one's Socket.IO server."""
    log = stage_dir / "delivery.log"
    apps = stage.app_roles
    ends = ([box.url(apps[0]), box.socketio_url(apps[-1]), "--over-http"]
            if stage.socketio_server else [box.url(r) for r in apps[:2]])
    code = procs.run_quiet([*box.prefix("client"), sys.executable, "-m",
                            "benchmarks.run.delivery", *ends,
                            "--users-file", str(users_file),
                            "--json", str(stage_dir / results.DELIVERY_JSON)],
                           procs.child_env(), log, timeout=60)
    last = (log.read_text(errors="replace").strip().splitlines() or ["(no output)"])[-1]
    say(f"  {last}" if code in (0, 1) else f"  delivery probe failed (exit {code}): {last}")


@dataclass
class Load:
    """Where the load comes from and goes to, and what the sampler watches meanwhile."""

    client: list[str]  # the argv prefix that runs a command on the client host
    url: str  # the entry point
    warmup_url: str  # the app itself, behind a proxy (see warm_up)
    sampler: dict  # loop.command's arguments but `out`, `procs` and `duration`
    server_pids: dict[str, int]
    snapshots: dict[str, list[str]]  # folder name under the stage -> argv prefix of a host
    count_log: Path | None = None  # the access log that counts answered requests
    # the sampler runs on the machine (it enters each host itself), on the client's CPUs
    sampler_prefix: list[str] = field(default_factory=list)
    # several client hosts: host -> its argv prefix, a Locust worker on each; the master
    # (on `client`, at master_host) runs `--headless` and counts
    workers: dict[str, list[str]] = field(default_factory=dict)
    master_host: str | None = None
    chat_settings: dict = field(default_factory=dict)  # the stage's (Stage.chat_settings)
    front: bool = False  # a proxy in front (its error log is watched)
    upstream_idle_s: float = 0.0  # its idle upstream connections closed after this
    down: Callable[[], str | None] = lambda: None  # Stack.down: a server that exited


# Locust's run starts: seconds after its process on a slow box (wait_for_run_start); a
# master first waits for its workers to join, at most WORKERS_WAIT_S (Locust's option)
RUN_START_WAIT_S = 120
WORKERS_WAIT_S = 30
WINDOW_BEGINS = "window-begins"  # made in the stage folder as Locust's run starts
# nginx/nginx.conf's access_log flush=1s, and a little: its buffer written out
NGINX_LOG_FLUSH_S = 1.2


def warm_up(load: Load, stage_dir: Path, users_file: Path | None, opts: RunOptions,
            user_classes) -> float | None:
    """Load before measuring; the answered requests a second it saw (None: no warm-up).

    It goes to the app itself, behind a proxy: TIME_WAIT lasts 60 s, and a warm-up
    through Nginx would use up stage 4's local ports before the measured window,
    hiding the moment they run out. Not where the app is two servers split by Nginx
    (stage 9): its HTTP server serves no Socket.IO, so that warm-up goes through Nginx,
    whose idle upstream connections close 5 s later: the measured window starts after.
    """
    if opts.warmup <= 0:
        return None
    say(f"  warm-up: {opts.warmup:g} s against {load.warmup_url}")
    prefix = stage_dir / WARMUP_PREFIX
    cmd = [*locust_cli.locust_command(load.warmup_url, opts, opts.warmup, user_classes, None,
                                      users_file, load.chat_settings),
           "--json-file", str(prefix)]
    procs.run_quiet([*load.client, *cmd], procs.child_env(),
              stage_dir / "locust-warmup.log", timeout=opts.warmup + 60)
    if load.front and load.warmup_url == load.url:  # through Nginx: after its buffered
        time.sleep(max(NGINX_LOG_FLUSH_S, load.upstream_idle_s))  # log and idle upstreams
    try:
        return metrics.group_rps(results.read_json(prefix.with_suffix(".json")))
    except (OSError, ValueError):
        return None


def wait_for_run_start(locust: subprocess.Popen, log: Path, workers: int) -> None:
    """Until Locust's run has begun: its timer starts as it logs `RUN_STARTED`, after it
    has imported its locustfiles (and, as a master, seen its workers join): under a
    second on a quiet box, several on a slow one. The sampler and the window's other
    recorders start then, so they see the run Locust measures, whatever the box."""
    deadline = time.monotonic() + RUN_START_WAIT_S + (WORKERS_WAIT_S if workers else 0)
    while time.monotonic() < deadline and locust.poll() is None:
        if locust_cli.RUN_STARTED in log.read_text(errors="replace"):
            return
        time.sleep(0.05)
    if locust.poll() is None:
        raise StageFailed(f"Locust did not start its run within {RUN_START_WAIT_S} s; see {log}")
    # it exited first: what it said is read below (no stats, or workers that never came)


def measure(load: Load, stage_dir: Path, users_file: Path | None, opts: RunOptions,
            user_classes, window: Callable[[], contextlib.AbstractContextManager] =
            contextlib.nullcontext) -> int | None:
    """The measured Locust run with the sampler beside it, and `window` (the other
    recorders), both from the moment Locust's run starts (the sampler, whose own start-up
    takes a second on a slow box, is started before and told then). Returns where
    `load.count_log` ended when Locust started (what the log gains is that run's)."""
    env = procs.child_env()
    cmd = locust_cli.locust_command(load.url, opts, opts.duration, user_classes,
                         stage_dir / results.LOCUST_PREFIX, users_file, load.chat_settings)
    if load.workers:  # the master: it counts, its workers (start_workers) send the load
        cmd = [*cmd, "--master", "--expect-workers", str(len(load.workers)),
               "--expect-workers-max-wait", str(WORKERS_WAIT_S)]
    shown = shlex.join(results.rel(part) if part.startswith("/") else part for part in cmd)
    (stage_dir / "locust-command.txt").write_text(shown + "\n")
    say(f"  measuring {opts.duration:g} s: {shown}")
    count_from = access_logs.log_size(load.count_log) if load.count_log else None
    locust = procs.start([*load.client, *cmd], log=stage_dir / "locust.log", env=env, cwd=ROOT)
    workers, sampler_proc, begin = {}, None, stage_dir / WINDOW_BEGINS
    try:
        workers = locust_cli.start_workers(load.workers, load.master_host, stage_dir,
                                           user_classes)
        # the sampler starts up beside Locust and counts from the run's start (`begin`)
        sampler_proc = procs.start([*load.sampler_prefix, *loop.command(
            stage_dir / results.SAMPLER_CSV, procs={**load.server_pids,
                                                    **locust_cli.components(locust, workers)},
            # stop just before Locust's users close their connections
            duration=max(1.0, opts.duration - 0.5), begin_when=begin, **load.sampler)],
            log=stage_dir / "sampler.log", env=procs.child_env(), cwd=ROOT)
        wait_for_run_start(locust, stage_dir / "locust.log", len(workers))
        begin.touch()
        with window():
            follow(locust, load, stage_dir, opts)
            sampler_proc.wait(timeout=15)
    finally:
        with sandbox.uninterrupted():
            procs.stop(locust)
            for worker in workers.values():
                procs.stop(worker)
            procs.stop(sampler_proc, sig=signal.SIGTERM)
            begin.unlink(missing_ok=True)
    if not (stage_dir / results.LOCUST_JSON).exists():
        log = (stage_dir / "locust.log").read_text(errors="replace")
        if "Gave up waiting for workers to connect" in log:  # Locust's own words
            joined = log.count(" joined (")
            raise StageFailed(f"Locust's master gave up waiting for its workers: {joined} "
                              f"joined; see {stage_dir / 'locust.log'} (a refused worker "
                              "says why there)")
        raise StageFailed(f"Locust wrote no stats:\n{log[-2000:]}")
    snapshot_hosts(load, stage_dir)
    return count_from


def follow(locust: subprocess.Popen, load: Load, stage_dir: Path, opts: RunOptions) -> None:
    """Until Locust stops by itself (its run time), with a progress line every 5 s;
    StageFailed if a server dies meanwhile or Locust does not stop."""
    watch = progress.Watch(stage_dir, front=load.front)
    deadline = time.monotonic() + opts.duration + 60
    started, last = time.monotonic(), 0.0
    while locust.poll() is None and time.monotonic() < deadline:
        time.sleep(0.5)
        if load.down():  # no figures from a stage whose server died
            raise StageFailed(load.down())
        news = watch.news()
        if news:
            say(f"  {time.monotonic() - started:5.0f} s  {news}")
        if time.monotonic() - last >= 5:
            last = time.monotonic()
            say(watch.line(last - started))
    if locust.poll() is None:
        raise StageFailed(f"Locust did not stop by itself; see {stage_dir / 'locust.log'}")
    if time.monotonic() - last >= 1:  # the window's last figures: a short run's only ones
        say(watch.line(time.monotonic() - started))


def snapshot_hosts(load: Load, stage_dir: Path) -> None:
    """Each host's sockets as the load ends (`ss`, `netstat`), all hosts at once."""
    taking = []
    for folder, prefix in load.snapshots.items():
        out = stage_dir / folder
        out.mkdir(parents=True, exist_ok=True)
        taking.append(procs.start([*prefix, sys.executable, "-m", "benchmarks.capture.sampler",
                                   "--snapshot", str(out)], log=stage_dir / "sampler.log",
                                  env=procs.child_env(), cwd=ROOT))
    try:
        for proc in taking:
            proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        pass  # what it could not take, its files say
    finally:
        for proc in taking:
            procs.stop(proc)


@contextmanager
def recorded(load: Load, stage_dir: Path, opts: RunOptions,
             crash_probe: Callable[[], subprocess.Popen] | None, probes: list) -> Iterator[None]:
    """The window's recorders beside the sampler, started as Locust's run starts: py-spy
    on the first app host's servers (`opts.profile`: the app server, and its Socket.IO
    server in a stage that has one), stopping as the sampler does, just before Locust's
    users close their connections; their threads' CPU; and a crash twin's probe
    (`crash_probe`, appended to `probes`), which kills its worker a third into the run."""
    pids = [pid for name, pid in load.server_pids.items()
            if name in ("app", socketio_name("app"))]
    with profile.recording(pids, load.sampler_prefix, stage_dir,
                           opts.duration - 0.5, on=opts.profile), threads.window(pids, stage_dir):
        if crash_probe:
            probes.append(crash_probe())
        yield


def measured(stage: Stage, box: sandbox.Sandbox, stack: Stack, load: Load, stage_dir: Path,
             users_file: Path, opts: RunOptions, classes) -> int | None:
    """`measure` with its window's recorders, a crash twin's probe among them, which is
    waited for after the window (its recovery may outlast it); --metrics' answers too."""
    crashing: list[subprocess.Popen] = []
    crash_probe = (partial(crash.start, box, stack, stage_dir, users_file, opts.duration)
                   if crash.wanted(stage) else None)
    with stack.watching(say):
        count_from = measure(load, stage_dir, users_file, opts, classes, partial(
            recorded, load, stage_dir, opts, crash_probe, crashing))
    for probe in crashing:
        say(f"  {crash.finish(probe, stage_dir, opts.duration)}")
    return count_from


def evaluate_stage(stage: Stage, stage_dir: Path,
                   leave_out: tuple[str, ...] = ()) -> tuple[dict, list[dict]]:
    """metrics.json and checks.json of a measured stage folder; (metrics, checks), the
    checks named in `leave_out` marked as such."""
    result = metrics.compute(stage_dir, stage)
    checks = metrics.evaluate(stage, result, leave_out)
    results.write_json(stage_dir / results.METRICS_JSON, result)
    results.write_json(stage_dir / results.CHECKS_JSON, checks)
    return result, checks


def stage_load(stage: Stage, box: sandbox.Sandbox, stack: Stack, stage_dir: Path) -> Load:
    """What `measure` needs for a stage in its sandbox."""
    # what runs where, for foreign_cpu_*: the servers, Locust on each client host, the sampler
    placed = {**stack.roles, "sampler": "client",
              **{results.locust_component(role): role for role in box.clients}}
    sampler_args = {"classes": box.connection_classes(), "cpu_sets": box.cpu_sets(placed)}
    if box.network:
        sampler_args["hosts"] = {role: box.namespace(role) for role in box.roles}
        snapshots = {f"{results.SNAPSHOTS}/{role}": ["ip", "netns", "exec", box.namespace(role)]
                     for role in box.roles}
    else:
        snapshots = {".": []}
    workers = ({role: box.prefix(role) for role in box.clients}
               if len(box.clients) > 1 else {})
    warmup_url = stack.url if stage.socketio_server else box.url("app")  # (see warm_up)
    return Load(client=box.prefix("client"), url=stack.url, warmup_url=warmup_url,
                sampler=sampler_args, server_pids=stack.pids(), snapshots=snapshots,
                count_log=stage_dir / results.count_log(stage),
                sampler_prefix=["taskset", "-c", box.where()["client"]["cpus"]],
                workers=workers, master_host=box.address("client") if workers else None,
                chat_settings=stage.chat_settings, front=bool(stage.front),
                upstream_idle_s=nginx_conf.upstream_idle_s(stage.front), down=stack.down)


def after_the_window(stage: Stage, box: sandbox.Sandbox, stack: Stack, stage_dir: Path,
                     users_file: Path, shown: progress.Progress) -> None:
    """After the measured window: a message across the servers or app hosts
    (delivery.json), and StageFailed if a server has died meanwhile (Stack.down)."""
    if stage.socketio_server:
        shown.phase("a message posted over HTTP, to a websocket on the other server")
        probe_delivery(box, stage, stage_dir, users_file)
    elif stage.app_hosts > 1:
        shown.phase("a Socket.IO message from one app host to the other")
        probe_delivery(box, stage, stage_dir, users_file)
    if stack.down():
        raise StageFailed(stack.down())


def measured_as(stage: Stage, opts: RunOptions) -> RunOptions:
    """The options `stage` is measured with (opts.for_stage), said when they differ."""
    own = opts.for_stage(stage)
    if own != opts:
        say(f"  measured {own.duration:g} s, not less: its users pause every "
            f"{stage.burst_every:g} s, and its failure shows as a burst begins")
    return own


def run_stage(stage: Stage, run_dir: Path, opts: RunOptions,
              shown: progress.Progress | None = None,
              screenshot: Screenshot | None = None) -> dict:
    """One stage, start to finish. Returns its metrics and checks. With
    `opts.screenshots`, `screenshot` takes its Sockets tab at the end."""
    shown = shown or progress.Progress(1, opts.warmup + opts.duration)
    stage_dir = results.stage_dir(run_dir, stage)
    stage_dir.mkdir(parents=True)
    shown.stage(shown.index + 1 if shown.total > 1 else 1, f"{stage.key} {stage.slug}")
    shown.phase(f"{stage.title}; starting its hosts and servers")
    opts = measured_as(stage, opts)
    with sandbox.Sandbox(stage, opts.sandbox, opts.apply_host_sysctls, opts.placement,
                         client_hosts=opts.client_hosts, metrics=opts.metrics) as box:
        for note in box.notes:
            say(f"  note: {note}")
        stack = Stack(stage, box, stage_dir)
        try:
            stack.start()
            shown.phase(f"up on {box.describe()}; entry {stack.url}; seeding users")
            users_file = seed_stage_users(stack, max(2 * opts.users, 20))
            shown.phase("verifying the endpoints")
            verified = check_endpoints(box.prefix("client"), stack.url, stage_dir, users_file)
            say(f"  verified: Connection: {verified.get('connection_header')}")
            placed = box.where()
            load = stage_load(stage, box, stack, stage_dir)
            shown.phase("warm-up")
            classes = locust_cli.load_classes(stage.users, opts)
            warm_rps = warm_up(load, stage_dir, users_file, opts, classes)
            fitting.fit(box, warm_rps, opts, locust_cli.locust_users(opts, classes))
            sysctls = record_hosts(stage, box, stage_dir)
            shown.phase("measuring")
            apps_from = access_logs.app_log_sizes(stage, stage_dir)
            accepted_from = box.accepted(stage.app_roles) if stage.front else None
            latency_from = access_logs.log_size(stage_dir / results.latency_log(stage))
            count_from = measured(stage, box, stack, load, stage_dir, users_file, opts, classes)
            apps = access_logs.app_counts(stage_dir, apps_from)
            if accepted_from is not None:  # for upstream_reused_share, the same window
                apps["app_accepted"] = box.accepted(stage.app_roles) - accepted_from
            after_the_window(stage, box, stack, stage_dir, users_file, shown)
        finally:
            stack.stop()  # Nginx writes out its buffered access log as it stops
    results.write_json(stage_dir / results.COUNT_JSON, {
        "log": results.count_log(stage), "from_byte": count_from,
        **access_logs.count_answered(load.count_log, count_from), **apps,
        "latency_log": results.latency_log(stage),
        **access_logs.server_latency(stage_dir / results.latency_log(stage), latency_from)})
    nginx_errors.summarize(stage_dir)
    result, checks = evaluate_stage(stage, stage_dir, opts.leave_out_checks)
    progress.say_outcome(result, checks, stage_dir)
    judged = judge_objectives(stage_dir, result, opts)
    if opts.screenshots and screenshot:
        shown.phase("a screenshot of the Sockets tab")
        screenshot(stage, stage_dir, stack.url)
    return {"stage": stage, "metrics": result, "checks": checks, "slo": judged,
            "sysctls": sysctls, "hosts": placed}


def record_hosts(stage: Stage, box: sandbox.Sandbox, stage_dir: Path) -> dict:
    """sysctl.json and sockets.json as the stage is measured, the connecting hosts'
    settings said; each host's sysctls."""
    sysctls = box.sysctls()
    results.write_json(stage_dir / results.SYSCTL_JSON, sysctls)
    results.write_json(stage_dir / results.SOCKETS_JSON, sockets_layout(stage, box))
    say("  " + ", ".join(f"{role} tcp_tw_reuse={v.get('net.ipv4.tcp_tw_reuse')} ports "
                         f"{v.get(PORT_RANGE)}"
                         for role, v in sysctls.items() if role in stage.connecting_roles))
    return sysctls


def judge_objectives(stage_dir: Path, result: dict, opts: RunOptions) -> list[dict]:
    """After a stage's checks: what its open-model schedule did, and its --slo verdicts
    (slo.json); the verdicts."""
    schedule = open_model.read(stage_dir)
    if schedule:
        say(open_model.line(schedule))
    judged = slo.judge(opts.slo, result)
    if judged:
        results.write_json(stage_dir / slo.SLO_JSON, judged)
        for j in judged:
            say(slo.line(j))
    return judged


def sockets_layout(stage: Stage, box: sandbox.Sandbox) -> dict:
    """sockets.json: the classes (connecting host, listening host, port), each host's
    local port range and the log that counts the requests (results.count_log), for
    benchmarks/sockets_tab/stats.py."""
    classes = {name: (src, dst, box.port("socketio" if name == "upstream_socketio"
                                         else side_hosts(dst)[0]))
               for name, (src, dst, _) in box.host_classes().items()}
    ranges = {role: values.get(PORT_RANGE) for role, values in box.sysctls().items()}
    return {"classes": classes, "port_ranges": ranges, "count_log": results.count_log(stage)}


_UP_LOCKS: list[int] = []  # the open lock files, held until this process exits


def refuse_if_up(results_dir: Path) -> None:
    """A clear error while a `lab up` serves a stage from this results folder: a second
    stage there would empty its folder (running_stage) and share its state file.

    The state file is written only once the stage is up, so two started at once both
    find none: an exclusive lock on `<results>/up.lock`, held by this process until it
    exits, makes the second one say so too."""
    results_dir = Path(results_dir)
    results_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(results.up_lock(results_dir), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        _UP_LOCKS.append(fd)
        locked = False
    except BlockingIOError:
        os.close(fd)
        locked = True
    state = results.up_state(results_dir)
    old = results.read_json(state) if state.exists() else {}
    if hosts.pid_alive(old.get("pid")):
        what = f"stage {old['stage']} is already up (pid {old['pid']})"
    elif locked:
        what = "another `lab up` is starting a stage"
    else:
        return
    raise OptionsError(f"{what} from {results.rel(results_dir)}; stop it with Ctrl-C "
                       "first, or give this one --results OTHER_FOLDER")


@contextmanager
def running_stage(stage: Stage, opts: RunOptions):
    """A stage's sandbox and servers, seeded and verified, for `lab up` and
    benchmarks/studies/crosscheck.py: results/up/<stage>/, emptied first."""
    stage_dir = results.up_dir(opts.results, stage)
    if stage_dir.exists():
        for f in sorted(stage_dir.rglob("*"), reverse=True):
            f.unlink() if f.is_file() or f.is_symlink() else f.rmdir()
    stage_dir.mkdir(parents=True, exist_ok=True)
    with sandbox.Sandbox(stage, opts.sandbox, opts.apply_host_sysctls, opts.placement,
                         client_hosts=opts.client_hosts, metrics=opts.metrics) as box:
        stack = Stack(stage, box, stage_dir, opts.python_root)
        try:
            stack.start()
            users_file = seed_stage_users(stack, 100)
            check_endpoints(box.prefix("client"), stack.url, stage_dir, users_file)
            yield box, stack, users_file
        finally:
            stack.stop()


def run_stages(opts: RunOptions, run_dir: Path,
               screenshot: Screenshot | None = None) -> tuple[list[dict], list[str]]:
    """Every stage of `opts`, one after the other, `opts.repeats` times over (0,1,2,0,1,2:
    a drift of the machine hits every stage alike), repeat k into results.repeat_dir,
    with `opts.floor_seconds` the floor study after each repeat's stages, into the same
    folder (run.json kept up to date, `repeats_done` after each); (the results of those
    that ran, the keys of those that could not, each once: `floor` for the study)."""
    info = {**environment.environment(opts.stages), "parameters": opts.parameters(), "stages": {},
            "repeats_done": 0}
    info["at_rest"], line = environment.at_rest(opts.placement)
    say(line)
    results.write_json(run_dir / results.RUN_JSON, info)
    done, failed = [], []
    shown = progress.Progress(len(opts.stages) * opts.repeats, opts.warmup + opts.duration)
    for repeat in range(1, opts.repeats + 1):
        if opts.repeats > 1:
            say(f"lab: repeat {repeat} of {opts.repeats}")
        into = results.repeat_dir(run_dir, repeat)
        for i, stage in enumerate(opts.stages):
            if opts.sandbox == "host" and (i > 0 or repeat > 1):
                sandbox.wait_for_time_wait_drain(limit=200, say=say)
            try:
                done.append({**run_stage(stage, into, opts, shown, screenshot if repeat == 1
                                         else None), "repeat": repeat})
                if repeat == 1:
                    info["stages"][stage.key] = {"dir": stage.dirname,
                                                 "hosts": done[-1]["hosts"],
                                                 "servers": environment.servers(stage),
                                                 "sysctls": done[-1]["sysctls"]}
            except cli.RUN_ERRORS as e:
                say(f"  stage {stage.key} FAILED TO RUN: {e}")
                failed += [stage.key] if stage.key not in failed else []
                if repeat == 1:
                    info["stages"][stage.key] = {"dir": stage.dirname, "error": str(e)}
            results.write_json(run_dir / results.RUN_JSON, info)
        if opts.floor_seconds is not None:  # after the repeat's stages, its own floor
            try:
                floor_study.after_repeat(run_dir, repeat, opts.floor_seconds, opts.placement)
            except cli.RUN_ERRORS as e:
                say(f"  the floor FAILED TO RUN: {e}")
                failed += ["floor"] if "floor" not in failed else []
        info["repeats_done"] = repeat
        results.write_json(run_dir / results.RUN_JSON, info)
    return done, failed
