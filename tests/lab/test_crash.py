"""A server that dies is said, not served (issue 43, part 1).

Stage 9's granian runs with --respawn-failed-workers: a killed worker is replaced. Its
own guard stays: a worker that dies again within 5.5 s of being respawned makes granian
exit ("Worker crash loop detected"). Then the stage is down, and `lab up` says so and
stops instead of announcing a stage that answers nothing.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest
from conftest import ctrl_c, read_until
from test_lab import leftovers, start_lab

from benchmarks import stages
from benchmarks.run.stack import Stack
from benchmarks.sandbox import procs


def wait_until(what, seconds: float) -> float:
    """Seconds until `what()` is true; AssertionError after `seconds`."""
    start = time.monotonic()
    while not what():
        assert time.monotonic() - start < seconds, f"not within {seconds} s"
        time.sleep(0.05)
    return time.monotonic() - start


def granian(lab_pid: int) -> psutil.Process:
    """The granian main process a lab started (its child, in host mode)."""
    (main,) = [p for p in psutil.Process(lab_pid).children()
               if "granian" in " ".join(p.cmdline()[:2])]
    return main


@pytest.mark.slow
def test_granian_replaces_a_killed_worker_and_lab_up_says_when_it_gives_up(tmp_path):
    results = tmp_path / "results"
    up = start_lab("up", "9", "--sandbox", "host", "--results", str(results),
                   "--ui-port", "0")
    try:
        seen = read_until(up, "Ctrl-C stops it")
        assert "Ctrl-C stops it" in seen, seen
        state = json.loads((results / "up.json").read_text())
        health = f"http://127.0.0.1:{state['hosts']['app']['port']}/healthz"
        main = granian(up.pid)
        (worker,) = main.children()
        os.kill(worker.pid, signal.SIGKILL)
        wait_until(lambda: main.children() and main.children()[0].pid != worker.pid, 10)
        wait_until(lambda: procs.answers(health), 10)  # a new worker serves
        assert up.poll() is None
        # killed again within 5.5 s of its respawn: granian takes it for a crash loop
        # and exits; `lab up` notices within its second
        os.kill(main.children()[0].pid, signal.SIGKILL)
        rest = up.communicate(timeout=30)[0]
    finally:
        if up.poll() is None:
            rest = ctrl_c(up)
    assert up.returncode == 1, rest
    assert "lab: granian (stage 9's app server) exited (code " in rest, rest
    assert "): the stage is down; see " in rest, rest
    assert "Worker crash loop detected" in (results / "up" / "09-rust-http-server" /
                                           "app.log").read_text()
    assert leftovers(up.pid) == []
    assert not (results / "up.json").exists()


def test_down_names_the_first_server_that_exited_and_how(tmp_path):
    """Stack.down, which `lab up` asks each second and `lab run` while it measures."""
    stack = Stack(stages.get("9"), None, tmp_path)
    started = {"redis": ["sleep", "30"], "app": ["sleep", "30"],
               "app_socketio": ["sh", "-c", "exit 3"]}
    for name, cmd in started.items():
        stack.procs[name] = subprocess.Popen(cmd)
        stack.roles[name], stack.programs[name] = "app", cmd[0]
    try:
        stack.procs["app_socketio"].wait(timeout=10)
        assert stack.down() == ("sh (stage 9's Socket.IO server) exited (code 3): the stage "
                                f"is down; see {tmp_path / 'app_socketio.log'}")
        del stack.procs["app_socketio"]
        assert stack.down() is None
        stack.procs["app"].kill()
        stack.procs["app"].wait(timeout=10)
        assert stack.down().startswith("sleep (stage 9's app server) exited (killed by "
                                       "SIGKILL)")
    finally:
        for proc in stack.procs.values():
            proc.kill()
            proc.wait(timeout=10)


# The crash twins alone (their checks are the client's view of the crash, not a
# comparison with their base stages, so the lab's rule that a twin runs beside its base
# is left out here to keep the suite short): the runner's own run_stages, in a process
# of its own, as `lab run` would call it.
RUN_TWINS = """
import sys
from pathlib import Path
from benchmarks import stages
from benchmarks.run import options, runner
opts = options.RunOptions(stages=tuple(map(stages.get, sys.argv[2].split(","))),
                          duration=6, warmup=0, users=20, sandbox="netns", profile=False,
                          results=Path(sys.argv[1]))
done, failed = runner.run_stages(opts, Path(sys.argv[1]))
sys.exit(1 if failed else 0)
"""


@pytest.mark.netns
@pytest.mark.slow
def test_the_crash_twins_come_back_with_nothing_acknowledged_lost(tmp_path):
    """8k and 9k under load: a worker of each server killed 2 s into the window; HTTP
    and Socket.IO answer again within the stated time, and every message answered 201
    reaches the room's member (benchmarks/run/crash.py)."""
    run = subprocess.run([sys.executable, "-c", RUN_TWINS, str(tmp_path), "8k,9k"],
                         cwd=stages.ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    for key in ("8k", "9k"):
        folder = tmp_path / stages.get(key).dirname
        probe = json.loads((folder / "crash.json").read_text())
        assert len(probe["killed_workers"]) == len(stages.get(key).commands()), probe
        assert probe["acked"] > 0 and probe["acked_lost"] == 0, probe
        checks = json.loads((folder / "checks.json").read_text())
        assert [c["name"] for c in checks] == [
            "crash_http_recovery_s", "crash_socketio_recovery_s", "crash_acked_lost"]
        assert all(c["passed"] for c in checks), checks
    # granian's worker is its listener too (SO_REUSEPORT, one socket a worker): while
    # it is dead, Nginx's connects are refused; gunicorn's master keeps the listener
    refused = (tmp_path / stages.get("9k").dirname / "nginx" / "error.log").read_text()
    assert "(111: Connection refused) while connecting to upstream" in refused
    kept = (tmp_path / stages.get("8k").dirname / "nginx" / "error.log").read_text()
    assert "(111: Connection refused)" not in kept
