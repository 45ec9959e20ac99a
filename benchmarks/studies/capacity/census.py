"""--census: a connected user's objects and bytes by type, from the real-time server's own
census (app/watchers/gc_census.py) at rest and at the end of each step.

The study runs the server with FLASK_GC_CENSUS_DIR set to a folder of the stage's own
(`census_env`: one a server from a Python root can write too), and asks each of its
worker processes for a census by a signal (`take`): each writes a file there, which the
study waits for, reads, and keeps in the repeat's folder. A step's row then holds
(the step's census - the census at rest) / the users connected (`per_user`), for the
types a user holds most of (TOP). Only a gunicorn gevent worker writes one (`refused`):
the signal would end any other process (its default action).

A census pauses the server (its `seconds`), after the step's figures are read; the one
at rest is taken before the memory at rest is read, so that what a census leaves in the
heap is in every reading's baseline. Still, a run with --census is not a headline run.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import psutil

from app.watchers.gc_census import SIGNAL
from benchmarks.run.cli import StageFailed
from benchmarks.servers import worker_class
from benchmarks.studies.capacity import servers

TOP = 10  # types a step's row keeps, by objects a user
TOP_GREENLETS = 5  # and kinds of greenlets, by greenlets a user
WAIT_S = 300  # a census of a million objects takes seconds; on a busy box, more


def refused(stage) -> str | None:
    """Why the study cannot take `stage`'s census (its real-time server is no gunicorn
    gevent worker), or None."""
    command = stage.socketio_server or stage.server
    found = worker_class(command)
    if found == "gevent" and "gunicorn" in command:
        return None
    return (f"stage {stage.key}: its real-time server runs {found or command[0]}; a census "
            f"is written by gunicorn's gevent worker only (stages 9, 10 and their twins)")


def census_env(inbox: Path) -> dict:
    """The real-time server's setting that makes it answer the signal with a census, in
    `inbox` (which it makes)."""
    return {"FLASK_GC_CENSUS_DIR": str(inbox.resolve())}


def workers(roots: list[int]) -> list[psutil.Process]:
    """The real-time server's worker processes, below its `roots` (servers.roles): those
    with no children (gunicorn's master forks them; a host's prefix may exec or wait)."""
    return [p for p in servers.tree(roots) if not _children(p)]


def _children(p: psutil.Process) -> list:
    try:
        return p.children()
    except psutil.NoSuchProcess:
        return []


def take(processes: list[psutil.Process], inbox: Path, keep: Path) -> dict:
    """A census of each of the real-time server's `processes` (`workers`), summed:
    {"seconds" (the longest), "tracked", "untracked", "greenlet_stacks",
    "types": {name: [objects, bytes]}, "greenlets": {label: count}}. Each writes its file
    in `inbox` (FLASK_GC_CENSUS_DIR); once read, the files move to `keep`."""
    for p in processes:
        p.send_signal(SIGNAL)
    deadline = time.monotonic() + WAIT_S
    while len(written := sorted(inbox.glob("*.json"))) < len(processes):
        if time.monotonic() > deadline:
            raise StageFailed(f"the real-time server wrote {len(written)} of "
                              f"{len(processes)} censuses in {WAIT_S} s (in {inbox})")
        time.sleep(0.2)
    found = [json.loads(path.read_text()) for path in written]
    keep.mkdir(parents=True, exist_ok=True)
    for path in written:
        path.rename(keep / path.name)
    return summed(found)


def summed(found: list[dict]) -> dict:
    total = {"seconds": max(c["seconds"] for c in found), "types": {}, "greenlets": {}}
    for name in ("tracked", "untracked", "greenlet_stacks"):
        total[name] = sum(c[name] for c in found)
    for c in found:
        for kind, (count, size) in c["types"].items():
            entry = total["types"].setdefault(kind, [0, 0])
            entry[0] += count
            entry[1] += size
        for label, count in c["greenlets"].items():
            total["greenlets"][label] = total["greenlets"].get(label, 0) + count
    return total


def totals(found: dict) -> tuple[int, int]:
    """Objects and bytes of a census, every type."""
    return (sum(count for count, _ in found["types"].values()),
            sum(size for _, size in found["types"].values()))


def per_user(rest: dict, step: dict, users: int) -> dict:
    """A step's row fields: objects and bytes a user, in all and for the TOP types by
    objects a user; greenlets a user by what they run; the census's pause."""
    if not users:
        return {}

    def share(now: float, then: float) -> float:
        return round((now - then) / users, 1)

    grown = {kind: [share(count, rest["types"].get(kind, [0, 0])[0]),
                    share(size, rest["types"].get(kind, [0, 0])[1])]
             for kind, (count, size) in step["types"].items()}
    top = sorted(grown.items(), key=lambda kv: -kv[1][0])[:TOP]
    greenlets = {label: share(count, rest["greenlets"].get(label, 0))
                 for label, count in step["greenlets"].items()}
    (objects, size), (objects_then, size_then) = totals(step), totals(rest)
    return {"census_objects_per_user": share(objects, objects_then),
            "census_bytes_per_user": share(size, size_then),
            "census_tracked_per_user": share(step["tracked"], rest["tracked"]),
            "census_stack_bytes_per_user": share(step["greenlet_stacks"],
                                                 rest["greenlet_stacks"]),
            "census_types": [[kind, *figures] for kind, figures in top],
            "census_greenlets": sorted(([label, n] for label, n in greenlets.items() if n > 0),
                                       key=lambda item: -item[1])[:TOP_GREENLETS],
            "census_seconds": step["seconds"]}
