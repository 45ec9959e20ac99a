"""A server that dies is said, not served (issue 43, part 1).

Stage 9's granian runs with --respawn-failed-workers: a killed worker is replaced. Its
own guard stays: a worker that dies again within 5.5 s of being respawned makes granian
exit ("Worker crash loop detected"). Then the stage is down, and `lab up` says so and
stops instead of announcing a stage that answers nothing. The crash twins 8k and 9k
under load: test_lab.py's full run (test_the_crash_twins_come_back_...).
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

from benchmarks import checks, stages
from benchmarks.analysis import metrics
from benchmarks.run import crash
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


def workers(main: psutil.Process) -> list[int]:
    """The pids of its live workers, in one look: a killed worker stays a zombie child
    until granian reaps it (two calls to children() once saw it, then nothing)."""
    pids = []
    for child in main.children():
        try:
            if child.status() != psutil.STATUS_ZOMBIE:
                pids.append(child.pid)
        except psutil.NoSuchProcess:
            pass
    return pids


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
        (worker,) = workers(main)
        os.kill(worker, signal.SIGKILL)
        wait_until(lambda: workers(main) not in ([], [worker]), 10)
        wait_until(lambda: procs.answers(health), 10)  # a new worker serves
        assert up.poll() is None
        # killed again within 5.5 s of its respawn: granian takes it for a crash loop
        # and exits; `lab up` notices within its second
        (respawned,) = workers(main)
        os.kill(respawned, signal.SIGKILL)
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


def test_the_recovery_limit_is_5_s_or_the_boxs_own_start_up_where_longer():
    """The crash twins' checks allow 5 s, or as long as the lab took to start the
    stage's servers on this box (a new worker imports the app as the first ones did):
    the run's figure raises the threshold, never lowers it, and the check says which."""
    assert crash.limit_for(None) == crash.limit_for(1.2) == checks.RECOVERY_LIMIT_S == 5
    assert crash.limit_for(7.34) == 7.3
    back = checks.HTTP_BACK
    assert back.raised_by == "crash_recovery_limit_s" in crash.METRICS
    quick, slow = {"crash_recovery_limit_s": 5.0}, {"crash_recovery_limit_s": 7.3}
    assert back.expected() == back.expected(quick) == "crash_http_recovery_s <= 5"
    assert back.expected(slow) == "crash_http_recovery_s <= 7.3"
    assert not back.passes(5.78, metrics=quick) and back.passes(5.78, metrics=slow)
    assert not back.passes(7.4, metrics=slow) and not back.passes(None, metrics=slow)
    # evaluated as the lab does, from the stage's metrics
    figures = {"requests": 10, "failures": 0, "crash_http_recovery_s": 5.78,
               "crash_socketio_recovery_s": 4.0, "crash_acked_lost": 0,
               "crash_recovery_limit_s": 7.3}
    judged = {c["name"]: c for c in metrics.evaluate(stages.get("9k"), figures)}
    assert judged["crash_http_recovery_s"]["passed"], judged
    assert judged["crash_http_recovery_s"]["expected"] == "crash_http_recovery_s <= 7.3"


def test_the_limit_is_5_s_past_the_servers_own_return_where_that_is_later():
    """crash.recovery_limit: a new worker imports the app under the stage's load, which
    on a slow box takes longer than the stage's start did; the client's part stays 5 s
    past its server's first answer, and the probe waits while a server has not answered."""
    assert crash.recovery_limit(5.0, [0.8, 1.4]) == 6.4
    assert crash.recovery_limit(7.3, [0.5]) == 7.3  # the start-up's figure, when longer
    assert crash.recovery_limit(5.0, [9.8, 2.0]) == 14.8  # the slowest server's
    assert crash.recovery_limit(5.0, [2.0, None]) == crash.MAX_LIMIT_S  # one not back yet


def test_the_probe_refuses_a_server_url_outside_the_lab_or_one_short(tmp_path):
    users = tmp_path / "users.json"
    users.write_text("[]")
    for servers, said in (("http://198.18.0.30:8000,http://198.18.0.30:8001",
                           "in the lab's range"),
                          ("http://127.0.0.1:9", "1 URL(s) for 2 --kill pid(s)")):
        result = subprocess.run(
            [sys.executable, "-m", "benchmarks.run.crash", "http://127.0.0.1:9",
             "--users-file", str(users), "--kill", "1,2", "--servers", servers,
             "--kill-after", "1", "--duration", "3"], cwd=stages.ROOT, capture_output=True,
            text=True, timeout=60)
        assert result.returncode == 2 and said in result.stderr, result


def test_the_probe_refuses_a_limit_below_5_s_or_past_its_largest(tmp_path):
    users = tmp_path / "users.json"
    users.write_text("[]")
    for limit in ("4", "121"):
        result = subprocess.run(
            [sys.executable, "-m", "benchmarks.run.crash", "http://127.0.0.1:9",
             "--users-file", str(users), "--kill", "1", "--kill-after", "1", "--duration",
             "3", "--limit", limit], cwd=stages.ROOT, capture_output=True, text=True,
            timeout=60)
        assert result.returncode == 2, result
        assert "--limit must be 5 to 120 s" in result.stderr, result.stderr
