"""app/watchers/metrics_exit.py: a dead worker's metric files folded into one, the totals kept."""

import os
import subprocess
import sys

from prometheus_client import CollectorRegistry, generate_latest, multiprocess

from app.watchers import metrics_exit

# A worker: counters and a histogram of its own, in the multiprocess folder.
WORKER = """
import sys
from prometheus_client import Counter, Histogram
c = Counter("reqs", "requests", ["route"])
h = Histogram("lat", "latency", ["route"])
for i in range(int(sys.argv[1])):
    c.labels(route="/a" if i % 2 else "/b").inc()
    h.labels(route="/a").observe(0.01 * i)
"""


def scrape(folder) -> list[str]:
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, str(folder))
    return sorted(line for line in generate_latest(registry).decode().splitlines()
                  if not line.startswith("#"))


def test_three_dead_workers_fold_into_one_file_a_type_with_the_same_scrape(tmp_path):
    pids = []
    for n in (10, 20, 30):
        proc = subprocess.Popen([sys.executable, "-c", WORKER, str(n)],
                                env={**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)})
        assert proc.wait() == 0
        pids.append(proc.pid)
    before = scrape(tmp_path)
    assert 'reqs_total{route="/a"} 30.0' in before  # 5 + 10 + 15
    for pid in pids:
        metrics_exit.fold_dead_worker(pid, tmp_path)
    assert sorted(p.name for p in tmp_path.glob("*.db")) == ["counter_archive.db",
                                                             "histogram_archive.db"]
    assert scrape(tmp_path) == before


def test_a_worker_that_wrote_nothing_and_no_folder_are_no_error(tmp_path, monkeypatch):
    metrics_exit.fold_dead_worker(999_999_999, tmp_path)
    assert list(tmp_path.glob("*.db")) == []
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    metrics_exit.fold_dead_worker(999_999_999)  # metrics off: nothing to fold
