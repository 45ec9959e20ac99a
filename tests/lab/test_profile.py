"""Where the CPU goes: py-spy on the app server, its flame graph, the buckets.

The classifier and the flame graph read real py-spy output: tests/lab/data/ holds
stacks recorded from stages 0 and 2 of a real lab run (the heaviest stack of each
bucket, and a Redis handshake's command). The rest runs real py-spy on a busy Python
process. Every stage of test_lab.py's full run is profiled, and
test_neighbour.py runs the lab without py-spy.
"""

from __future__ import annotations

import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import psutil
import pytest

from benchmarks import lab as lab_cli
from benchmarks.profile import buckets, flamegraph, folded, record, threads
from benchmarks.run import options, results

DATA = Path(__file__).parent / "data"
REFERENCE = Path(__file__).parents[2] / "notebooks" / "reference-run"
STAGE0, STAGE2 = DATA / "py-spy-stage0.folded", DATA / "py-spy-stage2.folded"
# each line's bucket, in the files' order (what its leaf frame is, beside it)
EXPECTED = {
    STAGE0: ["http_server",     # Condition.wait under the dev server's Thread.start
             "redis_connect",   # Connection._connect
             "redis_commands",  # send_packed_command of a command
             "flask",           # Flask.do_teardown_appcontext
             "logging",         # StreamHandler.flush
             "other",           # a process with no Python frame
             "socketio",        # engineio's WSGIApp.__call__, the middleware
             "flask",           # itsdangerous, under Flask's session cookie
             "json",            # jsonify
             "redis_connect"],  # send_packed_command of the handshake, under on_connect
    STAGE2: ["token", "json", "redis_commands", "http_server", "logging", "flask", "socketio",
             "other", "redis_connect"],
}


def test_each_real_stack_goes_to_its_bucket():
    for path, expected in EXPECTED.items():
        cache: dict = {}
        found = [buckets.classify(frames, cache) for frames, _ in folded.read(path)]
        assert found == expected, path.name


def test_shares_add_up_and_show_the_pool():
    before, after = buckets.shares(STAGE0), buckets.shares(STAGE2)
    assert set(before) == set(buckets.BUCKETS)
    assert abs(sum(before.values()) - 1) < 0.001 and abs(sum(after.values()) - 1) < 0.001
    assert max(before, key=before.get) == "redis_connect"
    assert after["redis_connect"] < before["redis_connect"] * 0.2
    assert buckets.shares(DATA / "missing.folded") is None


def test_a_reduced_profile_keeps_every_bucket_share(tmp_path):
    """The reference capture keeps each stack's deciding frame only: the same shares."""
    for path in (STAGE0, STAGE2):
        small = tmp_path / path.name
        buckets.reduce(path, small)
        assert buckets.shares(small) == buckets.shares(path), path.name
        assert len(small.read_text()) < len(path.read_text()) / 3


def test_every_rule_names_a_bucket():
    assert {bucket for bucket, _ in buckets.RULES} == set(buckets.BUCKETS)


def test_flame_graph_has_a_box_per_frame_as_wide_as_its_samples(tmp_path):
    out = tmp_path / "profile.svg"
    flamegraph.write(STAGE0, out)
    svg = ET.parse(out).getroot()
    ns = {"s": "http://www.w3.org/2000/svg"}
    boxes = {g.find("s:title", ns).text: g.find("s:rect", ns) for g in svg.iterfind("s:g", ns)}
    total = sum(count for _, count in folded.read(STAGE0))
    connect = next(b for t, b in boxes.items() if t.startswith("Connection._connect"))
    assert float(connect.get("width")) == pytest.approx(369 / total * flamegraph.WIDTH, abs=0.1)
    # the workers' process frames lose their pids: one root box, the whole width
    roots = [b for t, b in boxes.items() if t.startswith('process:"')
             and float(b.get("y")) == max(float(r.get("y")) for r in boxes.values())]
    assert len(roots) == 1 and float(roots[0].get("width")) == pytest.approx(flamegraph.WIDTH)


def test_no_profile_is_a_run_option():
    parser = lab_cli.build_parser()
    off = options.from_args(parser.parse_args(["run", "--stages", "2", "--no-profile"]))
    on = options.from_args(parser.parse_args(["run", "--stages", "2"]))
    assert (off.profile, on.profile) == (False, True)
    assert off.parameters()["profile"] is False


def busy_python() -> subprocess.Popen:
    code = "def spin():\n    while True:\n        sum(range(1000))\nspin()\n"
    return subprocess.Popen([sys.executable, "-c", code])


def py_spies() -> list[psutil.Process]:
    return [p for p in psutil.Process().children(recursive=True) if p.name() == "py-spy"]


def test_recording_profiles_a_real_process_and_draws_it(tmp_path):
    target = busy_python()
    try:
        with record.recording(target.pid, [], tmp_path, seconds=2):
            pass
    finally:
        target.kill()
        target.wait()
    stacks = folded.read(tmp_path / results.PROFILE_STACKS)
    assert any(frames[-1].startswith("spin (") for frames, _ in stacks), stacks[:3]
    assert (tmp_path / results.PROFILE_SVG).read_text().startswith("<svg")
    assert not py_spies()


def test_recording_off_or_interrupted_leaves_nothing_running(tmp_path):
    target = busy_python()
    try:
        with record.recording(target.pid, [], tmp_path / "off", seconds=2, on=False):
            assert not py_spies()
        (tmp_path / "cut").mkdir()
        with pytest.raises(KeyboardInterrupt), \
                record.recording(target.pid, [], tmp_path / "cut", seconds=60):
            assert py_spies()
            raise KeyboardInterrupt
    finally:
        target.kill()
        target.wait()
    assert not py_spies()
    assert not (tmp_path / "off").exists()


def stack(*frames: str) -> list[str]:
    """A stack as folded.read gives it: the process, then `function (file)` frames."""
    return ["process 1:\"gunicorn: worker [app.wsgi:app]\"", *frames]


def test_werkzeugs_request_objects_are_a_bucket_of_their_own():
    """Request, Response and Headers run under any server (and with none, the floor): not
    the HTTP server's; werkzeug's dev server still is, its routing still Flask's."""
    cache: dict = {}
    handle = "Worker.handle (gunicorn/workers/base_async.py)"
    found = [buckets.classify(stack(*frames), cache) for frames in (
        (handle, "Response.__init__ (werkzeug/wrappers/response.py)"),
        (handle, "EnvironHeaders._get_key (werkzeug/datastructures/headers.py)"),
        (handle, "Request.args (werkzeug/sansio/request.py)"),
        (handle, "get_input_stream (werkzeug/wsgi.py)"),
        (handle, "Request.get_json (werkzeug/wrappers/request.py)", "loads (json/__init__.py)"),
        (handle, "Map.bind_to_environ (werkzeug/routing/map.py)"),
        ("WSGIRequestHandler.handle (werkzeug/serving.py)",),
        (handle, "parse_request (gunicorn/http/message.py)"))]
    assert found == ["request_objects"] * 4 + ["json", "flask", "http_server", "http_server"]
    # stage 8 of the reference capture: 107 of its 1,547 samples, once the HTTP server's
    counts = buckets.counts(REFERENCE / "08-todays-stack" / results.PROFILE_STACKS)
    assert (counts["request_objects"], sum(counts.values())) == (107, 1547)


def test_cpu_that_py_spy_cannot_see_is_a_row_of_its_own():
    m = {"app_cpu_ms_per_request": 0.6, "native_cpu_share": 0.1,
         **{f"cpu_share_{b}": 0.0 for b in buckets.BUCKETS}, "cpu_share_redis_commands": 0.5,
         "cpu_share_http_server": 0.5}
    rows = buckets.per_request(m)
    assert round(rows[buckets.NATIVE], 6) == 0.06  # 10% of 0.6 ms: not spread
    assert round(rows["redis_commands"], 6) == round(rows["http_server"], 6) == 0.27
    assert round(sum(rows.values()), 6) == 0.6
    assert buckets.per_request({**m, "native_cpu_share": None})[buckets.NATIVE] == 0
    assert buckets.per_request({**m, "cpu_share_json": None}) is None  # not profiled


SPINNER = """
import threading, time
def spin(seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass
def named():
    tid = threading.get_native_id()
    with open(f"/proc/self/task/{tid}/comm", "w") as f:
        f.write("tokio-rt-worker")
    print("ready", flush=True)
    spin(1.5)
t = threading.Thread(target=named)
t.start()
spin(0.2)
t.join()
"""


def test_thread_cpu_is_read_by_thread_name_from_proc(tmp_path):
    """A real process whose one thread, named as granian's Rust runtime names its threads,
    spins while the main thread mostly waits: threads.json holds both names, and the
    native share is that thread's."""
    child = subprocess.Popen([sys.executable, "-c", SPINNER], stdout=subprocess.PIPE,
                             text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        with threads.window([child.pid], tmp_path):
            time.sleep(1.0)
    finally:
        child.wait(timeout=10)
        child.stdout.close()
    found = threads.read(tmp_path)
    assert set(threads.NATIVE) <= set(found), found
    share = threads.native_share(found)
    assert 0.7 < share <= 1.0, found
    assert threads.native_share({}) is None and threads.read(tmp_path / "none") is None
