"""What else ran (benchmarks/capture/cpu_sets.py): a real busy loop pinned to a CPU, seen
by the sampler's `foreign_cpu_*`, by the pre-flight, and flagged in a lab run's report.

Seed 000's lesson measured: a neighbour on the server's core costs throughput, and the
lab says so rather than letting the stage's number stand for the stage.
"""

from __future__ import annotations

import os
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest

from benchmarks import stages
from benchmarks.analysis import metrics
from benchmarks.capture import cpu_sets, csvfile, loop
from benchmarks.profile import record
from benchmarks.run import results
from benchmarks.sandbox import procs

ROOT = Path(__file__).resolve().parents[2]
SERVER_CPU = max(os.sched_getaffinity(0))  # the lab's default server core
SPIN = "import time\nend = time.monotonic() + {s}\nwhile time.monotonic() < end: pass\n"


@contextmanager
def busy_loop(seconds: float, cpu: int = SERVER_CPU):
    """A real neighbour: a Python loop spinning on `cpu`, bounded in time."""
    proc = subprocess.Popen(["taskset", "-c", str(cpu), sys.executable, "-c",
                             SPIN.format(s=seconds)], start_new_session=True)
    try:
        yield proc
    finally:
        procs.stop(proc)


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


def test_the_sampler_counts_a_loop_it_does_not_know_as_foreign(tmp_path):
    """Two sets on the same CPU, the loop a component of one: the other sees it all
    as foreign, the one that owns it sees the rest."""
    out = tmp_path / "s.csv"
    with busy_loop(6) as spin:
        cmd = loop.command(out, {}, {"spin": spin.pid}, interval=1.0, duration=3,
                           cpu_sets={"owned": (str(SERVER_CPU), ["spin"]),
                                     "unowned": (str(SERVER_CPU), [])})
        subprocess.run(cmd, cwd=ROOT, check=True, timeout=30, env=procs.child_env())
    rows = csvfile.rows(out)[1:]  # the first interval includes the loop's start-up
    # Each row against the loop's own CPU in it, not against 100%: on a slow or crowded
    # box (`make test-slow`) the loop gets only a share of its CPU
    assert min(r["cpu_spin"] for r in rows) >= 10, rows
    for r in rows:  # the set that does not own the loop counts all of it as foreign; the
        # owner counts the rest (the same /proc reading: equal to a rounding)
        assert r["foreign_cpu_unowned"] - r["foreign_cpu_owned"] == pytest.approx(
            r["cpu_spin"], abs=3), rows


def test_cpu_set_specs_are_checked():
    with pytest.raises(ValueError, match="no component 'nginx'"):
        cpu_sets.parse_cpu_sets(["server=0:nginx"], ["app"])
    with pytest.raises(ValueError, match="expected NAME=CPUS"):
        cpu_sets.parse_cpu_sets(["server=x:app"], ["app"])
    assert cpu_sets.parse_cpu_sets(["server=0:app,sampler"], ["app"]) == {
        "server": (frozenset({0}), ("app", "sampler"))}


def test_the_pre_flight_names_a_busy_process_but_not_the_labs_own():
    with busy_loop(5) as spin, subprocess.Popen(["sleep", "5"]) as other:
        try:
            found = cpu_sets.at_rest(1.0, {"server": {SERVER_CPU}}, exclude=other.pid,
                                     top=1000)
            ours = cpu_sets.at_rest(1.0, {"server": {SERVER_CPU}}, top=1000)
        finally:
            other.kill()
    # (another test may run something busier: the loop need not be the first)
    loop_row = next(p for p in found["busiest"] if p["pid"] == spin.pid)
    assert loop_row["cpu_pct"] >= 20 and "python" in loop_row["name"], found
    # the CPU is at least as busy as the loop made it (not a fixed 60%: on a half-speed
    # box the loop had 59% of it)
    assert found["busy_pct"]["server"] >= loop_row["cpu_pct"] - 5, found
    assert spin.pid not in {p["pid"] for p in ours["busiest"]}, ours  # the test's own child


@pytest.mark.netns
@pytest.mark.slow
def test_a_busy_box_without_py_spy_is_said_and_flagged_and_the_run_passes(tmp_path):
    """One run, two things a user meets on a real box: no py-spy (said once, every stage
    measured without profiles) and a busy loop on the server's core (named by the
    pre-flight, flagged in the report with the throughput it cost). Checks that read a
    rate may fail under the loop: they are not judged here."""
    python = venv_without_py_spy(tmp_path / "venv")
    env = {**os.environ, "PATH": f"{python.parent}:/usr/sbin:/usr/bin:/sbin:/bin"}
    assert subprocess.run(["which", "py-spy"], env=env).returncode != 0
    with busy_loop(60):
        run = subprocess.run([str(python), "-m", "benchmarks.lab", "run", "--stages", "2",
                              "--no-plots", "--duration", "3", "--warmup", "1", "--no-screenshots",
                              "--results", str(tmp_path / "results")],
                             cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert run.stdout.count("py-spy not found") == 1 and record.INSTALL in run.stdout
    assert "pre-flight" in run.stdout and "busiest other processes: " in run.stdout
    run_dir = (tmp_path / "results" / "latest").resolve()
    assert results.run_info(run_dir)["at_rest"]["busy_pct"]["server"] >= 60
    folder = run_dir / stages.get("2").dirname  # measured and checked, without a profile
    assert not (folder / results.PROFILE_SVG).exists()
    checks = results.read_json(folder / results.CHECKS_JSON)
    assert checks and "cpu_share_redis_connect" not in {c["name"] for c in checks}
    m = results.read_json(run_dir / "02-connection-pool" / results.METRICS_JSON)
    assert m["foreign_cpu_pct"] > metrics.FOREIGN_CPU_LIMIT, m["foreign_cpu_pct"]
    section = (run_dir / results.REPORT_MD).read_text().split("## What else ran")[1]
    section = section.split("\n## ")[0]
    estimate = metrics.neighbour_cost(m)
    assert estimate > m["rps"]
    assert f"**02-connection-pool**: other processes used {m['foreign_cpu_pct']:g}%" in section
    assert f"answer about {estimate:g}" in section
