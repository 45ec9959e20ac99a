"""A recycled worker's metric files folded into one: prometheus_client's multiprocess
folder stays the size of the live workers, whatever `max_requests` does.

In multiprocess mode every worker process writes its own files (`counter_PID.db`,
`histogram_PID.db`), and a scrape reads every file in the folder. prometheus_client's
documented `child_exit` hook, `multiprocess.mark_process_dead(pid)`, removes only a dead
worker's live-gauge files; its counters and histograms must stay, or the totals would go
down. So with `max_requests` the folder grows by a file or two a restart and each scrape
reads them all (prometheus/client_python#275, #367: scrapes of many seconds). Here, in
gunicorn's master as each worker exits, the dead worker's values are added into one
`TYPE_archive.db` per type and its files deleted: the totals a scrape gives are the same,
the files are not piling up (lab 17 measures both: benchmarks/studies/recycling).

The fold and a scrape must not interleave (a scrape between the two steps would count
the worker twice, or not at all, and Prometheus reads a counter that goes down as a
reset): both hold LOCK_FILE, the fold exclusively, a scrape shared (app/watchers/metrics.py).

In gunicorn's config (gunicorn/today.conf.py does it when metrics are on):

    def child_exit(server, worker):
        metrics_exit.fold_dead_worker(worker.pid)
"""

from __future__ import annotations

import collections
import contextlib
import fcntl
import os
from pathlib import Path

FOLDED = ("counter", "histogram", "summary")  # summed across processes by a scrape
LOCK_FILE = "folding.lock"  # not *.db: the collector reads only those


def folder() -> Path | None:
    value = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    return Path(value) if value else None


@contextlib.contextmanager
def locked(path: Path, exclusive: bool):
    """The folder's lock: exclusive for a fold, shared for a scrape."""
    with open(path / LOCK_FILE, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def values(path: Path) -> dict[str, float]:
    """{key: value} of one file, with keys as prometheus_client writes them."""
    from prometheus_client.mmap_dict import MmapedDict

    return {key: value for key, value, _ts, _pos in MmapedDict.read_all_values_from_file(str(path))}


def fold_file(dead: Path, archive: Path) -> None:
    """archive := archive + dead, key by key, written beside and renamed over it."""
    from prometheus_client.mmap_dict import MmapedDict

    total = collections.Counter(values(archive)) if archive.exists() else collections.Counter()
    for key, value in values(dead).items():
        total[key] += value
    staging = archive.with_suffix(".staging")  # not *.db: no scrape reads it half-written
    staging.unlink(missing_ok=True)
    out = MmapedDict(str(staging))
    try:
        for key, value in total.items():
            out.write_value(key, value, 0.0)
    finally:
        out.close()
    os.replace(staging, archive)
    dead.unlink()


def fold_dead_worker(pid: int, path: Path | None = None) -> None:
    """mark_process_dead(pid) (its live gauges), then its counters, histograms and
    summaries added into TYPE_archive.db and its files deleted."""
    from prometheus_client import multiprocess

    path = path or folder()
    if path is None:
        return
    multiprocess.mark_process_dead(pid, str(path))
    with locked(path, exclusive=True):
        for kind in FOLDED:
            dead = path / f"{kind}_{pid}.db"
            if dead.exists():
                fold_file(dead, path / f"{kind}_archive.db")
