"""While a lab runs, its address range is unreachable from the machine's own network.

The lab's hosts (198.18.0.0/15) exist only inside its namespaces. From the
network namespace the lab was started in (the machine's own), that range would
leave by the default route, to whoever answers outside: a `locust`, `curl` or
`wrk` line copied from the docs into a plain terminal would load somebody
else's machine. So while any lab runs, this namespace has the route

    unreachable 198.18.0.0/15 proto 198

and a connect there fails at once ("No route to host"). `proto 198` marks the
route as the lab's: the lab deletes only that one, and never replaces a route
the machine already had for any part of the range (it refuses to start and
says why).

Several labs may run at once (two terminals, the test suite beside `lab up`,
another clone's suite). Each holds a shared lock (flock) on a file named after
this network namespace; whoever then gets the lock exclusively is the last
one out and deletes the route. A lab killed with `kill -9` loses its lock with
its process; its route stays (which is safe) until the next lab stops or
`lab clean` runs.
"""

from __future__ import annotations

import fcntl
import ipaddress
import json
import os
import subprocess
from pathlib import Path

from benchmarks.lab_range import BENCHMARK_NET

PROTO = "198"   # the lab's mark on its route (any number the kernel does not use)
LOCK_DIR = Path("/run/lock")
PROBE = "198.18.0.30"   # the app host's address: what a copied command would hit


class RouteError(RuntimeError):
    """The machine's network already routes part of the lab's range, or the route
    could not be made."""


def _ip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True)


def _lock_file() -> Path:
    """One lock per network namespace: labs started from the same network share it."""
    LOCK_DIR.mkdir(parents=True, exist_ok=True)
    return LOCK_DIR / f"ftl-unreachable-{os.stat('/proc/self/ns/net').st_ino}.lock"


def routes() -> tuple[list[dict], list[dict]]:
    """(the lab's route, if any; every other route that covers part of the range)."""
    listed = _ip("-4", "-j", "route", "show", "table", "all")
    ours, others = [], []
    for route in json.loads(listed.stdout or "[]"):
        dst = route.get("dst", "")
        if dst == "default":
            continue
        try:
            net = ipaddress.ip_network(dst, strict=False)
        except ValueError:
            continue
        if not net.overlaps(BENCHMARK_NET):
            continue
        mine = (route.get("type") == "unreachable" and dst == str(BENCHMARK_NET)
                and route.get("protocol") == PROTO and "table" not in route)
        (ours if mine else others).append(route)
    return ours, others


def describe(route: dict) -> str:
    words = [route.get("type", ""), route.get("dst", "")]
    for key in ("gateway", "dev", "table", "protocol"):
        if key in route:
            words += [{"gateway": "via"}.get(key, key), str(route[key])]
    return " ".join(w for w in words if w and w != "unicast")


def unreachable_now() -> bool:
    """Does the kernel find no way out for the probe address from here?"""
    answer = _ip("route", "get", PROBE)
    return answer.returncode != 0 or answer.stdout.startswith(("unreachable", "blackhole",
                                                               "prohibit"))


class Hold:
    """A lab's share of the route: made by hold(), given back by release()."""

    def __init__(self, fd: int) -> None:
        self._fd: int | None = fd

    def release(self) -> None:
        """Give back this lab's share; the last one out deletes the route."""
        if self._fd is None:
            return
        os.close(self._fd)   # the shared lock goes with the descriptor
        self._fd = None
        remove_if_unused()


def hold() -> Hold:
    """Make the range unreachable from here (if no other lab has) and keep it so until
    release(). RouteError, with nothing left behind, when the machine routes part of
    the range already or the kernel still routes the probe address elsewhere."""
    fd = os.open(_lock_file(), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        ours, others = routes()
        if others:
            raise RouteError(
                f"this machine's network already routes part of the lab's range "
                f"{BENCHMARK_NET}: {'; '.join(describe(r) for r in others)}. The lab will "
                "not replace it (a VPN's or a proxy's fake-IP range uses these addresses "
                "too); run the lab where that route is not, or remove it first")
        if not ours:
            made = _ip("route", "add", "unreachable", str(BENCHMARK_NET), "proto", PROTO)
            if made.returncode != 0 and "File exists" not in made.stderr:
                raise RouteError(f"ip route add unreachable {BENCHMARK_NET} proto {PROTO} "
                                 f"failed: {made.stderr.strip()}")
        if not unreachable_now():
            raise RouteError(f"`ip route get {PROBE}` still finds a way out with the "
                             f"unreachable route for {BENCHMARK_NET} in place (a policy rule "
                             "or another table?): the lab will not start where its "
                             "addresses lead off the machine")
    except BaseException:
        os.close(fd)
        remove_if_unused()
        raise
    return Hold(fd)


def remove_if_unused() -> bool:
    """Delete the lab's route when no running lab holds it (the last one out, or `lab
    clean` after a `kill -9`). True when a route was deleted."""
    try:
        fd = os.open(_lock_file(), os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        return False   # no lab ever ran from here (or not root: nothing it could delete)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False   # another lab still runs from this network
        ours, _ = routes()
        for _route in ours:
            _ip("route", "del", "unreachable", str(BENCHMARK_NET), "proto", PROTO)
        return bool(ours)
    finally:
        os.close(fd)
