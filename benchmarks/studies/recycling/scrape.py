"""The metrics part: the multiprocess folder's files, a scrape's time, and the request
count it gives, held to what the load was answered."""

from __future__ import annotations

import http.client
import re
import statistics
import time
from pathlib import Path

SCRAPES = 20  # timed one after another; the median is the figure, the max beside it
# the load's route only: sign-in, health checks and the scrapes themselves are counted too
COUNTER = re.compile(r'^chat_http_requests_total\{([^}]*)\} ([0-9.e+]+)$', re.M)
LOAD_ROUTE = 'route="/users/me"'


def scrape(port: int) -> tuple[float, str]:
    """(ms, body) of one GET /metrics on a connection of its own, as Prometheus's."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        started = time.perf_counter()
        conn.request("GET", "/metrics")
        response = conn.getresponse()
        body = response.read().decode()
        ms = 1000 * (time.perf_counter() - started)
    finally:
        conn.close()
    if response.status != 200:
        raise RuntimeError(f"/metrics answered {response.status}: {body[:200]}")
    return ms, body


def counted(body: str) -> float:
    """The load's requests the scrape counts (each series of its route)."""
    return sum(float(v) for labels, v in COUNTER.findall(body) if LOAD_ROUTE in labels)


def of_the_dead(files: list[str], alive: set[int]) -> int:
    """Files named after a process that is gone (TYPE_PID.db; not an archive's)."""
    pids = [f.removesuffix(".db").rsplit("_", 1)[-1] for f in files]
    return sum(1 for pid in pids if pid.isdigit() and int(pid) not in alive)


def measure(port: int, folder: Path, alive: set[int]) -> dict:
    """Files in the folder (those of workers no longer `alive` apart), then SCRAPES
    scrapes: median and max ms, the count seen last."""
    from app.watchers import metrics_exit

    # under the fold's lock (shared): a worker that exits now is folded before or after
    with metrics_exit.locked(folder, exclusive=False):
        files = sorted(p.name for p in folder.glob("*.db"))
        size = sum((folder / f).stat().st_size for f in files)
    times, body = [], ""
    for _ in range(SCRAPES):
        ms, body = scrape(port)
        times.append(ms)
    return {"files": len(files), "dead_files": of_the_dead(files, alive),
            "bytes": size,
            "scrape_ms_median": round(statistics.median(times), 2),
            "scrape_ms_max": round(max(times), 2), "counted": counted(body)}


def collect_ms(folder: Path, times: int = 5) -> float:
    """Median ms of what /metrics does in multiprocess mode (app/watchers/metrics.py exposition):
    a fresh registry over the folder's files, rendered, in this process."""
    from prometheus_client import CollectorRegistry, generate_latest, multiprocess

    out = []
    for _ in range(times):
        started = time.perf_counter()
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry, path=str(folder))
        generate_latest(registry)
        out.append(1000 * (time.perf_counter() - started))
    return round(statistics.median(out), 2)


def growth(sample: Path, counts: list[int], scratch: Path) -> list[dict]:
    """The scrape against the files of K exited workers: for each K, a folder with K
    copies of one real worker's counter and histogram files (`sample`'s, from a run of
    the study: a worker's own, or a fold's archive, which holds the same series) under
    new pids, timed as is, then after folding them all
    (app/watchers/metrics_exit.py), timed again."""
    from app.watchers import metrics_exit

    kinds = [k for k in ("counter", "histogram") if list(sample.glob(f"{k}_*.db"))]
    sources = {k: sorted(sample.glob(f"{k}_*.db"))[0] for k in kinds}  # a worker's or archive
    rows = []
    for k in counts:
        folder = scratch / f"files-{k}"
        folder.mkdir()
        for pid in range(1, k + 1):
            for kind, source in sources.items():
                (folder / f"{kind}_{pid}.db").write_bytes(source.read_bytes())
        before = collect_ms(folder)
        for pid in range(1, k + 1):
            metrics_exit.fold_dead_worker(pid, folder)
        rows.append({"exited_workers": k, "files": 2 * k, "scrape_ms": before,
                     "folded_files": len(list(folder.glob("*.db"))),
                     "folded_scrape_ms": collect_ms(folder)})
    return rows
