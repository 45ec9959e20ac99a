"""The book's benchmark, beside the book's figures (seed 004: chapter 12).

    python -m benchmarks.lab book [--duration 30] [--stages 0,2]   # or: make book

The chapter loads one URL that SETs and then GETs a Redis key with
`siege -c 100 -b -t30s` (100 clients, no delay between requests) on a
one-core server: 413.78 trans/s with Flask's built-in server, 419.91 with
gunicorn `-w 4` (one core: more processes do not help), 683.52 with a Redis
connection pool. Here: `KeyValueUser` (`GET /kv/<key>`, the same SET + GET)
with 100 users and no think time, the server roles on one core and Locust on
the other (the lab's default CPU placement), stages 0, 1, 2, then 3 and 5,
for which the chapter gives no figure. `book.csv` in the run: stage, rps,
book_rps. Compare ratios, not absolutes: other hardware, other versions.
"""

from __future__ import annotations

import csv
import dataclasses
from pathlib import Path

from benchmarks import stages
from benchmarks.run import results
from benchmarks.run.options import OptionsError, RunOptions

BOOK_CSV = "book.csv"
USER_CLASS = "KeyValueUser"
CLIENTS = 100  # siege -c 100
# trans/s of `siege -c 100 -b -t30s` in the chapter (seed 004), by stage key
BOOK_RPS = {"0": 413.78, "1": 419.91, "2": 683.52}
STAGE_KEYS = ("0", "1", "2", "3", "5")


def book_stages(keys: str = ",".join(STAGE_KEYS)) -> tuple[stages.Stage, ...]:
    """The stages (`keys`: some of STAGE_KEYS, comma-separated), loaded with the book's
    request only. OptionsError names the ones it has."""
    chosen = [key.strip() for key in keys.split(",") if key.strip()]
    if not chosen or any(key not in STAGE_KEYS for key in chosen):
        raise OptionsError(f"lab book --stages {keys!r}: some of {', '.join(STAGE_KEYS)} "
                         f"(comma-separated), e.g. --stages 0,2 for the pool's step")
    return tuple(dataclasses.replace(stages.get(key), users=(USER_CLASS,))
                 for key in STAGE_KEYS if key in chosen)


def run_options(keys: str = ",".join(STAGE_KEYS), **given) -> RunOptions:
    """The lab's options for the book's set-up; `given`: duration, sandbox, CPUs, ..."""
    return RunOptions(stages=book_stages(keys), users=CLIENTS, spawn_rate=CLIENTS,
                      wait_max=0.0, **given)


def rows(run_dir: Path) -> list[dict]:
    """stage, rps, book_rps (None where the book gives none), for the stages that ran."""
    return [{"stage": stage.dirname,
             "rps": results.read_json(folder / results.METRICS_JSON)["rps"],
             "book_rps": BOOK_RPS.get(stage.key)}
            for stage, folder in results.measured_stages(run_dir)]


def write_csv(run_dir: Path) -> list[dict]:
    found = rows(run_dir)
    with open(run_dir / BOOK_CSV, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=("stage", "rps", "book_rps"))
        writer.writeheader()
        writer.writerows(found)
    return found


def table(found: list[dict]) -> str:
    """Ours beside the book's, each with its ratio to the stage before."""
    lines = [f"{'stage':<22} {'ours':>8} {'x prev':>7}   {'book':>8} {'x prev':>7}"]
    prev = None
    for row in found:
        ours, theirs = row["rps"], row["book_rps"]
        ratio = f"{ours / prev['rps']:.2f}" if prev and prev["rps"] and ours else "-"
        book_ratio = (f"{theirs / prev['book_rps']:.2f}"
                      if prev and theirs and prev["book_rps"] else "-")
        lines.append(f"{row['stage']:<22} {ours or 0:>8.1f} {ratio:>7}   "
                     f"{theirs if theirs else '-':>8} {book_ratio:>7}")
        prev = row
    return "\n".join(lines)
