"""What else ran on the lab's CPUs: the CPU a set of CPUs spent on processes that are not
the stage's, and the busiest such processes on a box at rest.

The lab pins each role to a CPU set (`taskset -c`; benchmarks/sandbox/hosts.py
Placement): the server roles on one, Locust and the sampler on another. /proc/stat
says how busy each CPU was; the stage's own processes (the sampler's components)
say how much of that was theirs. The rest went to somebody else: a neighbour
(another program, a second lab, a VM beside this one through `steal`), the thing
seed 000 measured. Busy = user + nice + system + irq + softirq + steal ticks: with
the kernel's tick accounting a tick spent in a softirq is charged to the process it
interrupted too, so the stage's own network work is not counted as foreign.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping

from benchmarks.capture.kernel import CLK_TCK, children_of, scan_processes
from benchmarks.sandbox.hosts import parse_cpus

# /proc/stat's cpuN fields after the name: user nice system idle iowait irq softirq steal
_BUSY_FIELDS = (0, 1, 2, 5, 6, 7)


def busy_ticks() -> dict[int, int]:
    """Each CPU's busy ticks since boot (the fields above), from /proc/stat."""
    out = {}
    with open("/proc/stat") as f:
        for line in f:
            if not line.startswith("cpu") or line.startswith("cpu "):
                continue
            name, *fields = line.split()
            out[int(name[3:])] = sum(int(fields[i]) for i in _BUSY_FIELDS if i < len(fields))
    return out


def parse_cpu_sets(specs: Iterable[str], components: Iterable[str]
                   ) -> dict[str, tuple[frozenset[int], tuple[str, ...]]]:
    """["server=1:app,redis"] -> {"server": ({1}, ("app", "redis"))}: a set's CPUs and the
    components (sampler --proc names, or `sampler`) that are the stage's there."""
    known = set(components) | {"sampler"}
    sets = {}
    for spec in specs:
        name, _, rest = spec.partition("=")
        cpus, _, owners = rest.partition(":")
        try:
            parsed = parse_cpus(cpus, available=range(os.cpu_count() or 1))
        except ValueError:
            parsed = frozenset()
        if not name.isidentifier() or not parsed:
            raise ValueError(f"--cpu-set {spec!r}: expected NAME=CPUS:COMPONENT,..., "
                             "e.g. server=1:app,redis")
        unknown = [c for c in owners.split(",") if c and c not in known]
        if unknown:
            raise ValueError(f"--cpu-set {spec!r}: no component {unknown[0]!r} "
                             f"(components: {', '.join(sorted(known))})")
        sets[name] = (parsed, tuple(c for c in owners.split(",") if c))
    return sets


class ForeignCpu:
    """Per interval, the share of each CPU set's capacity that went to processes not
    among its components: `foreign_cpu_NAME`, percent (100 = every CPU of the set busy
    with others)."""

    def __init__(self, sets: Mapping[str, tuple[frozenset[int], tuple[str, ...]]]):
        self.sets = dict(sets)
        self._last = busy_ticks()

    def columns(self) -> list[str]:
        return [f"foreign_cpu_{name}" for name in self.sets]

    def sample(self, own_cpu: Mapping[str, float | None], dt: float) -> list[float]:
        """`own_cpu`: each component's CPU over the same interval, % of one core."""
        now = busy_ticks()
        row = []
        for cpus, owners in self.sets.values():
            busy = sum(now.get(c, 0) - self._last.get(c, 0) for c in cpus) / CLK_TCK / dt * 100
            ours = sum(own_cpu.get(owner) or 0.0 for owner in owners)
            row.append(min(100.0, max(0.0, busy - ours) / len(cpus)))
        self._last = now
        return row


def at_rest(seconds: float, sets: Mapping[str, Iterable[int]], exclude: int | None = None,
            top: int = 5) -> dict:
    """The box at rest: how busy each CPU set was over `seconds` (% of the set) and the
    busiest processes anywhere, `exclude`'s tree (the lab itself: by default this
    process) left out."""
    exclude = os.getpid() if exclude is None else exclude
    before, ticks0, t0 = scan_processes(), busy_ticks(), time.monotonic()
    time.sleep(seconds)
    after, ticks1, dt = scan_processes(), busy_ticks(), time.monotonic() - t0
    ours = _tree(after, exclude)
    busiest = []
    for pid, (_, start, own, _, _) in after.items():
        old = before.get(pid)
        if pid in ours or old is None or old[1] != start or own <= old[2]:
            continue
        busiest.append({"pid": pid, "name": _name(pid),
                        "cpu_pct": round((own - old[2]) / CLK_TCK / dt * 100, 1)})
    busiest.sort(key=lambda p: -p["cpu_pct"])
    busy = {}
    for name, cpus in sets.items():
        cpus = frozenset(cpus)
        ticks = sum(ticks1.get(c, 0) - ticks0.get(c, 0) for c in cpus)
        busy[name] = round(ticks / CLK_TCK / dt * 100 / len(cpus), 1)
    return {"seconds": round(dt, 2), "busy_pct": busy, "busiest": busiest[:top]}


def _tree(stats: Mapping, root: int) -> set[int]:
    children = children_of(stats)
    found, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo.extend(children.get(pid, ()))
    return found


def _name(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            args = f.read().split(b"\0")
        text = " ".join(a.decode(errors="replace") for a in args if a)[:80]
        if text:
            return text
        with open(f"/proc/{pid}/comm") as f:
            return f"[{f.read().strip()}]"
    except OSError:
        return "?"
