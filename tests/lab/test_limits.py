"""Descriptors and threads as named limits (benchmarks/run/limits.py, lab 16).

Under the soft limit most boxes give a shell (`ulimit -Sn 1024`, Debian's and so a VM's
`sudo lab`), every lab command raises its own soft limit to the hard one, so the servers
it starts hold a websocket a descriptor up to the hard limit; a study that needs more
than the hard limit stops before it starts, with one line that names it and its fix.
Each command runs under `prlimit`, as a user's shell would set it, for that process only.
"""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from conftest import ctrl_c, read_until
from test_lab import leftovers

from benchmarks import stages
from benchmarks.run import limits

ROOT = stages.ROOT
HARD = resource.getrlimit(resource.RLIMIT_NOFILE)[1]


def under(soft: int, hard: int, *args: str) -> list[str]:
    return ["prlimit", f"--nofile={soft}:{hard}", "--", sys.executable, *args]


def test_a_study_past_the_hard_limit_stops_before_it_starts(tmp_path):
    done = subprocess.run(under(1024, 1024, "-m", "benchmarks.studies.capacity", "--stages",
                                "9", "--users", "2000", "--results", str(tmp_path)),
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout.strip().splitlines() == [
        "capacity: --users 2,000 (a descriptor a websocket) needs 3,024 descriptors and this "
        "shell's hard limit (ulimit -Hn) is 1,024: ulimit -Hn 3024 as root before the "
        "command (or nofile in /etc/security/limits.conf; lab 07)"], done.stdout
    assert not list(tmp_path.iterdir()), "a results run was made for bad input"


def test_the_lab_raises_its_soft_limit_to_the_hard_one():
    code = ("from benchmarks.run import cli, limits; "
            "print(cli.main('t', lambda a: print(limits.nofile()) or 0, None))")
    done = subprocess.run(under(1024, HARD, "-c", code), cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.stdout.split() == [str(HARD), "0"], done.stdout + done.stderr


def test_the_thread_cap_is_the_kernels_smaller_number(tmp_path):
    (tmp_path / "pid_max").write_text("32768\n")
    (tmp_path / "threads-max").write_text("191000\n")
    assert limits.kernel_number("pid_max", tmp_path) == 32768
    assert limits.kernel_number("missing", tmp_path) is None
    kernel = Path("/proc/sys/kernel")
    assert limits.thread_cap() == min(int((kernel / "pid_max").read_text()),
                                      int((kernel / "threads-max").read_text()))


@pytest.mark.slow
@pytest.mark.skipif(HARD < 20_000, reason=f"this box's hard limit is {HARD}: lab 07")
def test_lab_up_9_under_a_soft_limit_of_1024_gives_its_real_time_server_the_hard_one(
        tmp_path):
    """The real-time server of `lab up 9`, started under `ulimit -Sn 1024`, may hold as
    many websockets as the hard limit allows: its soft limit is the hard one."""
    up = subprocess.Popen(under(1024, HARD, "-m", "benchmarks.lab", "up", "9", "--sandbox",
                                "host", "--results", str(tmp_path), "--ui-port", "0"),
                          cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        seen = read_until(up, "Ctrl-C stops it")
        assert "Ctrl-C stops it" in seen, seen
        servers = [p for p in psutil.Process(up.pid).children(recursive=True)
                   if "gunicorn/today.conf.py" in " ".join(p.cmdline())]
        assert servers, seen
        assert {p.rlimit(psutil.RLIMIT_NOFILE)[0] for p in servers} == {HARD}
    finally:
        rest = ctrl_c(up)
    assert up.returncode == 130, rest
    assert leftovers(up.pid) == []
