"""Where the CPU goes (issue 18): py-spy on the app server, its flame graph, the buckets.

The classifier and the flame graph read real py-spy output: tests/lab/data/ holds
stacks recorded from stages 0 and 2 of a real lab run (the heaviest stack of each
bucket, and a Redis handshake's command). The rest runs real py-spy: on a busy
Python process, and in short lab runs (marked slow), with and without it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import psutil
import pytest
from test_lab import lab

from benchmarks import lab as lab_cli
from benchmarks import stages
from benchmarks.profile import buckets, flamegraph, folded, record
from benchmarks.run import options, results, runner

DATA = Path(__file__).parent / "data"
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


@pytest.mark.netns
@pytest.mark.slow
def test_a_stage_is_profiled_and_its_cpu_split(tmp_path):
    proc = lab("run", "--stages", "2", "--duration", "3", "--warmup", "1", "--no-screenshots",
               "--results", str(tmp_path), timeout=180)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    folder = (tmp_path / "latest").resolve() / stages.get("2").dirname
    assert (folder / results.PROFILE_SVG).read_text().startswith("<svg")
    stacks = (folder / results.PROFILE_STACKS).read_text()
    assert "SyncWorker.handle_request" in stacks  # a gunicorn worker, not only its master
    m = results.read_json(folder / results.METRICS_JSON)
    shares = [m[f"cpu_share_{b}"] for b in buckets.BUCKETS]
    assert sum(shares) == pytest.approx(1, abs=0.01)
    assert m["server_cpu_ms_per_request"] >= m["app_cpu_ms_per_request"] > 0
    checks = {c["name"]: c for c in results.read_json(folder / results.CHECKS_JSON)}
    assert checks["cpu_share_redis_connect"]["passed"], checks["cpu_share_redis_connect"]
    assert "py-spy" not in proc.stdout
    assert not runner.started_by(proc.pid)


def venv_without_py_spy(where: Path) -> Path:
    """The venv's view with every command but py-spy: its python (pyvenv.cfg beside it,
    so the same packages), flask, gunicorn, locust... The lab finds its tools there."""
    real = Path(sys.executable).parent
    (where / "bin").mkdir(parents=True)
    for tool in real.iterdir():
        if tool.name != record.PY_SPY:
            (where / "bin" / tool.name).symlink_to(tool)
    for name in ("lib", "pyvenv.cfg"):
        (where / name).symlink_to(real.parent / name)
    return where / "bin" / "python"


@pytest.mark.netns
@pytest.mark.slow
def test_without_py_spy_the_run_says_so_once_and_passes(tmp_path):
    python = venv_without_py_spy(tmp_path / "venv")
    path = f"{python.parent}:/usr/sbin:/usr/bin:/sbin:/bin"
    env = {**os.environ, "PATH": path}
    assert subprocess.run(["which", "py-spy"], env=env).returncode != 0
    proc = subprocess.run([str(python), "-m", "benchmarks.lab", "run", "--stages", "0,2",
                           "--duration", "3", "--warmup", "1", "--no-screenshots",
                           "--results", str(tmp_path / "results")],
                          cwd=stages.ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert proc.stdout.count("py-spy not found") == 1, proc.stdout
    assert record.INSTALL in proc.stdout
    run_dir = (tmp_path / "results" / "latest").resolve()
    for key in ("0", "2"):
        folder = run_dir / stages.get(key).dirname
        assert not (folder / results.PROFILE_SVG).exists()
        checks = results.read_json(folder / results.CHECKS_JSON)
        assert checks and all(c["passed"] for c in checks), checks
        assert "cpu_share_redis_connect" not in {c["name"] for c in checks}
