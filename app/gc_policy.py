"""The collector set for a long-lived server: ``FLASK_GC_FREEZE_EVERY``, ``FLASK_GC_THRESHOLDS``.

CPython's cyclic collector stops the whole process while it runs, and a collection of
the oldest generation scans every object it tracks: with thousands of chat users held,
hundreds of thousands of objects, hundreds of milliseconds (app/watchers/gc_log.py logs them,
lab 16 measures them). Those objects are not garbage: a user's sessions, websocket and
greenlets live as long as the user stays.

GC_FREEZE_EVERY (seconds, 0: off) moves every object the collector tracks into its
permanent generation (``gc.freeze()``, CPython's documented way to keep long-lived
objects out of every collection) once the server has started, and again every that many
seconds while it serves, from a thread of its own (a greenlet under gevent or eventlet,
which patch ``threading``). A collection then scans only what was made since the last
freeze: its pause is bounded by what the server makes in that many seconds, not by the
users it holds. Each freeze follows a full collection, which scans the same, so that no
garbage is frozen (without it, stage 10 froze a garbage cycle every few events and grew
with its traffic). The price: a cycle among frozen objects that becomes garbage later is
not collected until ``gc.unfreeze()``; the memory of the users who leave stays wherever
their objects form cycles (lab 16: what a server keeps once its users left).

GC_THRESHOLDS ("", the running Python's own: 700,10,10 on 3.11 to 3.13, 2000,10,10 on
3.14) are ``gc.set_threshold``'s three numbers: the net allocations that start a young
collection, and how many of each generation's collections start the next one.

Both act once a process, in the process that serves: the first app made sets them.
"""

from __future__ import annotations

import gc
import threading
import time

_started: list = []  # this process's policy, once


def thresholds(value) -> tuple[int, int, int] | None:
    """"A,B,C" (or a list of three) as gc.set_threshold's three whole numbers, A >= 1;
    None for "" (the running Python's own)."""
    if value in ("", None):
        return None
    parts = value.split(",") if isinstance(value, str) else value
    try:
        found = tuple(int(str(p).strip()) for p in parts)
        if len(found) != 3 or found[0] < 1 or min(found) < 0:
            raise ValueError
    except (TypeError, ValueError):
        raise ValueError(f"GC_THRESHOLDS (FLASK_GC_THRESHOLDS) must be three whole numbers "
                         f"such as 700,10,10 (CPython's own; the first at least 1), "
                         f"not {value!r}") from None
    return found


def init_app(app) -> None:
    if _started:
        return
    _started.append(True)
    if app.config["GC_THRESHOLDS"]:
        gc.set_threshold(*app.config["GC_THRESHOLDS"])
    every = app.config["GC_FREEZE_EVERY"]
    if every > 0:
        collect_then_freeze()  # the app and its libraries, as the server starts
        threading.Thread(target=_freeze_every, args=(every,), name="gc-freeze",
                         daemon=True).start()


def collect_then_freeze() -> None:
    # A cycle that is garbage but not collected yet when the freeze runs would never be
    # collected: the full collection first finds it. It scans only what is not frozen
    # (what the process made since the last freeze), so its pause stays that period's.
    gc.collect()
    gc.freeze()


def _freeze_every(seconds: float) -> None:
    while True:
        time.sleep(seconds)
        collect_then_freeze()
