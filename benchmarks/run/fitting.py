"""A stage's lab devices fitted to this machine's speed, after its warm-up.

Two failures are made to happen within a short stage by a setting smaller than
any real server's: stage 4's narrowed port range (sysctl/80-narrow-ports.conf) and
stage 0t's TIME_WAIT cap (sysctl/65-tw-cap.conf). Each fills at the stage's
request rate; on a slow or busy machine a short run would end before it is full,
and the failure would not show. So, from the warm-up's rate, each is made smaller
still when it would not fill early enough, only inside the stage's hosts (never on
the machine), and the run says so.

A rate is a forecast: on a box shared with other work the window may run at a small
part of the warm-up's rate (stage 4 under half the CPU beside the rest of the suite
filled 35% of a range sized so). So the port range, once narrowed, also holds no
more ports than the requests the users make through Nginx as they start, which every
window makes whatever the box's speed.
"""

from __future__ import annotations

from benchmarks import checks, stages
from benchmarks.run.cli import say
from benchmarks.run.options import RunOptions
from benchmarks.sandbox import hosts, sandbox
from benchmarks.stages import Stage

PORT_RANGE = "net.ipv4.ip_local_port_range"
TW_BUCKETS = "net.ipv4.tcp_max_tw_buckets"
MIN_PORTS = 100  # the narrowest range fit_port_range makes
FILL_WITHIN = 8  # fit_port_range: the range fills within 1/8 of the window at the warm-up rate
# the HTTP requests each Locust user makes as it starts (benchmarks/chat.py open_chat:
# log in, its friends, find-or-create their room), before any task
REQUESTS_AS_A_USER_STARTS = 3
MIN_TW_CAP = 100  # the lowest cap fit_tw_cap sets
TW_FILL_WITHIN = 3  # fit_tw_cap: the cap fills within the first third of warm-up + window


def _write(box: sandbox.Sandbox, settings: dict[str, str]) -> None:
    for role in box.stage.connecting_roles:
        hosts.write_sysctls(settings, ["ip", "netns", "exec", box.namespace(role)])


def starting_requests(users: int) -> int:
    """The requests `users` Locust users make through the entry point as they start."""
    return REQUESTS_AS_A_USER_STARTS * users


def fit_port_range(box: sandbox.Sandbox, rps: float | None, opts: RunOptions,
                   users: int) -> str | None:
    """Stage 4's lesson, on any machine: narrow the connecting hosts' port range further
    when this machine is too slow to fill it early in the measured window (the sizing:
    ports_to_fill). Only stages whose profile narrows the range and whose checks want it
    exhausted (the others keep the profile's: stage 7's app host, narrowed to 100, once
    ran out of ports toward Redis), only on hosts (never the machine's own). The new
    range, or None when the profile's stands.
    """
    if not (box.network and "narrow-ports" in box.stage.sysctl
            and checks.PORTS_EXHAUSTED in box.stage.checks):
        return None
    low, high = (int(x) for x in stages.sysctl_profile("narrow-ports")[PORT_RANGE].split())
    wanted = ports_to_fill(rps, opts.duration, users)
    if wanted >= high - low + 1:
        return None
    value = f"{low} {low + wanted - 1}"
    _write(box, {PORT_RANGE: value})
    return value


def ports_to_fill(rps: float | None, duration: float, users: int) -> int:
    """How many local ports the measured window fills early, at R requests a second.

    Every request through Nginx (no upstream keep-alive) holds a local port for 60 s,
    so the range fills in ports / R seconds. `rps` is the warm-up's, straight to the
    app; through Nginx, and on a busy box, R was seen 2-5 times lower, so the range is
    sized to fill within an eighth of the window at `rps`; and to no more than the
    requests Locust's `users` make as they start (when that is at least MIN_PORTS), so
    that it fills once they have started, however slowly. With no rate (no warm-up, or
    one that answered nothing), the narrowest: a 3 s window at a sixth of this box's
    speed answered 280 requests and left 58 ports in TIME_WAIT by the sampler's last row,
    a third of the 180 its users' starts would have given.
    """
    if not rps:
        return MIN_PORTS
    start = starting_requests(users)
    wanted = max(MIN_PORTS, int(rps * duration / FILL_WITHIN))
    return min(wanted, start) if start >= MIN_PORTS else wanted


def fit_tw_cap(box: sandbox.Sandbox, rps: float | None, opts: RunOptions) -> int | None:
    """Stage 0t's lesson, on any machine: lower the app host's TIME_WAIT cap when this
    machine is too slow to reach it early. Each request leaves one TIME_WAIT toward
    Redis for 60 s, from the warm-up on (the host is new at the stage's start), so the
    cap fills in cap / R seconds; it is sized to fill within the first third of warm-up
    and window at the warm-up's rate (a busy box was seen at a third of it), or with no
    rate to MIN_TW_CAP. The new cap, or None when the profile's 4,096 stands."""
    if not (box.network and "tw-cap" in box.stage.sysctl):
        return None
    cap = int(stages.sysctl_profile("tw-cap")[TW_BUCKETS])
    wanted = max(MIN_TW_CAP, int((rps or 0) * (opts.warmup + opts.duration) / TW_FILL_WITHIN))
    if wanted >= cap:
        return None
    _write(box, {TW_BUCKETS: str(wanted)})
    return wanted


def say_fitted(stage: Stage, rps: float | None, opts: RunOptions, users: int,
               ports: str | None, cap: int | None) -> None:
    """What this module changed for this machine's speed, if anything, said in the run."""
    where = ", ".join(stage.connecting_roles)
    rate = (f"the warm-up answered {rps:.0f} req/s" if rps else
            "no rate from a warm-up (--warmup 0, or nothing answered in it)")
    if ports:
        low, high = (int(x) for x in ports.split())
        if rps:
            say(f"  port range {ports} on {where}: {rate}, so the narrowed range fills "
                f"within the first 1/{FILL_WITHIN} of {opts.duration:g} s at that rate")
        else:
            say(f"  port range {ports} on {where}: {rate}")
        if high - low + 1 == starting_requests(users):
            say(f"  and it is no larger than the {starting_requests(users)} requests its "
                f"{users} users make as they start: full once they have, at any rate")
    if cap:
        how = (f"the cap fills within the first 1/{TW_FILL_WITHIN} of warm-up and window at "
               "that rate" if rps else "the lowest the lab sets")
        say(f"  tcp_max_tw_buckets {cap} on {where}: {rate}, so {how}")


def fit(box: sandbox.Sandbox, rps: float | None, opts: RunOptions, users: int) -> None:
    """Both fits for this stage, after its warm-up, and what they changed said."""
    say_fitted(box.stage, rps, opts, users, fit_port_range(box, rps, opts, users),
               fit_tw_cap(box, rps, opts))
