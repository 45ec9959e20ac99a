"""An open-model HTTP load: a request every 1/rate s, each timed from its intended start.

Threads share one schedule: each takes the next slot, waits for its time, and sends it on
a keep-alive connection of its own (http.client), opening a new one after an error. When
every thread is held up (a worker restarting), the slots they take late count their wait:
the latency is the time from the slot, not from the send (coordinated omission avoided, as
benchmarks/arrivals.py does for Locust's open model). No retries: a request that fails is
counted by kind, as a client that does not retry sees it.
"""

from __future__ import annotations

import http.client
import threading
import time
from dataclasses import dataclass

TIMEOUT_S = 10.0  # a request held longer is a timeout, not a figure


@dataclass(frozen=True)
class Outcome:
    intended: float  # s since the load started
    latency_ms: float  # from the intended start to the answer (or the error)
    kind: str  # "ok", "5xx", "4xx", "reset" (closed or reset), "refused", "timeout"


def classify(error: Exception) -> str:
    if isinstance(error, TimeoutError):
        return "timeout"
    if isinstance(error, ConnectionRefusedError):
        return "refused"
    return "reset"  # RemoteDisconnected, ConnectionResetError, BrokenPipeError, ...


class Schedule:
    """Slot i at i/rate s after start, until `seconds`: handed out once each."""

    def __init__(self, rate: float, seconds: float, start: float):
        self.rate, self.total = rate, int(rate * seconds)
        self.next, self.lock = 0, threading.Lock()
        self.start = start

    def take(self) -> float | None:
        with self.lock:
            if self.next >= self.total:
                return None
            slot, self.next = self.next, self.next + 1
        return slot / self.rate


def send(conn: http.client.HTTPConnection, path: str, headers: dict) -> str:
    conn.request("GET", path, headers=headers)
    response = conn.getresponse()
    response.read()
    return "ok" if response.status < 400 else f"{response.status // 100}xx"


def sender(schedule: Schedule, port: int, path: str, headers: dict, out: list) -> None:
    conn = None
    while (intended := schedule.take()) is not None:
        delay = schedule.start + intended - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        try:
            conn = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT_S)
            kind = send(conn, path, headers)
        except (OSError, http.client.HTTPException) as e:
            kind = classify(e)
            conn.close()
            conn = None
        done = time.perf_counter() - schedule.start
        out.append(Outcome(intended, 1000 * (done - intended), kind))
    if conn is not None:
        conn.close()


def run(port: int, path: str, token: str, rate: float, seconds: float, threads: int,
        start: float) -> list[Outcome]:
    """Every request's outcome, by slot; slot 0 at `start` (time.perf_counter())."""
    schedule, out = Schedule(rate, seconds, start), []
    headers = {"Authorization": f"Bearer {token}"}
    workers = [threading.Thread(target=sender, args=(schedule, port, path, headers, out),
                                daemon=True) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:  # each ends by itself: its last slot, then at most TIMEOUT_S
        w.join()
    return sorted(out, key=lambda o: o.intended)
