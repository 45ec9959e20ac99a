"""setup/cpu-check.sh, which `make image-test` runs first inside the container: fewer
than 2 usable CPUs stop it with one line that says how to give more."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from benchmarks import stages

SCRIPT = stages.ROOT / "setup" / "cpu-check.sh"


def cpu_check(*prefix: str) -> subprocess.CompletedProcess:
    return subprocess.run([*prefix, "sh", str(SCRIPT)], capture_output=True, text=True,
                          timeout=30)


@pytest.mark.skipif(not shutil.which("taskset"), reason="needs taskset (util-linux)")
def test_one_cpu_stops_with_one_line_that_says_how_to_give_more():
    one = str(min(os.sched_getaffinity(0)))
    proc = cpu_check("taskset", "-c", one)  # as `docker run --cpuset-cpus 0` would
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("cpu-check: 1 usable CPU here"), lines
    for fix in ("Docker Desktop: Settings > Resources > CPUs", "docker run --cpus 2"):
        assert fix in lines[0], lines


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="this box lets this test "
                    "use fewer than 2 CPUs")
def test_two_cpus_pass():
    proc = cpu_check()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("cpu-check: ") and "usable CPUs" in proc.stdout
