"""The lab's run options: one typed, checked object made once from the command line.

The runner (benchmarks/run/runner.py) reads a `RunOptions`, never argparse; `sweep`
and `fd_limit` make theirs with `dataclasses.replace`. Every value is checked
here, before anything starts, so a bad option is a one-line error rather than
a traceback after the servers came up.
"""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass, field, replace
from pathlib import Path

from benchmarks import stages
from benchmarks.run import prometheus, results, slo
from benchmarks.sandbox import hosts, procs
from benchmarks.stages import Stage

SANDBOXES = ("auto", "netns", "host")
# One Locust process on one core starts a few thousand requests a second at most; past
# that the schedule slips and the figures would be the client's (arrivals.py counts it).
MAX_ARRIVAL_RATE = 5000
# The floor study's seconds per request type: its --seconds, `lab run --floor-seconds`
# (benchmarks/studies/floor.py reads these: it imports this module, not the reverse)
FLOOR_SECONDS = (0.05, 60.0)  # the least and the most
FLOOR_DEFAULT_SECONDS = 2.0


# A stage whose users pause (`burst_every`) shows its failure only as a burst meets a
# connection idle since the last one: it is measured for this many bursts at least,
# whatever --duration says (5k at 3 s, on a crowded box, once met no race at all).
BURSTS_AT_LEAST = 5


class OptionsError(ValueError):
    """A bad option: the message says which and what to give instead."""


@dataclass(frozen=True)
class RunOptions:
    stages: tuple[Stage, ...] = field(default_factory=lambda: stages.MAIN)
    duration: float = 30.0  # seconds measured per stage
    users: int = 50  # Locust users
    spawn_rate: float = 50.0  # users started per second
    warmup: float = 5.0  # seconds of load before measuring
    wait_max: float = 0.01  # most seconds a Locust user waits between tasks
    socketio_users: int = 10  # Socket.IO users beside the HTTP users, in stages that have them
    locust_args: tuple[str, ...] = ()  # more Locust options, already split
    sandbox: str = "auto"  # auto | netns | host
    apply_host_sysctls: bool = False  # host mode: set the stage's sysctls on the host
    results: Path = results.RESULTS
    strict: bool = False  # exit 3 when a check fails
    server_cpus: str | None = None  # CPU set of the server roles (default: the last CPU)
    client_cpus: str | None = None  # CPU set of the client (default: the others)
    app_cpus: str | None = None  # a CPU set per app host, `2-3/4-5` (default: the server's)
    screenshots: bool = False  # the Sockets tab of each stage (`lab run`'s default)
    plots: bool = True  # the report's plots/*.png (--no-plots: about 10 s of CPU a 19-stage run)
    client_hosts: int = 1  # load hosts: with 2, Locust's master and a worker on each
    repeats: int = 1  # runs of every stage, interleaved (0,1,2,0,1,2...)
    profile: bool = True  # py-spy on the app server while measured (benchmarks/profile/)
    slo: tuple[slo.Objective, ...] = ()  # objectives each stage must meet (--slo), else exit 1
    arrival_rate: float | None = None  # the open model: requests started a second (arrivals.py)
    # `--floor`: the floor study after each repeat's stages, this many seconds per request
    # type (benchmarks/studies/floor.py after_repeat); None: no floor
    floor_seconds: float | None = None
    # checks left out by name (--leave-out-checks): still judged and shown, never counted
    leave_out_checks: tuple[str, ...] = ()
    # --metrics: Prometheus on a host of its own, exporters beside Nginx and Redis, the
    # app's /metrics on (benchmarks/run/prometheus.py)
    metrics: bool = False
    # a Python root its real-time server runs from, chrooted, in place of its venv
    # (benchmarks/sandbox/python_root.py; the capacity study's --realtime-python)
    python_root: Path | None = None

    def __post_init__(self):
        if not self.stages:
            raise OptionsError("no stage selected: give --stages main, or keys such as 0,2")
        if self.repeats < 1:
            raise OptionsError(f"--repeats must be at least 1 (got {self.repeats}): the "
                               "number of times each stage runs")
        if self.users < 1:
            raise OptionsError(f"--users must be at least 1 (got {self.users})")
        if self.duration < 1:
            raise OptionsError(f"--duration must be at least 1 second (got {self.duration:g})")
        if self.spawn_rate <= 0:
            raise OptionsError(f"--spawn-rate must be above 0 (got {self.spawn_rate:g})")
        if self.arrival_rate is not None and not 0 < self.arrival_rate <= MAX_ARRIVAL_RATE:
            raise OptionsError(f"--arrival-rate must be above 0 and at most {MAX_ARRIVAL_RATE} "
                               f"requests a second (got {self.arrival_rate:g})")
        if self.warmup < 0:
            raise OptionsError(f"--warmup cannot be negative (got {self.warmup:g})")
        if self.socketio_users < 0:
            raise OptionsError(f"--socketio-users cannot be negative (got {self.socketio_users})")
        if self.wait_max < 0:
            raise OptionsError(f"--wait-max cannot be negative (got {self.wait_max:g})")
        if self.sandbox not in SANDBOXES:
            raise OptionsError(f"--sandbox must be one of {', '.join(SANDBOXES)}")
        if not 1 <= self.client_hosts <= len(stages.CLIENT_ROLES):
            raise OptionsError(f"--client-hosts must be 1-{len(stages.CLIENT_ROLES)} (the "
                               f"lab has {len(stages.CLIENT_ROLES)} client hosts; got "
                               f"{self.client_hosts})")
        if self.sandbox == "host" and self.client_hosts > 1:
            raise OptionsError("--client-hosts 2 needs --sandbox netns (root and iproute2): "
                               "the load hosts are network namespaces")
        several = [s.key for s in self.stages if s.app_hosts > 1]
        if self.sandbox == "host" and several:
            raise OptionsError(f"stage(s) {', '.join(several)} run two app hosts, which need "
                               "--sandbox netns (root and iproute2); leave them out of "
                               "--stages on the host")
        least, most = FLOOR_SECONDS
        if self.floor_seconds is not None and not least <= self.floor_seconds <= most:
            raise OptionsError(f"--floor-seconds must be {least:g}-{most:g} (got "
                               f"{self.floor_seconds:g})")
        unknown = sorted(set(self.leave_out_checks) - check_names())
        if unknown:
            raise OptionsError(f"--leave-out-checks: no check is named {', '.join(unknown)}; "
                               f"the checks: {', '.join(sorted(check_names()))}")
        missing = procs.missing_environments(self.stages)
        if missing:
            raise OptionsError("\n".join(missing))
        if self.metrics and prometheus.missing_line():
            raise OptionsError(prometheus.missing_line())
        self.placement  # noqa: B018 - a CPU set this machine does not have fails here

    @property
    def placement(self) -> hosts.Placement:
        """Which CPUs the server roles and the client run on."""
        try:
            return hosts.placement(self.server_cpus, self.client_cpus, apps=self.app_cpus)
        except ValueError as e:
            raise OptionsError(f"--server-cpus/--client-cpus/--app-cpus: {e}") from e

    def for_stage(self, stage: Stage) -> RunOptions:
        """These options as `stage` is measured: BURSTS_AT_LEAST bursts at least."""
        least = math.ceil(BURSTS_AT_LEAST * stage.burst_every)
        return self if self.duration >= least else replace(self, duration=float(least))

    @property
    def stage_keys(self) -> list[str]:
        return [s.key for s in self.stages]

    def parameters(self) -> dict:
        """What run.json records of these options."""
        return {"stages": self.stage_keys, "duration_s": self.duration, "users": self.users,
                "spawn_rate": self.spawn_rate, "warmup_s": self.warmup,
                "wait_max_s": self.wait_max, "socketio_users": self.socketio_users,
                "sandbox": self.sandbox, "client_hosts": self.client_hosts,
                "app_hosts": {s.key: s.app_hosts for s in self.stages},
                "locust_args": shlex.join(self.locust_args), "cpus": self.placement.as_dict(),
                "repeats": self.repeats, "profile": self.profile,
                "slo": [o.text for o in self.slo], "arrival_rate": self.arrival_rate,
                "floor_seconds": self.floor_seconds,
                "leave_out_checks": list(self.leave_out_checks), "metrics": self.metrics}


def check_names() -> set[str]:
    """Every stage's checks, by the name checks.json gives them (the metric's)."""
    return {c.metric for s in stages.STAGES for c in s.checks}


def on_sandbox(opts: RunOptions, sandbox: str, spec: str) -> tuple[RunOptions, str | None]:
    """`opts` on the sandbox `auto` resolved to, and a note. On the host, a named set
    (`everything`, `scale-out`) leaves out the stages with several app hosts (they need
    network namespaces); named by key there, they are refused (RunOptions)."""
    several = [s.key for s in opts.stages if s.app_hosts > 1]
    sets = (*stages.SETS, stages.EVERYTHING)
    named = [part for part in spec.replace(",", " ").split() if part in sets]
    if sandbox != "host" or not named or not several:
        return replace(opts, sandbox=sandbox), None
    kept = tuple(s for s in opts.stages if s.app_hosts == 1)
    return (replace(opts, sandbox=sandbox, stages=kept),
            f"stage(s) {', '.join(several)} left out: two app hosts need network namespaces")


def with_app_hosts(chosen: tuple[Stage, ...], app_hosts: int | None) -> tuple[Stage, ...]:
    """The stages on `app_hosts` app hosts each (--app-hosts; None: each its own). Only a
    stage with Nginx in front can have more than one: it is what spreads the requests."""
    if app_hosts is None:
        return chosen
    if not 1 <= app_hosts <= len(stages.APP_ROLES):
        raise OptionsError(f"--app-hosts must be 1-{len(stages.APP_ROLES)} (the lab has "
                           f"{len(stages.APP_ROLES)} app hosts; got {app_hosts})")
    bare = [s.key for s in chosen if not s.front]
    if app_hosts > 1 and bare:
        fronted = ", ".join(s.key for s in stages.STAGES if s.front)
        raise OptionsError(f"--app-hosts {app_hosts}: stage(s) {', '.join(bare)} have no "
                           f"proxy to spread requests over app hosts; the stages with "
                           f"Nginx in front are {fronted}")
    return tuple(replace(s, app_hosts=app_hosts) for s in chosen)


def select_stages(spec: str) -> tuple[Stage, ...]:
    """Sets (`main`, ...) or keys/slugs; an empty list is an error, not `main`."""
    if not spec.strip():
        raise OptionsError("--stages is empty: give a set such as main, or keys such as 0,2")
    try:
        return tuple(stages.select(spec))
    except KeyError as e:
        raise OptionsError(e.args[0]) from e


def split_locust_args(text: str) -> tuple[str, ...]:
    try:
        return tuple(shlex.split(text or ""))
    except ValueError as e:
        raise OptionsError(f"--locust-args {text!r}: {e}") from e


def from_args(args) -> RunOptions:
    """The options of `lab run`'s parsed command line."""
    return RunOptions(
        stages=with_app_hosts(select_stages(args.stages), args.app_hosts),
        duration=args.duration, users=args.users,
        spawn_rate=args.spawn_rate, warmup=args.warmup, wait_max=args.wait_max,
        socketio_users=args.socketio_users,
        locust_args=split_locust_args(args.locust_args), sandbox=args.sandbox,
        apply_host_sysctls=args.apply_host_sysctls, results=Path(args.results),
        strict=args.strict, server_cpus=args.server_cpus, client_cpus=args.client_cpus,
        app_cpus=args.app_cpus,
        screenshots=args.screenshots, plots=getattr(args, "plots", True),
        client_hosts=args.client_hosts,
        repeats=getattr(args, "repeats", 1), profile=args.profile,
        slo=objectives(getattr(args, "slo", None)),
        arrival_rate=getattr(args, "arrival_rate", None),
        floor_seconds=floor_seconds(args),
        leave_out_checks=tuple(n for n in getattr(args, "leave_out_checks", "").replace(
            ",", " ").split()), metrics=getattr(args, "metrics", False))


def floor_seconds(args) -> float | None:
    """--floor's seconds per request type (--floor-seconds, else the study's default), or
    None without --floor; --floor-seconds alone is a mistake, said before anything starts."""
    seconds, wanted = getattr(args, "floor_seconds", None), getattr(args, "floor", False)
    if seconds is not None and not wanted:
        raise OptionsError(f"--floor-seconds {seconds:g} without --floor: add --floor to "
                           "measure the floor after each repeat, or leave it out")
    if not wanted:
        return None
    return FLOOR_DEFAULT_SECONDS if seconds is None else seconds


def objectives(spec: str | None) -> tuple[slo.Objective, ...]:
    """--slo's objectives, or a one-line error with the grammar before anything starts."""
    try:
        return slo.parse(spec)
    except slo.SLOError as e:
        raise OptionsError(str(e)) from e
