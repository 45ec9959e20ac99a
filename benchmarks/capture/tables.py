"""What each sampler row counts: connection classes, components, a table per host.

The middle layer of the sampler (benchmarks/capture/sampler.py): the command
line's specs parsed (`--class`, `--host`, `--proc`), the CSV's `columns`, a
`Component` (CPU and RSS of process trees between two samples) and a `Table`
(one namespace's socket table, and which of its counts go to which class),
over the kernel counters of benchmarks/capture/kernel.py.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Mapping

from benchmarks.capture.kernel import (
    BACKENDS,
    CLK_TCK,
    TCP_ESTABLISHED,
    TCP_TIME_WAIT,
    DiagCounter,
    SsCounter,
    in_netns,
    read_netstat,
    read_sockstat,
)


class Component:
    """CPU and RSS of the trees under some root PIDs, between two samples.

    CPU of a tree over an interval = for each member, growth of its own time
    and of its reaped children's time (a process new since the last sample
    counts from zero), less the last-seen total of every member that vanished
    while its parent stayed in the tree: the parent reaped it, so its whole
    time just moved into the parent's children time. Zombies stay members
    until reaped, so nothing is counted twice. A process reparented out of the
    tree stops counting; one reaped by a parent that ignores SIGCHLD loses its
    last interval.
    """

    def __init__(self, name: str, roots: Iterable[int], descendants: bool = True) -> None:
        self.name = name
        self.roots = list(dict.fromkeys(roots))
        self.descendants = descendants
        self._root_start: dict[int, int] = {}
        self._prev: dict[tuple[int, int], tuple[int, int, tuple[int, int] | None]] | None = None

    def members(self, stats: Mapping, children: Mapping[int, list[int]]) -> list[int]:
        out, todo, seen = [], [], set()
        for root in self.roots:
            st = stats.get(root)
            if st is None:
                if self._prev is None:
                    self._root_start[root] = -1   # not running at the start: never adopt the PID
                continue
            if self._root_start.setdefault(root, st[1]) != st[1]:
                continue   # the PID was reused: that is not our process
            todo.append(root)
        while todo:
            pid = todo.pop()
            if pid in seen:
                continue
            seen.add(pid)
            out.append(pid)
            if self.descendants:
                todo.extend(children.get(pid, ()))
        return out

    def update(self, stats: Mapping, children: Mapping[int, list[int]],
               dt: float | None) -> tuple[float | None, float | None]:
        """(CPU % of one core since the last update, RSS MiB); None when nothing runs."""
        cur: dict[tuple[int, int], tuple[int, int, tuple[int, int] | None]] = {}
        ticks, rss = 0, 0
        prev = self._prev
        for pid in self.members(stats, children):
            ppid, start, own, reaped, mem = stats[pid]
            parent = stats.get(ppid)
            cur[(pid, start)] = (own, reaped, (ppid, parent[1]) if parent else None)
            rss += mem
            if prev is not None:
                before = prev.get((pid, start))
                ticks += own + reaped - (before[0] + before[1] if before else 0)
        if prev is not None:
            for key, (own, reaped, parent) in prev.items():
                if key not in cur and parent in cur:
                    ticks -= own + reaped
        self._prev = cur
        if not cur:
            return None, None
        cpu = None if prev is None or not dt else max(0, ticks) / CLK_TCK / dt * 100.0
        return cpu, rss / 1048576.0


# --- the command line's specs, the CSV's columns, a table per host -------------

_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")


def _split(spec: str, what: str) -> tuple[str, int]:
    name, sep, value = spec.partition("=")
    name = name.strip()
    if not sep or not _NAME.match(name):
        raise ValueError(f"{what} {spec!r}: expected NAME=NUMBER, NAME a letter then "
                         "letters, digits or _")
    try:
        number = int(value)
    except ValueError:
        raise ValueError(f"{what} {spec!r}: {value!r} is not a number") from None
    return name, number


def parse_classes(specs: Iterable[str]) -> dict[str, int]:
    """["redis=6379", "front=8000"] -> {"redis": 6379, "front": 8000} (order kept)."""
    classes: dict[str, int] = {}
    for spec in specs:
        name, port = _split(spec, "--class")
        if not 0 < port < 65536:
            raise ValueError(f"--class {spec!r}: port out of range")
        if name in classes:
            raise ValueError(f"--class {name} given twice")
        if name == "total":
            raise ValueError("--class total: the name is taken by tw_total/estab_total")
        classes[name] = port
    return classes


_SIDE = r"([A-Za-z][A-Za-z0-9_]*(?:\+[A-Za-z][A-Za-z0-9_]*)*)"
_PAIR = re.compile(rf"^{_SIDE},{_SIDE}:(\d+)$")


def side_hosts(side: str) -> list[str]:
    """A class's side, one host or several joined by `+`: "app+app2" -> ["app", "app2"]."""
    return side.split("+")


def parse_host_classes(specs: Iterable[str], hosts: Iterable[str]
                       ) -> dict[str, tuple[str, str, int]]:
    """["front=client,app:8000"] -> {"front": ("client", "app", 8000)}.

    A class between hosts: connections from host `client` to port 8000 of
    host `app` (FROM and TO among `hosts`). A side may be several hosts joined
    by `+` (`redis=app+app2,redis:6379`: from either app host).
    """
    hosts = list(hosts)
    classes: dict[str, tuple[str, str, int]] = {}
    for spec in specs:
        name, sep, value = spec.partition("=")
        pair = _PAIR.match(value.strip())
        if not sep or not _NAME.match(name.strip()) or not pair:
            raise ValueError(f"--class {spec!r}: with --host, expected NAME=FROM,TO:PORT "
                             "(e.g. front=client,app:8000)")
        name = name.strip()
        src, dst, port = pair.group(1), pair.group(2), int(pair.group(3))
        if not 0 < port < 65536:
            raise ValueError(f"--class {spec!r}: port out of range")
        for host in side_hosts(src) + side_hosts(dst):
            if host not in hosts:
                raise ValueError(f"--class {spec!r}: no --host {host} (hosts: "
                                 f"{', '.join(hosts) or 'none'})")
        if set(side_hosts(src)) & set(side_hosts(dst)):
            raise ValueError(f"--class {spec!r}: FROM and TO share a host")
        if name in classes:
            raise ValueError(f"--class {name} given twice")
        if name == "total":
            raise ValueError("--class total: the name is taken by tw_total/estab_total")
        classes[name] = (src, dst, port)
    return classes


def parse_hosts(specs: Iterable[str]) -> dict[str, str]:
    """["client=ftl-12-4-client"] -> {"client": "ftl-12-4-client"}: host name -> namespace."""
    hosts: dict[str, str] = {}
    for spec in specs:
        name, sep, netns = (part.strip() for part in spec.partition("="))
        if not sep or not _NAME.match(name) or not netns or "/" in netns:
            raise ValueError(f"--host {spec!r}: expected NAME=NETNS, NETNS a name from "
                             "`ip netns list`")
        if name in hosts:
            raise ValueError(f"--host {name} given twice")
        hosts[name] = netns
    return hosts


def parse_procs(specs: Iterable[str]) -> dict[str, list[int]]:
    """["app=120", "locust=300", "locust=301"] -> {"app": [120], "locust": [300, 301]}."""
    procs: dict[str, list[int]] = {}
    for spec in specs:
        name, pid = _split(spec, "--proc")
        if pid <= 0:
            raise ValueError(f"--proc {spec!r}: not a PID")
        if name == "sampler":
            raise ValueError("--proc sampler: the sampler adds itself under that name")
        procs.setdefault(name, []).append(pid)
    return procs


# Kernel counters read on each host (its namespace's TcpExt, /proc/net/netstat), as they
# stand (cumulative since the namespace was made): column stem -> the kernel's name.
# Only with hosts: on the machine they would count every other program's sockets too.
KERNEL_COUNTERS = {
    "tw_overflow": "TCPTimeWaitOverflow",  # TIME_WAIT not kept: tcp_max_tw_buckets reached
    "listen_overflows": "ListenOverflows",  # a connection a full accept queue turned away
    "listen_drops": "ListenDrops",  # every drop at a listener, the overflows included
}


def columns(classes: Iterable[str], procs: Iterable[str], hosts: Iterable[str] = ()) -> list[str]:
    """The CSV header for these class, component and host names (`sampler`'s CPU, then
    each host's kernel counters, come last)."""
    hosts = list(hosts)
    cols = ["ts", "elapsed_s", "tw_total", "estab_total"]
    for name in hosts:
        cols += [f"tw_total_{name}", f"estab_total_{name}"]
    for name in classes:
        cols += [f"tw_{name}", f"tw_{name}_client", f"tw_{name}_server", f"estab_{name}"]
    for name in [*procs, "sampler"]:
        cols += [f"cpu_{name}", f"rss_mb_{name}"]
    for name in hosts:
        cols += [f"{stem}_{name}" for stem in KERNEL_COUNTERS]
    if len(set(cols)) != len(cols):
        raise ValueError(f"class/component names give the same column twice: {cols}")
    return cols


class Table:
    """One network namespace's socket table, and which of its counts go to which class.

    Each key (a port, and in host mode the address at the other end) feeds
    one class: from the connecting side (`client`: TIME_WAIT held there, and
    ESTABLISHED, each connection once), from the listening side (`server`:
    TIME_WAIT held there), or, in one namespace, `both`.
    """

    def __init__(self, host: str | None, netns: str | None, backend: str) -> None:
        self.host, self.netns, self.backend = host, netns, backend
        self.counter: DiagCounter | SsCounter = BACKENDS[backend](netns)
        self.ports: list[int] = []
        self.peers: list[str] | None = [] if netns else None
        self.uses: list[tuple[int, str]] = []
        self._split = False
        self._sockstat = "/proc/thread-self/net/sockstat" if netns else "/proc/net/sockstat"
        self._netstat = "/proc/thread-self/net/netstat" if netns else "/proc/net/netstat"

    def add(self, port: int, peer: str | None, cls: int, side: str) -> None:
        self.ports.append(port)
        if self.peers is not None:
            self.peers.append(peer)
        self.uses.append((cls, side))

    def close(self) -> None:
        self.counter.close()

    def time_wait(self) -> int:
        """TIME_WAIT of the namespace, from its /proc/net/sockstat."""
        with in_netns(self.netns):
            return read_sockstat(self._sockstat)["tw"]

    def kernel_counters(self) -> list[int]:
        """KERNEL_COUNTERS of the namespace, in their order."""
        with in_netns(self.netns):
            found = read_netstat(self._netstat)
        return [found.get(name, 0) for name in KERNEL_COUNTERS.values()]

    def count(self) -> dict[int, tuple[int, list[int], list[int]]]:
        """ESTABLISHED (and TIME_WAIT if there are keys) by key, in one dump or two.

        One dump walks the kernel's table once. But when both states are
        plentiful their records interleave so finely that the counter has to
        walk them one by one; then a dump per state is cheaper. The last
        sample's counts decide.
        """
        try:
            if not self.ports:
                return self.counter.count(self.ports, (TCP_ESTABLISHED,), self.peers)
            if not self._split:
                counts = self.counter.count(self.ports, (TCP_ESTABLISHED, TCP_TIME_WAIT),
                                            self.peers)
            else:
                counts = {**self.counter.count(self.ports, (TCP_ESTABLISHED,), self.peers),
                          **self.counter.count(self.ports, (TCP_TIME_WAIT,), self.peers)}
        except OSError as e:
            if self.backend != "netlink":
                raise
            where = f" (host {self.host})" if self.host else ""
            print(f"sampler: netlink sock_diag failed{where} ({e}); falling back to ss",
                  file=sys.stderr)
            self.backend, self.counter = "ss", SsCounter(self.netns)
            return self.count()
        few, many = sorted((counts[TCP_ESTABLISHED][0], counts[TCP_TIME_WAIT][0]))
        self._split = self.backend == "netlink" and few > 500 and few * 8 > many
        return counts


