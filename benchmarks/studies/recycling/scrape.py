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
    from app import metrics_exit

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
