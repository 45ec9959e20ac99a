"""benchmarks/chat.py and step_load.py run for real: Locust against gunicorn and Redis.

Each run is a Locust subprocess (headless, time-bounded, with a hard timeout
on top) whose `--csv` output is read back: every task and the Socket.IO
round trip must have requests and no failures.
"""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

import pytest
from conftest import gunicorn_process
from hdrh.log import HistogramLogReader

from benchmarks import latency_log
from benchmarks.analysis import metrics
from benchmarks.analysis import stats as lab_stats
from benchmarks.run import locust_cli, results
from benchmarks.sandbox import procs
from benchmarks.stages import ROOT

VENV_BIN = Path(sys.executable).parent
LOCUSTFILE = ROOT / "benchmarks" / "chat.py"
STEP_LOAD = ROOT / "benchmarks" / "step_load.py"
EVENTLET = ["-w", "2", "-k", "eventlet", "--keep-alive", "10"]
SYNC = ["-w", "2"]
CHAT_REQUESTS = {
    ("POST", "/auth/login"),
    ("GET", "/rooms/[id]/messages"),
    ("POST", "/rooms/[id]/messages"),
    ("GET", "/users/friends"),
    ("POST", "/rooms/find-or-create"),
    ("GET", "/users/me"),
    ("GET", "/users/getUserSecure/[email]"),
    ("WSIO", "connect"),
    ("WSIO", "joinRoom"),
    ("WSIO", "sendMessage"),
}


@pytest.fixture(scope="module")
def redis_url(redis_port):
    return f"redis://127.0.0.1:{redis_port}/2"  # the app tests flush db 0


# These tests judge the Locust scenarios, not Redis's latency: on a box half as fast,
# busy with the rest of the suite, a Redis answer once took over the app's 2 s socket
# timeout and a user's request was (rightly) answered 503, failing the run. Their
# servers wait up to 20 s for Redis (the outage tests keep the app's 2 s).
PATIENT_REDIS = {"FLASK_REDIS_SOCKET_TIMEOUT": "20"}


@contextmanager
def patient_gunicorn(redis_url: str, workdir, worker_args: list[str]):
    with gunicorn_process(redis_url, workdir, worker_args, env=PATIENT_REDIS) as (url, _):
        yield url


@pytest.fixture(scope="module")
def eventlet_server(redis_url, tmp_path_factory):
    with patient_gunicorn(redis_url, tmp_path_factory.mktemp("eventlet"), EVENTLET) as url:
        yield url


@pytest.fixture(scope="module")
def users_file(redis_url, tmp_path_factory) -> Path:
    """Users seeded by the real CLI, as the lab does."""
    out = tmp_path_factory.mktemp("seed") / "users.json"
    seeded = subprocess.run(
        [str(VENV_BIN / "flask"), "--app", "app", "seed-users", "--count", "20", "--friends", "2",
         "--prefix", "locust", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
        env={**os.environ, "FLASK_REDIS_URL": redis_url, "FLASK_SECRET_KEY": "test"})
    assert seeded.returncode == 0, seeded.stdout + seeded.stderr
    return out


def locust(url: str, workdir: Path, args: list[str], env: dict | None = None,
           locustfile: str = str(LOCUSTFILE)) -> tuple[subprocess.CompletedProcess, Path]:
    """Run Locust headless (its run ends by itself; the timeout is a safety net)."""
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("CHAT_", "STEP_", "LOCUST_"))}
    prefix = workdir / "x"
    result = subprocess.run(
        [str(VENV_BIN / "locust"), "-f", locustfile, "--headless", "--only-summary",
         "--csv", str(prefix), "--json-file", str(prefix), "--host", url, *args],
        cwd=workdir, capture_output=True, text=True, timeout=60, env={**clean, **(env or {})})
    return result, prefix


def stats(prefix: Path) -> dict[tuple[str, str], dict]:
    """Rows of Locust's `<prefix>_stats.csv`, keyed by (type, name)."""
    with open(f"{prefix}_stats.csv", newline="") as f:
        return {(row["Type"], row["Name"]): row for row in csv.DictReader(f)}


def explain(result: subprocess.CompletedProcess, prefix: Path) -> str:
    failures = Path(f"{prefix}_failures.csv")
    return (f"exit {result.returncode}\n{result.stderr[-3000:]}\n"
            + (failures.read_text()[-2000:] if failures.exists() else ""))


def assert_no_failures(rows: dict, why: str) -> None:
    total = rows[("", "Aggregated")]
    assert int(total["Request Count"]) > 0, why
    assert int(total["Failure Count"]) == 0, why


def test_chat_and_socketio_users_against_eventlet(eventlet_server, users_file, tmp_path):
    result, prefix = locust(eventlet_server, tmp_path,
                            ["-u", "10", "-r", "10", "-t", "8s", "--chat-sessions-file",
                             str(tmp_path / results.SESSIONS_JSON), "--latency-file",
                             str(tmp_path / results.LATENCY_HLOG), "ChatUser",
                             "SocketIOChatUser"],
                            env={"LOCUST_CHAT_USERS_FILE": str(users_file)})
    why = explain(result, prefix)
    assert result.returncode == 0, why
    rows = stats(prefix)
    counts = {key: int(rows[key]["Request Count"]) for key in CHAT_REQUESTS if key in rows}
    assert set(counts) == CHAT_REQUESTS and all(counts.values()), (counts, why)
    assert ("POST", "/auth/register") not in rows, "seeded users must log in, not register"
    assert_no_failures(rows, why)
    # 10 users, weights 4:1: two Socket.IO users, one session each, open to the end (~8 s),
    # counted as they stop, apart from Locust's request stats
    totals = metrics.sessions(tmp_path)
    assert (totals["sio_sessions"], totals["sio_sessions_completed"]) == (2, 2), totals
    assert 4000 < totals["sio_session_p50_ms"] < 9000, totals
    # each Socket.IO user listened to its room and counted what it missed (none here)
    feeds = json.loads((tmp_path / results.SESSIONS_JSON).read_text())
    assert (feeds["missed_live"], feeds["caught_up"], feeds["missing"]) == (0, 0, 0), feeds
    assert not any(kind == "SESSION" for kind, _ in rows)
    assert_hlog_is_locusts(tmp_path / results.LATENCY_HLOG, Path(f"{prefix}.json"))


def locust_bucket_ms(ms: float) -> float:
    """The width of Locust's bucket at `ms` (locust.stats.bucket_response_time)."""
    return 1 if ms < 100 else 10 if ms < 1000 else 100 if ms < 10_000 else 1000


def assert_hlog_is_locusts(path: Path, locust_json: Path) -> None:
    """The .hlog, read by HdrHistogram's own reader, holds every request Locust counted
    (its --json-file, written as it exits: its CSV may miss the last second), row by row,
    and its p99 (the lab's rule on its buckets) is Locust's within one of Locust's
    buckets: the same times, more digits."""
    reader = HistogramLogReader(str(path), latency_log.new())
    lines = []
    while (hist := reader.get_next_interval_histogram()) is not None:
        lines.append(hist)
    reader.close()
    by_tag = {h.get_tag(): h.get_total_count() for h in lines}
    entries = json.loads(locust_json.read_text())
    theirs = {latency_log.tag(e["method"], e["name"]): e["num_requests"] for e in entries}
    assert by_tag.pop(None) == sum(theirs.values()) > 0, (by_tag, theirs)
    assert by_tag == theirs
    times = Counter()
    for e in entries:
        times.update({int(ms): n for ms, n in e["response_times"].items()})
    p99, locusts = (lab_stats.percentile(t, 0.99) for t in (latency_log.times_ms(path), times))
    assert abs(p99 - locusts) <= locust_bucket_ms(locusts), (p99, locusts)


def test_key_value_user_alone_against_sync_workers(redis_url, tmp_path):
    with patient_gunicorn(redis_url, tmp_path, SYNC) as url:
        result, prefix = locust(url, tmp_path, ["-u", "5", "-r", "5", "-t", "4s", "KeyValueUser"],
                                locustfile=str(ROOT / "benchmarks" / "kv.py"))
    why = explain(result, prefix)
    assert result.returncode == 0, why
    rows = stats(prefix)
    assert set(rows) == {("GET", "/kv/[key]"), ("", "Aggregated")}, why
    assert_no_failures(rows, why)


def test_step_load_adds_users_step_by_step_and_stops_by_itself(eventlet_server, tmp_path):
    # No CHAT_USERS_FILE: the users register themselves (and a friend each).
    env = {"STEP_USERS": "2", "STEP_SECONDS": "2", "STEP_MAX_USERS": "6", "STEP_TIME_LIMIT": "7"}
    result, prefix = locust(eventlet_server, tmp_path, ["ChatUser"], env=env,
                            locustfile=f"{LOCUSTFILE},{STEP_LOAD}")
    why = explain(result, prefix)
    assert result.returncode == 0, why
    assert "Shape test completed" in result.stderr, why
    with open(f"{prefix}_stats_history.csv", newline="") as f:
        counts = [int(row["User Count"]) for row in csv.DictReader(f)]
    assert counts == sorted(counts), (counts, why)  # only ever grows
    assert counts[-1] == 6 and len(set(counts) - {0}) >= 3, (counts, why)  # 2, 4, 6
    rows = stats(prefix)
    # each of the 6 users registered itself, and the first step's two, 7 s in, a friend
    # each (the last step's, 3 s before the end, may still be on their way on a slow box)
    assert int(rows[("POST", "/auth/register")]["Request Count"]) >= 6 + 2, why
    assert_no_failures(rows, why)


def test_a_bare_locust_in_the_repository_finds_the_chat_scenario():
    """pyproject.toml's [tool.locust] names benchmarks/chat.py: chat traffic only."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("LOCUST_")}
    listed = subprocess.run([str(VENV_BIN / "locust"), "--list"], cwd=ROOT, capture_output=True,
                            text=True, timeout=60, env=clean)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.split()[2:] == ["ChatUser", "SocketIOChatUser"], listed.stdout


def test_the_scenario_help_lists_its_options():
    """`locust -f benchmarks/chat.py --help` cannot show them (Locust prints help before it
    loads a locustfile); `python -m benchmarks.chat --help` does, with Locust's own."""
    shown = subprocess.run([str(VENV_BIN / "python"), "-m", "benchmarks.chat", "--help"],
                           cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    for name in ("users-file", "wait-min", "wait-max", "socketio-users", "socketio-pace",
                 "failure-backoff"):
        assert f"--chat-{name}" in shown.stdout, name
    assert "--spawn-rate" in shown.stdout and "locust -f benchmarks/chat.py" in shown.stdout


@pytest.mark.netns  # root: a mount namespace
def test_workers_that_cannot_see_the_masters_files_still_count(eventlet_server, users_file,
                                                               tmp_path):
    """Distributed mode with each worker blind to the master's folders: the accounts reach
    them in Locust's messages (they log in, never register) and their sessions reach the
    master's sessions file, each worker's final count in the sum; no per-worker file."""
    port = procs.free_port()
    base = Path(os.path.commonpath([tmp_path, users_file]))
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("CHAT_", "LOCUST_"))}
    logs = [tmp_path / f"worker{n}.log" for n in (1, 2)]
    worker = [str(VENV_BIN / "locust"), "-f", str(LOCUSTFILE), "--worker", "--master-port",
              str(port)]
    workers = [procs.start(locust_cli.hidden([base], worker), log=log, env=clean, cwd=ROOT)
               for log in logs]
    try:
        result, prefix = master(eventlet_server, tmp_path, port, users_file, workers=2,
                                users=8, seconds=6, socketio_users=4)
        for worker in workers:
            worker.wait(timeout=30)
    finally:
        for worker in workers:
            procs.stop(worker)
    why = explain(result, prefix)
    assert result.returncode == 0, why
    rows = stats(prefix)
    assert ("POST", "/auth/register") not in rows, "seeded users must log in, not register"
    assert int(rows[("POST", "/auth/login")]["Request Count"]) >= 8, why
    said = [log.read_text() for log in logs]
    own = [json.loads(re.search(r"final figures sent to the master: (.*)", s)[1])["sessions"]
           for s in said]
    assert all(o["created"] > 0 for o in own), said  # each worker ran Socket.IO users
    total = json.loads((tmp_path / results.SESSIONS_JSON).read_text())
    assert total["created"] == sum(o["created"] for o in own) == 4, (total, own)
    assert total["completed"] == 4 and len(total["lengths"]) == 4, total
    assert sorted(p.name for p in tmp_path.glob("sessions*")) == [results.SESSIONS_JSON]
    # every request's time reached the master's .hlog: each worker's histograms added up
    timed = [json.loads(re.search(r"final figures sent to the master: (.*)", s)[1])["latency"]
             for s in said]
    assert all(t["requests"] > 0 for t in timed), timed
    hlog = latency_log.read(tmp_path / results.LATENCY_HLOG)
    assert hlog[None].get_total_count() == sum(t["requests"] for t in timed), timed
    assert_hlog_is_locusts(tmp_path / results.LATENCY_HLOG, Path(f"{prefix}.json"))


def master(url: str, tmp_path: Path, port: int, users_file: Path, workers: int, users: int,
           seconds: int, socketio_users: int):
    """A headless Locust master of the chat scenario, waiting for `workers`."""
    return locust(url, tmp_path, [
        "--master", "--master-bind-port", str(port), "--expect-workers", str(workers),
        "--expect-workers-max-wait", "30", "-u", str(users), "-r", str(users),
        "-t", f"{seconds}s", "--chat-socketio-users", str(socketio_users),
        "--chat-users-file", str(users_file),
        "--chat-sessions-file", str(tmp_path / results.SESSIONS_JSON),
        "--latency-file", str(tmp_path / results.LATENCY_HLOG),
        "ChatUser", "SocketIOChatUser"])


def copy_of_the_lab(folder: Path, edit: str = "") -> Path:
    """The lab's code in another folder, as on another machine (its venv is this one);
    `edit` appended to its chat.py makes it another version."""
    shutil.copytree(ROOT / "benchmarks", folder / "benchmarks",
                    ignore=shutil.ignore_patterns("__pycache__"))
    with open(folder / "benchmarks" / "chat.py", "a") as f:
        f.write(edit)
    return folder


def lab_worker(folder: Path, port: int, log: Path, *more: str):
    return procs.start([str(VENV_BIN / "python"), "-m", "benchmarks.lab", "worker",
                        "--master-host", "127.0.0.1", "--master-port", str(port), *more],
                       log=log, env=dict(os.environ), cwd=folder)


def test_lab_worker_from_another_folder_joins_and_its_counts_reach_the_master(
        eventlet_server, users_file, tmp_path):
    """`lab worker --master-host` from a copy in another folder: the master says it joined,
    its sessions reach the master's file."""
    port = procs.free_port()
    worker = lab_worker(copy_of_the_lab(tmp_path / "copy"), port, tmp_path / "worker.log")
    try:
        result, prefix = master(eventlet_server, tmp_path, port, users_file, workers=1,
                                users=3, seconds=4, socketio_users=2)
        worker.wait(timeout=30)
    finally:
        procs.stop(worker)
    said = (tmp_path / "worker.log").read_text()
    assert result.returncode == 0 and worker.returncode == 0, explain(result, prefix) + said
    assert re.search(r"worker \S+ \(\S+\) joined \(1 of 1 expected\)", result.stderr)
    own = json.loads(re.search(r"final figures sent to the master: (.*)", said)[1])
    total = json.loads((tmp_path / results.SESSIONS_JSON).read_text())
    assert total["created"] == own["sessions"]["created"] == 2, (total, own)


def test_a_worker_of_another_version_is_refused_and_the_master_gives_up(tmp_path):
    port = procs.free_port()
    worker = lab_worker(copy_of_the_lab(tmp_path / "copy", "# another version\n"), port,
                        tmp_path / "worker.log")
    try:
        result, _ = locust("http://127.0.0.1:9", tmp_path, [
            "--master", "--master-bind-port", str(port), "--expect-workers", "1",
            "--expect-workers-max-wait", "8", "-u", "1", "-t", "2s", "ChatUser"])
        worker.wait(timeout=30)
    finally:
        procs.stop(worker)
    said = (tmp_path / "worker.log").read_text()
    assert worker.returncode != 0 and result.returncode != 0, said + result.stderr
    line = re.search(r"this worker runs Locust \S+, locustfiles (\w+), its master Locust \S+, "
                     r"locustfiles (\w+)", said)
    assert line and line[1] != line[2], said  # both versions named, one line
    assert re.search(rf"worker \S+ \(\S+\) refused: it runs Locust \S+, locustfiles {line[1]}, "
                     rf"this master Locust \S+, locustfiles {line[2]}", result.stderr)
    # Locust counts a worker ready on its first message: the master gives up waiting, or,
    # when it started the test in the moment before the refusal, stops as the worker quits
    assert ("Gave up waiting for workers" in result.stderr
            or "The last worker quit, stopping test" in result.stderr), result.stderr


def test_a_worker_that_cannot_reach_its_master_says_so_in_bounded_time(tmp_path):
    started = time.monotonic()
    worker = lab_worker(ROOT, procs.free_port(), tmp_path / "worker.log",
                        "--connect-timeout", "2")
    worker.wait(timeout=30)
    said = (tmp_path / "worker.log").read_text()
    assert worker.returncode == 1 and time.monotonic() - started < 15, said
    assert "cannot reach the master at 127.0.0.1:" in said and len(said.splitlines()) == 1
