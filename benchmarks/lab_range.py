"""The lab's address range, and who may send to it: only the lab's own hosts.

The lab's hosts have addresses in 198.18.0.0/15 (RFC 2544's benchmarking
range) and exist only inside its network namespaces. From the machine's own
network that range goes out by the default route, to whoever answers outside,
so every tool of the project that takes a host refuses one in the range unless
it runs on a lab host (`python -m benchmarks.lab exec -- CMD`). While a lab
runs, the machine's network also has an unreachable route for the range
(benchmarks/sandbox/unreachable.py): tools that are not the project's (curl,
wrk, siege) fail at once too.

Standard library only: the locustfiles import it with either `benchmarks/` or the
repository root on the path.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import socket
import sys
from urllib.parse import urlparse

BENCHMARK_NET = ipaddress.ip_network("198.18.0.0/15")   # RFC 2544
NETNS_DIR = "/run/netns"  # where `ip netns add` bind-mounts a namespace
NS_PREFIX = "ftl-"  # every namespace the lab makes: `ftl-<pid>-<tag>-<role>`


def current_lab_namespace() -> str | None:
    """The lab namespace this process runs in (`lab exec`), or None on the machine's
    own network: /run/netns/<name> is a bind mount of the namespace's inode."""
    try:
        mine = os.stat("/proc/self/ns/net")
        names = os.listdir(NETNS_DIR)
    except OSError:
        return None
    for name in names:
        if not name.startswith(NS_PREFIX):
            continue
        try:
            st = os.stat(os.path.join(NETNS_DIR, name))
        except OSError:
            continue
        if (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino):
            return name
    return None


def lab_address_from_outside(hostname: str) -> str | None:
    """The address of `hostname` in the lab's range (198.18.0.0/15) when this process
    is not on a lab host, else None: from the machine's own network a request there
    would leave by the default route, to whoever answers outside."""
    try:
        infos = socket.getaddrinfo(hostname, None, proto=socket.IPPROTO_TCP)
    except (socket.gaierror, UnicodeError):
        return None  # resolves to nothing: the request fails by itself, with its own error
    for *_, sockaddr in infos:
        if ipaddress.ip_address(sockaddr[0].split("%")[0]) in BENCHMARK_NET:
            return sockaddr[0] if current_lab_namespace() is None else None
    return None


def outside_refusal(url: str, command: str) -> str | None:
    """Why `command` must not send requests to `url` from here (None: it may), with
    the `lab exec` line that runs it on a stage's client host instead."""
    address = lab_address_from_outside(urlparse(url).hostname or "")
    if address is None:
        return None
    return (f"{url}: {address} is in the lab's range {BENCHMARK_NET}, which exists only on "
            "the lab's hosts; from this machine's network the request would leave by its "
            "default route. Start a stage (python -m benchmarks.lab up 3) and run it on "
            f"its client host: python -m benchmarks.lab exec -- {command}")


# --- Locust: the project's locustfiles refuse before their first request ---------------

def guard_locust(events) -> None:
    """Refuse a host in the lab's range from outside the lab, in any locustfile that calls
    this: `--host` (or a user class's own host) as Locust starts, with exit 1 and one
    line; a host typed into the web UI's form as the test starts, before any user."""
    if getattr(events, "_lab_range_guard", False):
        return   # the locustfiles import each other: one guard is enough
    events._lab_range_guard = True
    events.init.add_listener(_refuse_at_init)
    events.test_start.add_listener(_refuse_at_start)


def _refusal(environment) -> str | None:
    classes = getattr(environment, "user_classes", None) or []
    for host in [environment.host, *(getattr(c, "host", None) for c in classes)]:
        if host:
            refusal = outside_refusal(host, "locust " + _argv_for(host))
            if refusal:
                return refusal
    return None


def _argv_for(host: str) -> str:
    """The locust command line as typed, with `host` as its --host."""
    argv = sys.argv[1:]
    return " ".join(argv) if host in " ".join(argv) else " ".join([*argv, "--host", host])


def _refuse_at_init(environment, **_kwargs) -> None:
    refusal = _refusal(environment)
    if refusal:
        raise SystemExit(f"locust: {refusal}")


def _refuse_at_start(environment, **_kwargs) -> None:
    refusal = _refusal(environment)
    if refusal:
        from locust.exception import StopTest  # here: hosts.py imports this module too

        logging.getLogger("locust.lab_range").error("locust: %s", refusal)
        environment.process_exit_code = 1
        raise StopTest(refusal)
