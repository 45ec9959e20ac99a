"""The app servers' CPU by thread over the profiled window: what py-spy cannot see.

py-spy reads Python stacks, so a thread with no Python frame is never in its samples:
granian's Rust runtime (`tokio-rt-worker`), which parses HTTP and reads and writes
the sockets, costs CPU that the sampler counts and the buckets cannot place. `window`
reads every thread of the servers' process trees (/proc/PID/task/TID: `comm`, and
`schedstat`'s CPU time in ns, the scheduler's own count) as the measured Locust run
starts and as it ends (the window py-spy records), and writes `threads.json`: CPU
seconds by thread name. `native_share` is the share of the threads with no Python frame
(NATIVE) in it, which metrics.json keeps as `native_cpu_share` and
benchmarks/profile/buckets.py's `per_request` shows as a row of its own, the Python
buckets dividing only the rest.

Lab 15 first measured it by hand, over whole runs (9.2-10.4% of granian's worker).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import psutil

from benchmarks.run import results

# thread names (/proc's comm, 15 characters at most) that run no Python: granian's Rust
NATIVE = ("tokio-rt-worker",)


def snapshot(pids: Sequence[int]) -> dict[tuple[int, int], tuple[str, int]]:
    """{(pid, tid): (thread name, CPU ns)} of every thread of each pid and its
    descendants; a process or thread that ends while read is left out."""
    procs: dict[int, None] = {}
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            root = psutil.Process(pid)
            procs.update(dict.fromkeys([root.pid, *(c.pid for c in root.children(True))]))
    out = {}
    for pid in procs:
        with contextlib.suppress(OSError):
            for task in Path(f"/proc/{pid}/task").iterdir():
                with contextlib.suppress(OSError, ValueError, IndexError):
                    ns = int((task / "schedstat").read_text().split()[0])
                    out[(pid, int(task.name))] = ((task / "comm").read_text().strip(), ns)
    return out


def by_name(before: dict, after: dict) -> dict[str, float]:
    """CPU seconds each thread name used between two snapshots (a thread that started
    between them counts from 0; one that ended is not counted)."""
    out: dict[str, float] = {}
    for key, (name, ns) in after.items():
        used = ns - before.get(key, (name, 0))[1]
        out[name] = out.get(name, 0.0) + used / 1e9
    return {name: round(s, 4) for name, s in sorted(out.items())}


def native_share(cpu_by_thread: dict[str, float] | None) -> float | None:
    """The NATIVE threads' share of the servers' CPU (None: not measured, or no CPU)."""
    total = sum((cpu_by_thread or {}).values())
    if not total:
        return None
    return round(sum(s for name, s in cpu_by_thread.items() if name in NATIVE) / total, 4)


def read(stage_dir: Path) -> dict[str, float] | None:
    path = Path(stage_dir) / results.THREADS_JSON
    return results.read_json(path)["cpu_s_by_thread"] if path.exists() else None


@contextmanager
def window(pids: Sequence[int], stage_dir: Path) -> Iterator[None]:
    """threads.json in `stage_dir`: the CPU by thread name of `pids`' trees while the
    block ran (not written when it raises: the stage has no figures then)."""
    before = snapshot(pids)
    yield
    results.write_json(Path(stage_dir) / results.THREADS_JSON,
                       {"cpu_s_by_thread": by_name(before, snapshot(pids)),
                        "native": list(NATIVE)})
