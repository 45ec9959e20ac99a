"""Collections that pause the process, in its log: ``FLASK_GC_LOG_MS``.

CPython's cyclic garbage collector stops the whole process while it runs: every
greenlet, every coroutine, every thread (they wait for the GIL). A collection of the
oldest generation scans every object the collector tracks, and a connected chat user
holds a few hundred of them (its Engine.IO and Socket.IO sessions, its websocket's
buffers and state, its greenlet or coroutine or thread): with thousands of users, a
full collection takes hundreds of milliseconds, and every message on its way waits
for it (lab 16 measures it).

With GC_LOG_MS above 0 each collection that takes at least that long is written on
stderr (the server's log), one line each:

    gc: generation 2 took 755 ms, 1369468 objects tracked

and, first, one line with the Python that runs the server and the thresholds its
collector runs with (app/gc_policy.py's, else that Python's own):

    gc: CPython 3.14.8, thresholds (2000, 10, 10)

The capacity study (benchmarks/studies/capacity) sets it and reads these lines: the
Python of each row, the longest pause of each step. The time is the collection's own;
counting the objects afterwards (for the line) lengthens the pause a little more, a few
ms per 100,000 objects, only after a collection that was logged. 0, the default,
installs nothing.
"""

from __future__ import annotations

import gc
import platform
import sys
import time

LINE = "gc: generation {generation} took {ms:.0f} ms, {objects} objects tracked"
STARTED = "gc: {implementation} {version}, thresholds {thresholds}"
_installed: list = []  # the callback installed in this process, once


def init_app(app) -> None:
    threshold_ms = app.config["GC_LOG_MS"]
    if threshold_ms <= 0 or _installed:
        return
    print(STARTED.format(implementation=platform.python_implementation(),
                         version=platform.python_version(),
                         thresholds=tuple(app.config["GC_THRESHOLDS"] or gc.get_threshold())),
          file=sys.stderr, flush=True)
    started = [0.0]

    def timed(phase: str, info: dict) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
            return
        ms = (time.perf_counter() - started[0]) * 1000
        if ms >= threshold_ms:
            print(LINE.format(generation=info["generation"], ms=ms,
                              objects=len(gc.get_objects())), file=sys.stderr, flush=True)

    gc.callbacks.append(timed)
    _installed.append(timed)
