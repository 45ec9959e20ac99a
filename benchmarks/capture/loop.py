"""The sampling loop: a row of sockets and process trees per interval, into a CSV.

`Sampler` holds the tables (benchmarks/capture/tables.py) and components and
writes one flushed row per interval until stopped; `command` is the sampler's
command line for a stage (benchmarks/run/runner.py starts it).
"""

from __future__ import annotations

import csv
import os
import sys
import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

from benchmarks.capture.cpu_sets import ForeignCpu
from benchmarks.capture.kernel import (
    NETNS_DIR,
    TCP_ESTABLISHED,
    TCP_TIME_WAIT,
    children_of,
    host_addresses,
    scan_processes,
)
from benchmarks.capture.tables import Component, Table, columns, side_hosts


class Sampler:
    """Samples sockets and process trees; `run()` writes the CSV.

    One namespace (`hosts` None): `classes` is name -> port, counted in the
    network namespace the sampler runs in. Hosts: `hosts` is host name ->
    network namespace (its name under /run/netns) and `classes` is name ->
    (connecting host, listening host, port); each host's own socket table
    is counted, and a class counts only connections between its two hosts'
    addresses (found in their namespaces at the start). `procs`: name ->
    PID or PIDs (each with all its descendants). `cpu_sets`: name -> (CPUs, the
    components that are the stage's there), for `foreign_cpu_NAME` (cpu_sets.py).
    """

    def __init__(self, classes: Mapping[str, int | tuple[str, str, int]],
                 procs: Mapping[str, int | Iterable[int]],
                 out_path: str | os.PathLike, interval: float = 1.0,
                 backend: str = "netlink", hosts: Mapping[str, str] | None = None,
                 cpu_sets: Mapping | None = None) -> None:
        if interval <= 0:
            raise ValueError("interval must be > 0")
        self.classes = dict(classes)
        self.hosts = dict(hosts or {})
        if "sampler" in procs:
            raise ValueError("the sampler adds itself as component `sampler`")
        self.components = [Component(name, [pids] if isinstance(pids, int) else pids)
                           for name, pids in procs.items()]
        # itself and the children it has reaped (`ss`), not whatever else the
        # process that imported it runs
        self.components.append(Component("sampler", [os.getpid()], descendants=False))
        self.foreign = ForeignCpu(cpu_sets or {})
        self.columns = columns(self.classes, procs, self.hosts) + self.foreign.columns()
        self.out_path = Path(out_path)
        self.interval = float(interval)
        self.backend = backend
        self._tables = self._make_tables()
        self._t0 = self._last = 0.0

    def _make_tables(self) -> list[Table]:
        if not self.hosts:
            if not all(isinstance(port, int) for port in self.classes.values()):
                raise ValueError("classes by host pair need hosts")
            table = Table(None, None, self.backend)
            for i, port in enumerate(self.classes.values()):
                table.add(port, None, i, "both")
            return [table]
        for name, spec in self.classes.items():
            if isinstance(spec, int) or len(spec) != 3:
                raise ValueError(f"class {name}: with hosts, (FROM, TO, PORT), not {spec!r}")
            src, dst, _ = spec
            for host in side_hosts(src) + side_hosts(dst):
                if host not in self.hosts:
                    raise ValueError(f"class {name}: no host {host!r}")
            if set(side_hosts(src)) & set(side_hosts(dst)):
                raise ValueError(f"class {name}: FROM and TO share a host")
        addresses = {}
        for host, netns in self.hosts.items():
            if not os.path.exists(os.path.join(NETNS_DIR, netns)):
                raise ValueError(f"host {host}: no network namespace {netns!r} "
                                 "(see `ip netns list`)")
            addresses[host] = host_addresses(netns)
            if not addresses[host]:
                raise ValueError(f"host {host}: namespace {netns} has no IPv4 address "
                                 "besides loopback")
        tables = {host: Table(host, netns, self.backend) for host, netns in self.hosts.items()}
        for i, (src, dst, port) in enumerate(self.classes.values()):
            for a in side_hosts(src):
                for b in side_hosts(dst):
                    for peer in addresses[b]:
                        tables[a].add(port, peer, i, "client")
                    for peer in addresses[a]:
                        tables[b].add(port, peer, i, "server")
        return list(tables.values())

    def close(self) -> None:
        for table in self._tables:
            table.close()

    def namespaces_gone(self) -> list[str]:
        """Hosts whose namespace has been deleted (the lab is over: stop)."""
        return [h for h, ns in self.hosts.items()
                if not os.path.exists(os.path.join(NETNS_DIR, ns))]

    def prime(self) -> None:
        """Start the clock and the CPU baselines (the first row comes one interval later)."""
        self._t0 = self._last = time.monotonic()
        self._procs(None)
        self.foreign.sample({}, 1.0)  # its baseline

    def _procs(self, dt: float | None) -> list[tuple[float | None, float | None]]:
        stats = scan_processes()
        children = children_of(stats)
        return [c.update(stats, children, dt) for c in self.components]

    def sample(self) -> list:
        """One row, in `columns` order (call `prime()` first)."""
        now = time.monotonic()
        ts = time.time()
        n = len(self.classes)
        tw_client, tw_server, estab = [0] * n, [0] * n, [0] * n
        per_host = []
        for table in self._tables:
            tw_total = table.time_wait()
            counts = table.count()
            estab_total, _, estab_remote = counts[TCP_ESTABLISHED]
            _, tw_local, tw_remote = counts.get(TCP_TIME_WAIT, (0, [], []))
            per_host.append((tw_total, estab_total))
            for k, (cls, side) in enumerate(table.uses):
                if side != "server":
                    tw_client[cls] += tw_remote[k]
                    estab[cls] += estab_remote[k]
                if side != "client":
                    tw_server[cls] += tw_local[k]
        row: list = [f"{ts:.3f}", f"{now - self._t0:.3f}", sum(tw for tw, _ in per_host),
                     sum(es for _, es in per_host)]
        if self.hosts:
            for tw_total, estab_total in per_host:
                row += [tw_total, estab_total]
        for i in range(n):
            row += [tw_client[i] + tw_server[i], tw_client[i], tw_server[i], estab[i]]
        own = {}
        for component, (cpu, rss) in zip(self.components, self._procs(now - self._last),
                                         strict=True):
            own[component.name] = cpu
            row += ["" if cpu is None else f"{cpu:.1f}", "" if rss is None else f"{rss:.1f}"]
        if self.hosts:
            for table in self._tables:
                row += table.kernel_counters()
        row += [f"{v:.1f}" for v in self.foreign.sample(own, now - self._last)]
        self._last = now
        return row

    def run(self, stop_event=None, duration: float | None = None) -> int:
        """Write the CSV until `stop_event` is set or `duration` s passed. Returns rows written.

        `stop_event`: anything with `wait(timeout) -> bool` (a threading.Event).
        On stop, a last row is written if a quarter interval has passed since the
        previous one.
        """
        stop = stop_event if stop_event is not None else threading.Event()
        self.out_path.parent.mkdir(parents=True, exist_ok=True)
        rows = 0
        try:
            with open(self.out_path, "w", newline="") as f:
                out = csv.writer(f, lineterminator="\n")
                out.writerow(self.columns)
                f.flush()
                self.prime()
                end = None if duration is None else self._t0 + duration
                tick = self._t0 + self.interval
                while True:
                    wake = tick if end is None else min(tick, end)
                    stopped = stop.wait(max(0.0, wake - time.monotonic()))
                    gone = self.namespaces_gone()
                    if gone:   # counting them now would fail, or count a dying namespace
                        print(f"sampler: host {gone[0]}'s namespace is gone; stopping",
                              file=sys.stderr)
                        return rows
                    now = time.monotonic()
                    last = stopped or (end is not None and now >= end - 1e-3)
                    if not last or now - self._last >= 0.25 * self.interval:
                        out.writerow(self.sample())
                        f.flush()
                        rows += 1
                    if last:
                        return rows
                    tick += self.interval
                    while tick <= now:   # stay on the grid; skip ticks missed while busy
                        tick += self.interval
        finally:
            self.close()


def command(out: str | os.PathLike, classes: Mapping[str, int | tuple[str, str, int]],
            procs: Mapping[str, int | Iterable[int]], interval: float = 1.0,
            duration: float | None = None, netns: str | None = None,
            python: str = sys.executable, backend: str | None = None,
            hosts: Mapping[str, str] | None = None,
            cpu_sets: Mapping[str, tuple[str, Iterable[str]]] | None = None,
            begin_when: str | os.PathLike | None = None) -> list[str]:
    """The command line that runs the sampler; run it from the repo root.

    One namespace: `classes` name -> port, counted where it runs (in `netns`
    if given). Hosts: `hosts` name -> namespace and `classes` name ->
    (connecting host, listening host, port); run it in the root namespace.
    `cpu_sets`: name -> (CPUs as taskset writes them, the components running there).
    `begin_when`: a file whose making starts the count (sampler.py --begin-when).
    """
    cmd = ["ip", "netns", "exec", netns] if netns else []
    cmd += [python, "-m", "benchmarks.capture.sampler", "--out", str(out),
            "--interval", f"{interval:g}"]
    if duration is not None:
        cmd += ["--duration", f"{duration:g}"]
    if begin_when is not None:
        cmd += ["--begin-when", str(begin_when)]
    if backend:
        cmd += ["--backend", backend]
    for name, ns in (hosts or {}).items():
        cmd += ["--host", f"{name}={ns}"]
    for name, spec in classes.items():
        if isinstance(spec, int):
            cmd += ["--class", f"{name}={spec}"]
        else:
            src, dst, port = spec
            cmd += ["--class", f"{name}={src},{dst}:{port}"]
    for name, pids in procs.items():
        for pid in [pids] if isinstance(pids, int) else pids:
            cmd += ["--proc", f"{name}={pid}"]
    for name, (cpus, owners) in (cpu_sets or {}).items():
        cmd += ["--cpu-set", f"{name}={cpus}:{','.join(owners)}"]
    return cmd


