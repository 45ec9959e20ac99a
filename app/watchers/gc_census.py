"""A census of the process's objects, on demand: ``FLASK_GC_CENSUS_DIR``.

What a connected chat user costs, counted by type (issue 57): its Engine.IO and Socket.IO
sessions, its websocket, its greenlet, the queues and timers it holds. The capacity study
(`python -m benchmarks.studies.capacity --census`) asks the real-time server for a census
at rest and at the end of each step, and divides the difference by the users.

With GC_CENSUS_DIR set (a directory, as an absolute path: made if missing), a gevent
worker answers SIGUSR2 with a file there, ``census-<pid>-<n>.json`` (written whole, then
renamed):

    {"pid", "seconds", "collected", "tracked", "frozen_before", "frozen_after",
     "untracked", "greenlet_stacks", "rss_kib_before", "rss_kib_after",
     "types": {type name: [objects, bytes]}, "greenlets": {what it runs (state): count}}

Counted: every object the cyclic collector tracks (``gc.get_objects()``, frozen ones too:
see `census`), and the untracked objects they hold (strings, bytes, numbers, and the
tuples and dicts of those, which CPython leaves untracked), each once; bytes are each
object's shallow size (``sys.getsizeof``: the object itself, its own buffer, the
collector's header; not what it refers to, which is counted as objects of their own).
Beside them, the C stacks greenlets saved when they last switched out (greenlet's
``_stack_saved``). Not counted: the Python frames a greenlet waits in (CPython 3.11
keeps them in a data stack, not as objects), untracked objects that no tracked object
holds (held only by C code: gevent's loop, a C library's state), the buffers of C
libraries (libev's watchers, zlib's compression contexts), and the allocator's own
overhead and fragmentation: PSS (the study's figure) holds all of those.

The census walks every object: it pauses the process (its file says how long: about a
second a million objects counted here), and its lists and sets take memory while it
runs, which may stay in the heap after (rss_kib_before and after). Off by default.

SIGUSR2 because gunicorn's worker leaves it unused (its `init_signals` handles QUIT,
TERM, INT, WINCH, USR1 and ABRT, and sets USR2 back to its default, which ends the
process: a worker without this setting dies of it). Send it to the worker, not the
master, which re-executes itself on USR2. In another async mode than gevent the
setting is said in the log and not used.
"""

from __future__ import annotations

import gc
import json
import os
import signal
import sys
import time
from pathlib import Path

SIGNAL = signal.SIGUSR2
_installed: list = []  # the signal handler of this process, once
_taken = [0]  # censuses written by this process


def init_app(app) -> None:
    directory = app.config["GC_CENSUS_DIR"]
    if not directory or _installed:
        return
    mode = app.extensions["socketio"].async_mode
    if mode != "gevent":
        app.logger.warning("GC_CENSUS_DIR: for gevent mode only; this process runs %r, so "
                           "it writes no census", mode)
        return
    import gevent  # gevent mode: gevent is here, and its loop catches the signal

    # a handler of gevent's loop, run in a greenlet of its own (gevent.signal_handler):
    # it may write files, which Python's own signal handler must not do mid-bytecode
    _installed.append(gevent.signal_handler(SIGNAL, write, Path(directory)))


def write(directory: Path) -> Path:
    """A census of this process, as census-<pid>-<n>.json in `directory`."""
    found = census()
    _taken[0] += 1
    directory.mkdir(exist_ok=True)  # here: whoever gave the folder may have emptied it
    path = directory / f"census-{os.getpid()}-{_taken[0]}.json"
    partial = path.with_suffix(".part")
    partial.write_text(json.dumps(found) + "\n")
    partial.replace(path)  # a reader sees the whole file or none
    return path


def census() -> dict:
    """Every live object of the process, by type (module docstring)."""
    started, rss_before = time.perf_counter(), rss_kib()
    # what is garbage now is no user's: collected first (what is not frozen: with
    # GC_FREEZE_EVERY, what the process made since its last freeze, as app/gc_policy.py
    # does before each freeze)
    collected = gc.collect()
    enabled, frozen = gc.isenabled(), gc.get_freeze_count()
    # gc.get_objects() does not list frozen objects (gc.freeze() moved them to the
    # permanent generation): unfrozen, listed, frozen again, in one go. Nothing else runs
    # in between (no greenlet switch), and the collector is off, so that no collection
    # scans (or frees) what was frozen; what the collection above kept is frozen with
    # the rest, as the policy's next freeze would have done.
    gc.disable()
    gc.unfreeze()
    try:
        objects = gc.get_objects()
        counted = tally(objects)
        tracked = len(objects)
        del objects
    finally:
        if frozen:
            gc.freeze()
        if enabled:
            gc.enable()
    return {"pid": os.getpid(), "seconds": round(time.perf_counter() - started, 3),
            "collected": collected, "tracked": tracked, "frozen_before": frozen,
            "frozen_after": gc.get_freeze_count(), **counted,
            "rss_kib_before": rss_before, "rss_kib_after": rss_kib()}


def tally(objects: list) -> dict:
    """`objects` and the untracked objects they hold (each once), by type; the C stacks
    their greenlets saved."""
    kinds: dict[type, list[int]] = {}
    seen: set[int] = set()  # ids of the untracked objects counted: many hold the same one
    untracked, stacks, greenlets = 0, 0, {}
    greenlet = getattr(sys.modules.get("greenlet"), "greenlet", ())
    is_tracked, referents = gc.is_tracked, gc.get_referents

    def add(obj) -> None:
        entry = kinds.get(type(obj))
        if entry is None:
            entry = kinds[type(obj)] = [0, 0]
        entry[0] += 1
        entry[1] += sys.getsizeof(obj, 0)

    for obj in objects:
        add(obj)
        if greenlet and isinstance(obj, greenlet):
            stacks += getattr(obj, "_stack_saved", 0)
            label = greenlet_label(obj)
            greenlets[label] = greenlets.get(label, 0) + 1
        # a suspended greenlet says it is not tracked (greenlet's tp_is_gc: the collector
        # must not traverse its stack) but is listed among `objects`: counted there
        held = [r for r in referents(obj) if not is_tracked(r) and not isinstance(r, greenlet)]
        while held:  # an untracked tuple or dict holds untracked objects only
            item = held.pop()
            if id(item) not in seen:
                seen.add(id(item))
                add(item)
                untracked += 1
                held += [r for r in referents(item) if not is_tracked(r)]
    named: dict[str, list[int]] = {}  # types of one name (a class made twice) summed
    for kind, (count, size) in kinds.items():
        entry = named.setdefault(type_name(kind), [0, 0])
        entry[0] += count
        entry[1] += size
    return {"untracked": untracked, "greenlet_stacks": stacks, "types": named,
            "greenlets": greenlets}


def greenlet_label(g) -> str:
    """What a greenlet runs and its state: `_handle_and_close_when_done (alive)`; a dead
    one by its type (gevent drops its function when it ends)."""
    if g.dead:
        return f"{type_name(type(g))} (dead)"
    run = getattr(g, "_run", None) or getattr(g, "run", None)  # gevent's: _run
    if run is None:  # a thread's main greenlet runs no function of its own
        return "main greenlet (alive)"
    name = getattr(run, "__qualname__", None) or type_name(type(run))
    return f"{name} ({'alive' if g else 'not started'})"


def type_name(kind: type) -> str:
    """`dict`, `engineio.socket.Socket`: a builtin by its name, others with their module."""
    module = getattr(kind, "__module__", None)
    return kind.__qualname__ if module in (None, "builtins") else f"{module}.{kind.__qualname__}"


def rss_kib() -> int:
    """This process's resident memory now (/proc/self/statm)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024
