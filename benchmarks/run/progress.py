"""What `make lab` prints while it runs: where it is, how long is left, what it sees.

One line at a time, on a terminal and in CI alike: `[2/9 1:23 ~4:10 left] stage 2
connection-pool: seeding`, then while measuring, every few seconds, answered and
failed requests a second (Locust's history), TIME_WAIT per connection class and
Locust's CPU (the sampler's latest row), and the moment Nginx starts answering
502 because its local ports are gone.
"""

from __future__ import annotations

import csv
import time
from pathlib import Path

from benchmarks import checks as checks_mod
from benchmarks.analysis import metrics, nginx_errors
from benchmarks.capture import csvfile
from benchmarks.run import results
from benchmarks.run.cli import say

SETUP_S = 15.0  # starting servers, seeding, verifying, snapshots: a first guess per stage


def clock(seconds: float) -> str:
    minutes, secs = divmod(int(max(0, seconds)), 60)
    return f"{minutes}:{secs:02d}"


class Progress:
    """The run's progress over its stages; `phase` and `measuring` print a line."""

    def __init__(self, total: int, stage_seconds: float):
        self.total, self.guess = total, stage_seconds + SETUP_S
        self.started = time.monotonic()
        self.index, self.label, self.done = 0, "", []  # done: each finished stage's seconds
        self.stage_started = self.started

    def stage(self, index: int, label: str) -> None:
        if self.index:
            self.done.append(time.monotonic() - self.stage_started)
        self.index, self.label, self.stage_started = index, label, time.monotonic()

    def left(self) -> float:
        per_stage = sum(self.done) / len(self.done) if self.done else self.guess
        in_this = max(0.0, per_stage - (time.monotonic() - self.stage_started))
        return in_this + per_stage * (self.total - self.index)

    def head(self) -> str:
        elapsed = time.monotonic() - self.started
        return f"[{self.index}/{self.total} {clock(elapsed)} ~{clock(self.left())} left]"

    def phase(self, what: str) -> None:
        say(f"{self.head()} stage {self.label}: {what}")


class Watch:
    """Reads a measured run's files as they grow, for one progress line at a time."""

    def __init__(self, stage_dir: Path, front: bool):
        self.dir, self.front = stage_dir, front
        self.log_from, self.eaddrnotavail_seen = 0, False

    def rates(self) -> str:
        """Locust's answered and failed requests a second over its last history rows
        (differences of its running totals: its own Requests/s column lags)."""
        path = self.dir / results.LOCUST_HISTORY
        rows = []
        if path.exists():
            with open(path, newline="") as f:
                rows = [r for r in csv.DictReader(f) if r.get("Name") == "Aggregated"]
        if len(rows) < 2:
            return "Locust starting"
        first, last = rows[max(0, len(rows) - 6)], rows[-1]
        seconds = max(1, int(last["Timestamp"]) - int(first["Timestamp"]))
        failed = (int(last["Total Failure Count"]) - int(first["Total Failure Count"])) / seconds
        sent = (int(last["Total Request Count"]) - int(first["Total Request Count"])) / seconds
        return f"{sent - failed:.0f} answered/s, {failed:.0f} failed/s"

    def sockets(self) -> str:
        """TIME_WAIT per class and Locust's CPU, from the sampler's latest row."""
        row = csvfile.latest(self.dir / results.SAMPLER_CSV)
        if row is None:
            return "sampler starting"
        parts = [f"{cls} {row[f'tw_{cls}']}" for cls in metrics.CLASSES if f"tw_{cls}" in row]
        text = f"TIME_WAIT {row.get('tw_total', '?')} ({', '.join(parts)})"
        locust = [float(row[k]) for k in metrics.locust_columns(row)
                  if row[k] is not None and row[k] != ""]
        if len(locust) == 1:
            text += f", Locust CPU {locust[0]:.0f}%"
        elif locust:  # a client host each, the master's with its worker first
            text += f", Locust CPU {' / '.join(f'{v:.0f}%' for v in locust)}"
        return text

    def news(self) -> str | None:
        """The first `(99: Cannot assign requested address)` in Nginx's error log."""
        log = self.dir / results.NGINX_ERROR_LOG
        if not self.front or self.eaddrnotavail_seen or not log.exists():
            return None
        with open(log, "rb") as f:
            f.seek(self.log_from)
            chunk = f.read()
        self.log_from += len(chunk)
        if nginx_errors.EADDRNOTAVAIL.encode() in chunk:
            self.eaddrnotavail_seen = True
            return ("Nginx has no local port left toward the app: "
                    f"{nginx_errors.EADDRNOTAVAIL} in nginx/error.log, clients get 502")
        return None

    def line(self, seconds: float) -> str:
        return f"  {seconds:5.0f} s  {self.rates()} | {self.sockets()}"


def say_outcome(result: dict, checks: list[dict], stage_dir: Path | None = None) -> None:
    """A measured stage's answered requests/s by both counts, each check, and a warning
    when Locust was the bottleneck or the counts disagree."""
    if metrics.client_bound(result):
        say(f"  WARNING: Locust used {result['client_cpu_p95']:.0f}% of its core (p95): "
            "these numbers measure the client, not the server (fewer --users, or "
            "--client-hosts 2)")
    say(f"  answered {result['rps']} req/s (Locust), {result['rps_independent']} req/s "
        f"(the server's count)")
    hosts = metrics.client_cpu(stage_dir / results.SAMPLER_CSV) if stage_dir else {}
    if len(hosts) > 1:  # Locust's distributed mode: the busiest host is the figure above
        say("  Locust CPU per client host (mean, p95): " + "; ".join(
            f"{name.removeprefix('locust_') if name != 'locust' else 'client'} "
            f"{cpu['mean']}%, {cpu['p95']}%" for name, cpu in hosts.items()))
    if metrics.count_gap_too_big(result):
        say(f"  WARNING: the two counts differ by {result['rps_gap']:.1%}")
    for c in checks:
        mark = "pass" if c["passed"] else "FAIL"
        if c.get("left_out"):
            mark = f"{checks_mod.LEFT_OUT}, would {mark.lower()}"
        say(f"  [{mark}] {c['expected']}: measured {c['measured']}")
