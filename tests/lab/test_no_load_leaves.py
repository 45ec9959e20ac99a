"""No load leaves the machine: a lab address from the machine's own network goes nowhere.

Two layers: while a lab runs, the network it was started from has `unreachable
198.18.0.0/15` (benchmarks/sandbox/unreachable.py), so any tool fails at once;
and the project's locustfiles and scripts refuse a lab address unless they run
on a lab host (benchmarks/lab_range.py), with the `lab exec` line to use.

No test here sends to the range from the machine's own network. The "machine"
of these tests is a namespace of their own (`ftlt-<pid>-<n>`, not a lab's),
whose default route leads into a veth pair with nobody behind it: whatever the
code does, nothing leaves, and the lab's route and lock there are the test's
alone, whatever other labs run beside the suite. The test with a real `lab up`
in the machine's own namespace is in test_lab_stops.py.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks import lab_range
from benchmarks.sandbox import hosts, procs, unreachable
from benchmarks.stages import ROOT

_count = itertools.count()


def ip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)


@pytest.fixture
def machine():
    """A stand-in for the machine's own network: a default route to nowhere."""
    name = f"ftlt-{os.getpid()}-{next(_count)}"
    assert not name.startswith(hosts.NS_PREFIX)   # never taken for a lab's namespace
    for args in (["netns", "add", name],
                 ["-n", name, "link", "set", "lo", "up"],
                 ["-n", name, "link", "add", "v0", "type", "veth", "peer", "name", "v1"],
                 ["-n", name, "addr", "add", "10.254.0.1/24", "dev", "v0"],
                 ["-n", name, "link", "set", "v0", "up"],
                 ["-n", name, "link", "set", "v1", "up"],
                 ["-n", name, "route", "add", "default", "via", "10.254.0.2"]):
        made = ip(*args)
        assert made.returncode == 0, (args, made.stderr)
    try:
        yield name
    finally:
        hosts.stop_processes([name])
        ip("netns", "del", name)


def routes(machine: str) -> str:
    """The namespace's routes, every table, less those the kernel adds on its own (`proto
    kernel`: a link's own subnet, and the IPv6 link-local route it adds a moment after
    a link comes up, which once appeared between two readings)."""
    shown = ip("-n", machine, "route", "show", "table", "all").stdout
    return "".join(ln + "\n" for ln in shown.splitlines() if "proto kernel" not in ln)


def route_get(machine: str) -> subprocess.CompletedProcess:
    return ip("-n", machine, "route", "get", "198.18.0.30")


# A lab's network, held from inside `machine` until a signal (at most 60 s).
HOLDER = r"""
import os, sys, time
from benchmarks.sandbox import hosts
with hosts.Network(sys.argv[1], ["client"]):
    open(sys.argv[2], "w").close()
    time.sleep(60)
"""


def start_holder(machine: str, tmp_path: Path, tag: str):
    ready, log = tmp_path / f"ready-{tag}", tmp_path / f"holder-{tag}.log"
    proc = procs.start(["ip", "netns", "exec", machine, sys.executable, "-c", HOLDER, tag,
                        str(ready)], log=log, cwd=ROOT)
    deadline = time.monotonic() + 30
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            procs.stop(proc)
            hosts.clean(owners=[proc.pid], kill_orphans=True)
            pytest.fail(f"the holder did not get ready: {log.read_text()}")
        time.sleep(0.05)
    return proc, log


def stop_holder(proc, *signals: int) -> None:
    """Signal the holder and wait until it has removed its network. 60 s: removing a
    network namespace and its links waits on the kernel's netlink lock, which the
    suite's other labs take as they make and remove theirs (a holder in the full suite
    once took over 30 s; alone, well under 1 s)."""
    for sig in signals:
        os.kill(proc.pid, sig)
    proc.wait(timeout=60)
    hosts.clean(owners=[proc.pid], kill_orphans=True)


CONNECT = r"""
import json, socket, sys, time
s = socket.socket()
s.settimeout(5)
t = time.monotonic()
try:
    s.connect(("198.18.0.30", 8000))
    print(json.dumps({"connected": True}))
except OSError as e:
    print(json.dumps({"errno": e.errno, "seconds": time.monotonic() - t}))
"""


@pytest.mark.netns
def test_while_labs_run_the_range_is_unreachable_and_the_last_one_out_removes_it(
        machine, tmp_path):
    before = routes(machine)
    assert "via 10.254.0.2" in route_get(machine).stdout   # the way out, as on a machine
    first, _ = start_holder(machine, tmp_path, "one")
    second, _ = start_holder(machine, tmp_path, "two")
    try:
        got = route_get(machine)
        assert got.returncode != 0 and "No route to host" in got.stderr, got
        assert f"unreachable {lab_range.BENCHMARK_NET} proto {unreachable.PROTO}" in \
            routes(machine)
        # only now, with the route in place: a connect from the machine fails at once
        tried = subprocess.run(["ip", "netns", "exec", machine, sys.executable, "-c", CONNECT],
                               capture_output=True, text=True, timeout=30)
        answer = json.loads(tried.stdout)
        assert answer.get("errno") == 113 and answer["seconds"] < 1, answer  # EHOSTUNREACH
        stop_holder(first, signal.SIGINT)
        assert route_get(machine).returncode != 0, "the second lab still runs"
        stop_holder(second, *[signal.SIGINT] * 4)   # Ctrl-C four times
        assert routes(machine) == before
    finally:
        for proc in (first, second):
            procs.stop(proc)
            hosts.clean(owners=[proc.pid], kill_orphans=True)


@pytest.mark.netns
def test_after_kill_9_the_route_stays_until_lab_clean(machine, tmp_path):
    before = routes(machine)
    holder, _ = start_holder(machine, tmp_path, "nine")
    try:
        holder.kill()
        holder.wait(timeout=10)
        assert route_get(machine).returncode != 0, "a dead lab's route stays: safe"
        cleaned = subprocess.run(["ip", "netns", "exec", machine, sys.executable, "-m",
                                  "benchmarks.lab", "clean"], capture_output=True, text=True,
                                 timeout=60, cwd=ROOT)
        assert cleaned.returncode == 0, cleaned.stdout + cleaned.stderr
        assert "deleted the route" in cleaned.stdout, cleaned.stdout
        assert routes(machine) == before
        assert hosts.owned_namespaces(holder.pid) == []
    finally:
        procs.stop(holder)
        hosts.clean(owners=[holder.pid], kill_orphans=True)


@pytest.mark.netns
def test_a_route_the_machine_has_for_the_range_is_never_replaced(machine, tmp_path):
    made = ip("-n", machine, "route", "add", "198.18.0.0/16", "via", "10.254.0.3")
    assert made.returncode == 0, made.stderr
    before = routes(machine)
    ready, log = tmp_path / "ready", tmp_path / "holder.log"
    proc = procs.start(["ip", "netns", "exec", machine, sys.executable, "-c", HOLDER, "vpn",
                        str(ready)], log=log, cwd=ROOT)
    try:
        proc.wait(timeout=30)
        output = log.read_text()
        assert proc.returncode != 0 and not ready.exists()
        assert "already routes part of the lab's range 198.18.0.0/15: 198.18.0.0/16 via " \
            "10.254.0.3" in output, output
        assert routes(machine) == before
        assert hosts.owned_namespaces(proc.pid) == []
    finally:
        procs.stop(proc)
        hosts.clean(owners=[proc.pid], kill_orphans=True)


# --- the second layer: the project's own tools refuse -------------------------------

LOCUST = [sys.executable, "-m", "locust", "--headless", "-u", "1", "-r", "1", "-t", "3s",
          "--host", "http://198.18.0.30:8000"]


@pytest.mark.netns
@pytest.mark.parametrize("locustfile, users", [
    ("benchmarks/chat.py", ["ChatUser"]),
    ("benchmarks/kv.py", []),
    ("benchmarks/arrivals.py", ["ArrivalUser"]),
])
def test_each_locustfile_refuses_a_lab_address_from_outside_the_lab(machine, locustfile,
                                                                    users):
    """From the machine's network (ours: a way out that leads nowhere), with no lab up:
    the locustfile itself refuses, before any request, with the line to use instead."""
    ran = subprocess.run(["ip", "netns", "exec", machine, *LOCUST[:3], "-f", locustfile,
                          *LOCUST[3:], *users], capture_output=True, text=True, timeout=60,
                         cwd=ROOT)
    assert ran.returncode == 1, ran.stdout + ran.stderr
    lines = [ln for ln in ran.stderr.splitlines() if ln.startswith("locust: http://198.18")]
    assert len(lines) == 1, ran.stderr
    assert "is in the lab's range 198.18.0.0/15" in lines[0]
    assert lines[0].endswith(f"python -m benchmarks.lab exec -- locust -f {locustfile} "
                             f"{' '.join(LOCUST[3:] + users)}"), lines[0]
    assert "Traceback" not in ran.stderr and "Aggregated" not in ran.stdout + ran.stderr


GUARD = r"""
import locust  # first: it patches the standard library for gevent
from locust.env import Environment
from locust.event import Events
from locust.exception import StopTest
from benchmarks import lab_range

events = Events()   # Locust's own kind, as each locustfile's guard gets it
lab_range.guard_locust(events)
lab_range.guard_locust(events)   # the locustfiles import each other: still one guard
env = Environment(events=events, host="http://198.18.0.31:8000")
try:
    events.init.fire(environment=env, runner=None, web_ui=None)
    print("init let it through")
except SystemExit as e:
    print("init:", e)
try:   # a host typed into the web UI's form: refused as the test starts
    events.test_start.fire(environment=env)
    print("start let it through")
except StopTest:
    print("start: stopped, exit code", env.process_exit_code)
fine = Environment(events=events, host="http://127.0.0.1:8000")
events.init.fire(environment=fine, runner=None, web_ui=None)
events.test_start.fire(environment=fine)
print("loopback: fine")
"""


def test_the_guard_refuses_in_process_before_any_user_starts():
    """Outside any lab host, as Locust calls it: no runner, no user, no request."""
    ran = subprocess.run([sys.executable, "-c", GUARD], capture_output=True, text=True,
                         timeout=60, cwd=ROOT)
    lines = ran.stdout.splitlines()
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert lines[0].startswith("init: locust: http://198.18.0.31:8000: 198.18.0.31 is in "
                               "the lab's range"), lines
    assert lines[1:] == ["start: stopped, exit code 1", "loopback: fine"], lines
    assert ran.stderr.count("198.18.0.31 is in the lab's range") == 1, ran.stderr  # logged
