"""What else ran (benchmarks/capture/cpu_sets.py): a real busy loop pinned to a CPU, seen
by the sampler's `foreign_cpu_*`, by the pre-flight, and flagged in a lab run's report.

Seed 000's lesson measured: a neighbour on the server's core costs throughput, and the
lab says so rather than letting the stage's number stand for the stage.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest

from benchmarks.analysis import metrics
from benchmarks.capture import cpu_sets, csvfile, loop
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
    unowned = min(r["foreign_cpu_unowned"] for r in rows)
    owned = max(r["foreign_cpu_owned"] for r in rows)
    spun = min(r["cpu_spin"] for r in rows)
    assert unowned >= 90, rows  # the CPU never idles while the loop spins
    assert spun >= 30 and owned <= unowned - 30, rows


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
            found = cpu_sets.at_rest(1.0, {"server": {SERVER_CPU}}, exclude=other.pid)
            ours = cpu_sets.at_rest(1.0, {"server": {SERVER_CPU}})
        finally:
            other.kill()
    assert found["busy_pct"]["server"] >= 60, found
    top = found["busiest"][0]
    assert top["pid"] == spin.pid and top["cpu_pct"] >= 30 and "python" in top["name"], found
    assert spin.pid not in {p["pid"] for p in ours["busiest"]}, ours  # the test's own child


@pytest.mark.netns
@pytest.mark.slow
def test_a_busy_neighbour_on_the_server_core_is_flagged_with_the_throughput_lost(tmp_path):
    with busy_loop(60):
        run = subprocess.run(
            [sys.executable, "-m", "benchmarks.lab", "run", "--stages", "2", "--duration",
             "4", "--warmup", "1", "--users", "10", "--no-screenshots", "--results",
             str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert "pre-flight" in run.stdout and "busiest other processes: " in run.stdout
    run_dir = next(p for p in tmp_path.iterdir() if p.is_dir() and p.name[:1].isdigit())
    info = results.run_info(run_dir)
    assert info["at_rest"]["busy_pct"]["server"] >= 60, info["at_rest"]
    m = json.loads((run_dir / "02-connection-pool" / results.METRICS_JSON).read_text())
    assert m["foreign_cpu_pct"] > metrics.FOREIGN_CPU_LIMIT, m["foreign_cpu_pct"]
    assert m["foreign_cpu_p95"] >= m["foreign_cpu_pct"]
    report = (run_dir / results.REPORT_MD).read_text()
    section = report.split("## What else ran")[1].split("\n## ")[0]
    estimate = metrics.neighbour_cost(m)
    assert estimate > m["rps"]
    assert f"**02-connection-pool**: other processes used {m['foreign_cpu_pct']:g}%" in section
    assert f"answer about {estimate:g}" in section
