"""benchmarks/studies/capacity: the study at a small size, its counts held to the servers'.

The stage test runs `python -m benchmarks.studies.capacity` on a real stage (9t) in network
namespaces (root only): two steps (60 and 150 users), every one a real websocket to
the stage's Nginx, and holds what the load saw to what the servers counted (websockets
held, messages stored). A message a user every 5 s: at most 300 deliveries a second,
what 9t served at 2,000 users in lab 16's run with 16% of its core
(notebooks/capacity-run/main/: 321.9 a second); under the rest of the suite 300 users
sending every second outran it (283 of 898 acked in the grace).
The objective is made loose (5 s): the test is about the counts, which hold on a box of
any speed; the objective's rule is tested on rows.
"""

from __future__ import annotations

import dataclasses
import json
import platform
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_module

from benchmarks import stages
from benchmarks.run import runner
from benchmarks.sandbox import hosts, python_root
from benchmarks.studies.capacity import census, clients, fanout, report, servers, verdict

ROOT = stages.ROOT
STEPS = (60, 150)
ROOM = 10


@pytest.mark.parametrize("args, says", [
    (["--stages", "99"], "99"),
    (["--stages", "0"], "needs stages with Nginx in front"),
    (["--users", "200,100"], "rising counts"),
    (["--room-size", "1"], "--room-size"),
    (["--seconds", "0"], "--seconds must be above 0"),
    (["--stages", "10", "--realtime-python", "tests"],
     "tests is not a finished Python root (no /opt/venv/.installed in it): make one with "
     "`sh setup/python314-root.sh results/python-roots`"),
    (["--stages", "9t", "--census"], "a census is written by gunicorn's gevent worker only"),
], ids=["unknown-stage", "no-front", "falling-steps", "room-of-one", "no-traffic",
        "no-python-root", "census-on-threads"])
def test_bad_input_is_refused_before_anything_starts(args, says, tmp_path):
    code, out = run_module("benchmarks.studies.capacity", *args, "--results", str(tmp_path),
                           timeout=60)
    assert code == 2, out
    assert says in out
    assert not list(tmp_path.iterdir()), "a results run was made for bad input"


def test_users_are_split_in_whole_rooms_and_steps_follow_the_file():
    assert clients.split(95, 10, 3) == [(0, 40), (40, 30), (70, 25)]
    assert clients.split(20, 10, 4) == [(0, 10), (10, 10)]  # no process without a room
    # process 2 holds users 40..69: none at a step of 30, 20 of them at 60, all at 95
    assert clients.targets([30, 60, 95], (40, 30), 95) == [0, 20, 30]


def _row(**changes) -> dict:
    row = {"connect_failed": 0, "connect_failures": {}, "dropped": 0, "lost": 0,
           "expected": 100, "sent": 10, "not_acked": 0, "server_held": 50, "connected": 50,
           "server_stored": 10, "acked": 10, "delivery_p99_ms": 20.0, "seconds": 35.2}
    return {**row, **changes}


@pytest.mark.parametrize("changes, says", [
    ({}, None),
    ({"delivery_p99_ms": 251.0}, "delivery p99 251.0 ms > 250 ms"),
    ({"delivery_p99_ms": None}, "delivery p99 None ms"),  # nothing delivered: not a pass
    ({"lost": 3}, "3 of 100 deliveries did not arrive (counted as 35.2 s in the percentiles)"),
    ({"not_acked": 2, "acked": 8, "server_stored": 8}, "2 of 10 sends not acked"),
    ({"connect_failed": 2, "connect_failures": {"timeout": 2}}, "2 connects failed (timeout: 2)"),
    ({"server_held": 49}, "the server holds 49 websockets, the load 50"),
    ({"server_stored": 9}, "the server stored 9 messages, 10 were acked"),
], ids=["holds", "slow", "none-delivered", "lost", "not-acked", "connects", "held",
        "stored"])
def test_a_step_breaks_on_each_part_of_its_objective(changes, says):
    why = verdict.broke(_row(**changes), 250)
    assert (why == []) if says is None else any(says in w for w in why), why


@pytest.mark.netns
@pytest.mark.slow
def test_two_steps_on_stage_9t_hold_the_loads_counts_to_the_servers(tmp_path):
    """On 9t, the threads (whose lab run test_realtime_stages.py leaves to this test):
    a thread at least for each websocket its server holds."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.studies.capacity", "--stages", "9t",
         "--users", ",".join(map(str, STEPS)), "--room-size", str(ROOM), "--send-every", "5",
         "--seconds", "3", "--grace", "5", "--objective-ms", "5000", "--load-processes", "2",
         "--results", str(tmp_path)], cwd=ROOT, text=True, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT)
    out = proc.communicate(timeout=300)[0]
    assert proc.returncode == 0, out
    assert not hosts.owned_namespaces(proc.pid) + runner.started_by(proc.pid)
    [run_dir] = tmp_path.glob("*-capacity")
    found = json.loads((run_dir / "capacity.json").read_text())
    rows = found["rows"]
    assert [r["users"] for r in rows] == list(STEPS), out
    for row in rows:
        # every user connected, and the server holds exactly those websockets
        assert row["connected"] == row["users"] == row["server_held"], row
        # every message the load sent was stored by the server, acked, and delivered to
        # each member of its room (the server emits to the whole room, sender included)
        assert row["sent"] == row["acked"] == row["server_stored"] > 0, row
        assert row["received"] == row["expected"] == row["acked"] * ROOM, row
        assert row["broke"] == [] and row["limit"] is None, row
        assert row["load_processes"] == 2
        assert 0 < row["realtime_cpu_percent"] and row["realtime_us_per_delivery"] > 0, row
        assert row["realtime_fds"] >= row["server_held"], row  # a descriptor per websocket
        assert row["realtime_threads"] >= row["server_held"], row  # and a thread: 9t's
        assert row["delivery_p99_ms"] <= row["delivery_max_ms"], row
    assert found["verdicts"]["9t"] == [verdict.summary("9t", rows)]
    assert f"stage 9t holds {STEPS[-1]} users" in out
    text = (run_dir / report.REPORT).read_text()
    assert all(report.step_line(r) in text for r in rows), text
    assert (f"- **9t**: {STEPS[0]} users held in 1 of 1 repeats, {STEPS[1]} users held in 1 "
            f"of 1 repeats; at {STEPS[-1]}:") in text
    hlog = (run_dir / "09t-socketio-threads" / "repeat-1" / "step-2.hlog").read_text()
    assert all(f"Tag={kind}," in hlog for kind in ("ack", "connect", "delivery", "lag")), hlog


def test_the_fan_out_variant_sets_the_real_time_servers_process_count():
    nine = stages.get("9")
    three = fanout.with_processes(nine, 3)
    assert three.socketio_server[:5] == ("gunicorn", "-c", "gunicorn/today.conf.py", "-w", "3")
    assert three.server == nine.server  # the HTTP API's server unchanged
    assert fanout.with_processes(nine, 1) is nine and fanout.label(nine, 3) == "9 x3"
    granian = dataclasses.replace(nine, socketio_server=stages.GRANIAN_TODAY)
    cmd = fanout.with_processes(granian, 2).socketio_server
    assert cmd[cmd.index("--workers") + 1] == "2"
    with pytest.raises(ValueError, match="no worker count"):
        fanout.with_processes(stages.get("0"), 2)  # flask run: one process


def test_the_listeners_share_counts_samples_under_the_queues_listener(tmp_path):
    stacks = tmp_path / "profile.folded"
    stacks.write_text(
        'process 1:"gunicorn";PubSubManager._thread (socketio/pubsub_manager.py);'
        "_handle_emit (socketio/pubsub_manager.py) 3\n"
        'process 1:"gunicorn";AsyncPubSubManager._thread (socketio/async_pubsub_manager.py) 1\n'
        'process 1:"gunicorn";_handle_event_internal (socketio/server.py) 6\n')
    assert fanout.listener_share(stacks) == 0.4
    assert fanout.listener_share(tmp_path / "missing") is None


def test_collections_logged_during_a_step_are_its_pauses(tmp_path):
    log = tmp_path / "app_socketio.log"
    log.write_text("gc: generation 2 took 400 ms, 900000 objects tracked\n")
    before = {log: log.stat().st_size}  # what the step's start saw
    with open(log, "a") as f:
        f.write("[INFO] Booting worker\ngc: generation 1 took 25 ms, 1000 objects tracked\n"
                "gc: generation 2 took 712 ms, 1369468 objects tracked\n")
    assert servers.gc_pauses(before) == [(25, 1000), (712, 1369468)]
    row = {**_row(), **verdict.pauses_row(servers.gc_pauses(before)), "log_signs": {},
           "load_cpu_percent_max": 8.0, "load_lag_max_ms": 9.0}
    assert (row["gc_pauses"], row["gc_pause_max_ms"]) == (2, 712)
    assert verdict.limit(row, 250).startswith(
        "garbage collection (a full collection paused the real-time server 712 ms, "
        "1,369,468 objects")


def test_a_load_loop_late_within_the_servers_pause_is_the_pause_not_the_load():
    """Stage 9 at 7,500 users: a 1,127 ms full collection, and the load's loop late by
    142 ms on the flood that followed: the collection limited it. A loop late by more
    than any pause is the load side's own."""
    row = {**_row(), **verdict.pauses_row([(1127, 1_500_000)]), "log_signs": {},
           "load_cpu_percent_max": 16.0, "load_lag_max_ms": 141.69}
    assert verdict.limit(row, 250).startswith("garbage collection (a full collection paused "
                                              "the real-time server 1127 ms")
    row["load_lag_max_ms"] = 1500.0
    assert verdict.limit(row, 250).startswith("the load side (a load process at 16.0% of a "
                                              "core, its loop late by up to 1500.0 ms)")


def _step(stage: str, repeat: int, users: int, p99: float, broke: bool) -> dict:
    return {"stage": stage, "repeat": repeat, "users": users, "broke": ["slow"] if broke else [],
            "limit": "unclear" if broke else None, "pss_kib_per_user": 70.0 + repeat,
            "realtime_us_per_delivery": 300.0 + repeat, "delivery_p99_ms": p99,
            "connected": users, "received": 10, "expected": 10, "delivery_p50_ms": 3.0,
            "realtime_cpu_percent": 10.0, "load_cpu_percent_max": 5.0, "processes": 1}


def test_the_paired_steps_are_one_family_and_the_report_says_how_many(tmp_path):
    """Three repeats of 9 and 10: memory and CPU at the step both held, p99 where 9 broke;
    the report counts the steps it tested and adjusts them together (Holm's method)."""
    rows = [_step("9", r, 2500, 400.0 + r, True) for r in (1, 2, 3)]
    rows += [_step("10", r, u, 60.0 + r, False) for r in (1, 2, 3) for u in (2500, 5000)]
    report.write(tmp_path, rows, "python -m benchmarks.studies.capacity --stages 9,10")
    text = (tmp_path / report.REPORT).read_text()
    assert "- **9**: 2,500 users held in 0 of 3 repeats" in text
    assert "- **10**: 2,500 users held in 3 of 3 repeats, 5,000 users held in 3 of 3" in text
    assert ("1 step tested, significant when p < 0.05" in text), text  # only p99 pairs
    assert "- 10 / 9, delivery p99 at 2,500 users: 0.15x [" in text, text


def test_a_stage_from_a_python_root_is_labelled_and_compared_with_itself():
    """--realtime-python: the row says the Python its server said (`10 py3.14.8`), and is
    compared with the same stage on the venv's Python, not with stage 9."""
    ten = stages.get("10")
    assert fanout.label(ten, 1, "3.14.8") == "10 py3.14.8"
    assert fanout.label(ten, 3, "3.14.8") == "10 py3.14.8 x3"
    assert report.reference_of("10 py3.14.8", {"9", "10", "10 py3.14.8"}) == "10"
    assert report.reference_of("10 py3.14.8", {"9", "10 py3.14.8"}) is None


def python_root_folder() -> Path:
    """The root setup/python314-root.sh makes for this checkout (its folder, built or not)."""
    said = subprocess.run(["sh", "setup/python314-root.sh", "--key", "results/python-roots"],
                          cwd=ROOT, text=True, capture_output=True, timeout=60)
    assert said.returncode == 0, said.stderr
    return ROOT / said.stdout.strip()


@pytest.mark.netns
@pytest.mark.slow
def test_stage_10_runs_from_the_python_root_beside_the_venv(tmp_path):
    """The real-time server chrooted in Debian forky's python3.14 root, measured as the
    venv's: a row each, each with the Python its server said; nothing left running or
    mounted. Skipped without the root (`sh setup/python314-root.sh results/python-roots`:
    about 50 s)."""
    root = python_root_folder()
    if python_root.problem(root):
        pytest.skip(f"no Python root: {python_root.problem(root)}")
    pids: list[int] = []
    code, out = run_module(
        "benchmarks.studies.capacity", "--stages", "10", "--realtime-python", str(root),
        "--users", "20", "--room-size", "10", "--send-every", "2", "--seconds", "3",
        "--grace", "3", "--objective-ms", "5000", "--results", str(tmp_path), timeout=400,
        pids=pids)
    assert code == 0, out
    assert not hosts.owned_namespaces(pids[0]) + runner.started_by(pids[0])
    [run_dir] = tmp_path.glob("*-capacity")
    rows = json.loads((run_dir / "capacity.json").read_text())["rows"]
    by_label = {r["stage"]: r for r in rows}
    [rooted] = [r for r in rows if r["stage"].startswith("10 py3.14.")]
    assert set(by_label) == {"10", rooted["stage"]}, out
    assert rooted["python"] == f"CPython {rooted['stage'].split(' py')[1]}"
    assert rooted["gc_thresholds"] == "(2000, 10, 10)"  # 3.14's own: the stage sets none
    assert by_label["10"]["python"] == f"CPython {platform.python_version()}"
    for row in rows:  # both measured alike: every user held, CPU and memory read
        assert row["connected"] == row["server_held"] == 20 and not row["broke"], row
        assert row["realtime_cpu_percent"] > 0 and row["pss_kib_per_user"] is not None, row
    ten = stages.get("10").dirname
    assert (run_dir / f"{ten}-py{rooted['python'].split()[1]}" / "repeat-1").is_dir()
    mounted = subprocess.run(["findmnt", "-rn", "-o", "TARGET"], capture_output=True,
                             text=True).stdout
    assert str(root) not in mounted


def test_the_census_is_read_at_the_largest_step_every_repeat_held(tmp_path):
    """--census: a stage's objects a user (census.per_user) in a sentence, its top types
    in a table, from the largest step both repeats held, as means of the repeats."""
    rest = {"seconds": 0.1, "tracked": 1000, "untracked": 500, "greenlet_stacks": 0,
            "types": {"dict": [900, 90_000], "str": [600, 30_000]},
            "greenlets": {"Hub.run (alive)": 1}}
    held = {"seconds": 0.4, "tracked": 1000 + 2500 * 30, "untracked": 500 + 2500 * 20,
            "greenlet_stacks": 2500 * 2048,
            "types": {"dict": [900 + 2500 * 29, 90_000 + 2500 * 6000],
                      "str": [600 + 2500 * 20, 30_000 + 2500 * 1000],
                      "engineio.socket.Socket": [2500, 2500 * 56]},
            "greenlets": {"Hub.run (alive)": 1, "_handle_and_close_when_done (alive)": 2500}}
    share = census.per_user(rest, held, 2500)
    assert share["census_types"][:3] == [["dict", 29.0, 6000.0], ["str", 20.0, 1000.0],
                                         ["engineio.socket.Socket", 1.0, 56.0]]
    assert (share["census_objects_per_user"], share["census_tracked_per_user"]) == (50, 30)
    assert share["census_greenlets"] == [["_handle_and_close_when_done (alive)", 1.0]]
    rows = [{**_step("10", r, 2500, 60.0, False), **share} for r in (1, 2)]
    rows += [_step("10", r, 5000, 60.0, r == 2) for r in (1, 2)]  # held in one repeat only
    report.write(tmp_path, rows, "python -m benchmarks.studies.capacity --census")
    text = (tmp_path / report.REPORT).read_text()
    assert ("- **10** at 2,500 users: a connected user held 50 objects, 30 of them tracked "
            "by the collector, 6.9 KiB by their shallow sizes and 2.0 KiB of greenlet "
            "stacks, against 71.5 KiB PSS; its greenlets, by what they run: 1.0 "
            "`_handle_and_close_when_done (alive)`; each census paused the server for up "
            "to 0.4 s.") in text, text
    assert "| 10 | `engineio.socket.Socket` | 1.0 | 56 |" in text, text
