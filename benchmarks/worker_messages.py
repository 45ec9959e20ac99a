"""What a Locust worker and its master share besides Locust's own stats: only messages.

A worker may run on another machine (DESIGN.md, "Load from other machines"): it
reads nothing from its master's disk and writes nothing the lab reads.

- Figures: each locustfile's own counts (chat.py's Socket.IO sessions, arrivals.py's
  schedule, latency_log.py's histograms) ride on every stats report a worker sends
  (`report_to_master`). They are running totals, so the master keeps each worker's
  latest (`worker_report`), adds them up (`merge`, or the figures' own `save`) and
  writes the file the lab reads, once, as the test stops.
  Before it writes it asks every worker to stop and report at once (`ftl_stop`):
  Locust's own last report, sent after `quit`, comes 0.5 s at most before the master
  stops listening, less than users may take to stop.
- Join: a worker sends its Locust version and a hash of the locustfiles (`ftl_join`);
  the master answers with its own and the seeded accounts of `--chat-users-file`, read
  on the master (`ftl_hello`). A worker of another version logs both and quits with
  exit code 1; its users wait for the accounts before their first request.

Standard library and Locust only: the locustfiles import it with either `benchmarks/`
or the repository root on the path.
"""

from __future__ import annotations

import hashlib
import json
import logging
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import gevent
import gevent.event
from locust import __version__ as LOCUST_VERSION
from locust.runners import STATE_STOPPED, MasterRunner, WorkerRunner

log = logging.getLogger("locust.ftl")
HERE = Path(__file__).resolve().parent
# what a worker runs of the lab's code: the same on both sides, or the load is another
LOCUSTFILES = ("chat.py", "chat_mix.py", "chat_socket.py", "arrivals.py", "lab_range.py",
               "worker_messages.py", "latency_log.py")
HELLO_WAIT = 30.0  # seconds a worker's users wait for the master's accounts
FINAL_WAIT = 10.0  # seconds the master waits for the workers' final figures, past stop_timeout


def code_version() -> str:
    """A short hash of the locustfiles a worker loads (git's commit would miss local edits)."""
    digest = hashlib.sha256()
    for name in LOCUSTFILES:
        path = HERE / name
        digest.update(name.encode() + (path.read_bytes() if path.exists() else b""))
    return digest.hexdigest()[:12]


def versions() -> dict:
    return {"locust": LOCUST_VERSION, "code": code_version()}


def describe(v: dict) -> str:
    return f"Locust {v['locust']}, locustfiles {v['code']}"


# --- figures ------------------------------------------------------------------------

@dataclass(frozen=True)
class Figures:
    """A locustfile's counts: `collect(environment)` gives this process's (None: nothing to
    report), written as JSON to the path in parsed option `option`; the keys in `highest`
    keep the highest value of any process, the other numbers add up, lists join. `save(path,
    per_process)`, when given, writes the file from every process's figures instead
    (latency_log.py: histograms that add up only decoded)."""

    name: str
    collect: Callable
    option: str
    highest: tuple[str, ...] = ()
    save: Callable | None = None


SOURCES: dict[str, Figures] = {}
REPORTED: dict[str, dict] = {}  # on the master: worker id -> its latest figures


def figures(name: str, collect: Callable, option: str, highest: tuple[str, ...] = (),
            save: Callable | None = None) -> None:
    SOURCES[name] = Figures(name, collect, option, highest, save)


def merge(a: dict, b: dict, highest: tuple[str, ...] = ()) -> dict:
    """Two processes' figures as one: lists joined, `highest` keys the larger, numbers summed."""
    out = dict(a)
    for key, value in b.items():
        if key not in out:
            out[key] = value
        elif isinstance(value, list):
            out[key] = [*out[key], *value]
        elif key in highest:
            out[key] = max(out[key], value)
        else:
            out[key] = out[key] + value
    return out


def own_figures(environment) -> dict:
    found = {name: src.collect(environment) for name, src in SOURCES.items()}
    return {name: value for name, value in found.items() if value is not None}


def write(environment, per_process: list[dict]) -> None:
    """Each figure added up over the processes that have it, to its file when one is named."""
    opts = environment.parsed_options
    for name, src in SOURCES.items():
        path = getattr(opts, src.option, "") if opts is not None else ""
        found = [p[name] for p in per_process if name in p]
        if not path or not found:
            continue
        if src.save is not None:
            src.save(Path(path), found)
            continue
        total = found[0]
        for more in found[1:]:
            total = merge(total, more, src.highest)
        Path(path).write_text(json.dumps(total, indent=2) + "\n")


# --- the worker's side --------------------------------------------------------------

HELLO = gevent.event.AsyncResult()  # on a worker: the master's `ftl_hello`
JOINED: set[str] = set()  # on the master: the workers whose join it has said


def on_report(environment, data: dict) -> None:
    runner = environment.runner
    data["ftl"] = {"final": runner.state == STATE_STOPPED, "figures": own_figures(environment)}


def on_hello(environment, msg) -> None:
    mine, master = versions(), msg.data["versions"]
    if mine != master:
        log.error("this worker runs %s, its master %s: start the worker from the master's "
                  "version (same Locust, same commit)", describe(mine), describe(master))
        environment.process_exit_code = 1
        gevent.spawn(environment.runner.quit)
        return
    HELLO.set(msg.data)


def on_stop_request(environment, msg) -> None:
    """Stop the users now (Locust's own stop; nothing if stopped) and report at once."""
    environment.runner.stop()
    environment.runner._send_stats()  # Locust's own report, with our figures (on_report)
    counts = {name: {k: v for k, v in figs.items() if isinstance(v, int | float)}
              for name, figs in own_figures(environment).items()}
    log.info("final figures sent to the master: %s", json.dumps(counts, sort_keys=True))


def expect_hello(environment) -> None:
    """Say who this worker is, once a second, until the master answers: Locust drops a
    message that reaches a master before its init event registered the handler (a
    worker that starts first). Quit with exit code 1 when no answer comes in time: the
    master does not run the lab's locustfiles (a bare `locust --master`)."""
    deadline = time.monotonic() + HELLO_WAIT
    while time.monotonic() < deadline:
        environment.runner.send_message("ftl_join", {"versions": versions(),
                                                     "host": socket.gethostname()})
        if HELLO.wait(timeout=1.0) is not None:
            return
    if environment.process_exit_code is None:
        log.error("no answer from the master in %g s: it does not run the lab's locustfiles "
                  "(benchmarks/worker_messages.py)", HELLO_WAIT)
        environment.process_exit_code = 1
        environment.runner.quit()


def accounts(environment, users_file: str) -> list | None:
    """On a worker, the master's seeded accounts (waiting for them); elsewhere None."""
    if not isinstance(environment.runner, WorkerRunner):
        return None
    try:
        return HELLO.get(timeout=HELLO_WAIT)["accounts"]
    except gevent.Timeout:
        raise RuntimeError(f"no accounts from the master in {HELLO_WAIT:g} s") from None


# --- the master's side --------------------------------------------------------------

def on_join(environment, msg) -> None:
    """A worker said who it is: answer with the accounts, or say why it is refused."""
    theirs, mine = msg.data["versions"], versions()
    who = f"{msg.data.get('host', '?')} ({msg.node_id})"
    if msg.node_id not in JOINED:   # said once: a worker repeats its join until answered
        JOINED.add(msg.node_id)
        say_join(environment, who, theirs, mine)
    path = getattr(environment.parsed_options, "chat_users_file", "")
    users = read_accounts(path) if path else []
    environment.runner.send_message("ftl_hello", {"versions": mine, "accounts": users},
                                    client_id=msg.node_id)


def say_join(environment, who: str, theirs: dict, mine: dict) -> None:
    if theirs != mine:
        log.error("worker %s refused: it runs %s, this master %s", who, describe(theirs),
                  describe(mine))
        # Locust counted it ready on its first message, and may have started the test
        # with it before this refusal: whatever follows, the run failed
        environment.process_exit_code = 1
        return
    options = environment.parsed_options
    # --expect-workers counts only for a headless master (lab up's waits for none)
    expected = f" of {options.expect_workers} expected" if getattr(
        options, "headless", False) else " connected"
    log.info("worker %s joined (%d%s): %s", who, len(environment.runner.clients), expected,
             describe(theirs))


def read_accounts(path: str) -> list:
    data = json.loads(Path(path).read_text())
    return data["users"] if isinstance(data, dict) else data


def on_worker_report(client_id: str, data: dict, **_kwargs) -> None:
    if "ftl" in data:
        REPORTED[client_id] = data["ftl"]


def final_figures(environment) -> list[dict]:
    """Every worker's figures, each as it stopped: ask, then wait a bounded time."""
    runner = environment.runner
    for client in runner.clients.all:
        REPORTED.get(client.id, {})["final"] = False
        runner.send_message("ftl_stop", None, client_id=client.id)
    deadline = time.monotonic() + (environment.stop_timeout or 0) + FINAL_WAIT
    waiting = [c.id for c in runner.clients.all]
    while time.monotonic() < deadline:
        waiting = [cid for cid in waiting if not REPORTED.get(cid, {}).get("final")]
        if not waiting:
            break
        gevent.sleep(0.1)
    if waiting:
        log.error("no final figures from %s: their last report is counted", ", ".join(waiting))
    return [r["figures"] for r in REPORTED.values()]


# --- wiring ---------------------------------------------------------------------------

def on_init(environment, runner=None, **_kwargs) -> None:
    runner = runner or environment.runner
    if isinstance(runner, WorkerRunner):
        runner.register_message("ftl_hello", on_hello)
        runner.register_message("ftl_stop", on_stop_request)
        environment.events.report_to_master.add_listener(
            lambda client_id, data, **_kw: on_report(environment, data))
        gevent.spawn(expect_hello, environment)
    elif isinstance(runner, MasterRunner):
        runner.register_message("ftl_join", on_join)


def on_test_start(environment, **_kwargs) -> None:
    if isinstance(environment.runner, MasterRunner):
        REPORTED.clear()


def on_test_stop(environment, **_kwargs) -> None:
    runner = environment.runner
    if isinstance(runner, MasterRunner):
        write(environment, final_figures(environment))
    elif not isinstance(runner, WorkerRunner):  # the local runner: its own figures
        write(environment, [own_figures(environment)])


def install(events) -> None:
    """Add the listeners once (the locustfiles import each other)."""
    if getattr(events, "_ftl_messages", False):
        return
    events._ftl_messages = True
    events.init.add_listener(on_init)
    events.test_start.add_listener(on_test_start)
    events.test_stop.add_listener(on_test_stop)
    events.worker_report.add_listener(on_worker_report)
