"""gunicorn/today.conf.py starts a worker per CPU the server may really use: its
affinity, capped by its cgroup's CPU quota (issue 43, part 3).

The parser is read on sample cgroup trees (v2's cpu.max, v1's cfs files); then a real
gunicorn 27 loads the file inside a real cgroup limited to one CPU, on this 2-core
box, and the master's children are counted. This kernel mounts cgroup v1's cpu
controller (/sys/fs/cgroup/cpu); a box with only cgroup v2 skips that test and says so.
"""

from __future__ import annotations

import os
import runpy
import time
from pathlib import Path

import psutil
import pytest

from benchmarks import stages
from benchmarks.sandbox import procs

CONFIG = stages.ROOT / "gunicorn" / "today.conf.py"
CPUS = runpy.run_path(str(CONFIG))["_cpus"]
AFFINITY = len(os.sched_getaffinity(0))
V1 = Path("/sys/fs/cgroup/cpu")


def tree(tmp_path: Path, proc_cgroup: str, files: dict[str, str]) -> tuple[str, str]:
    """A sample /proc/self/cgroup and cgroup tree: (its proc file, its root)."""
    (tmp_path / "cgroup").write_text(proc_cgroup)
    for name, text in files.items():
        path = tmp_path / "fs" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return str(tmp_path / "cgroup"), str(tmp_path / "fs")


@pytest.mark.parametrize("cpu_max, wanted", [
    ("max 100000\n", AFFINITY),        # no quota: every CPU of the affinity
    ("150000 100000\n", 2),            # 1.5 CPUs: rounded up
    ("100000 100000\n", 1),
    ("20000 100000\n", 1),             # at least one
    ("800000 100000\n", AFFINITY),     # never more than the affinity
])
def test_cgroup_v2_cpu_max(tmp_path, cpu_max, wanted):
    if wanted == 2 and AFFINITY < 2:
        pytest.skip("needs 2 CPUs of affinity")
    proc, root = tree(tmp_path, "0::/kubepods/pod1/c1\n",
                      {"kubepods/pod1/c1/cpu.max": cpu_max})
    assert CPUS(proc, root) == wanted


def test_cgroup_v1_no_quota_and_a_parents_quota(tmp_path):
    unlimited = {"cpu,cpuacct/docker/c1/cpu.cfs_quota_us": "-1\n",
                 "cpu,cpuacct/docker/c1/cpu.cfs_period_us": "100000\n"}
    lines = "12:memory:/docker/c1\n4:cpu,cpuacct:/docker/c1\n0::/\n"
    proc, root = tree(tmp_path, lines, unlimited)
    assert CPUS(proc, root) == AFFINITY
    # a quota on a cgroup above the process's holds for it too
    tree(tmp_path, lines, {"cpu,cpuacct/docker/cpu.cfs_quota_us": "50000\n",
                           "cpu,cpuacct/docker/cpu.cfs_period_us": "100000\n"})
    assert CPUS(proc, root) == 1


def test_a_container_whose_tree_root_is_its_own_cgroup(tmp_path):
    """Docker without a cgroup namespace: /proc/self/cgroup names the host's path, which
    does not exist in the container's mount; the mount's root is the container's
    cgroup, and its quota counts."""
    proc, root = tree(tmp_path, "3:cpu:/docker/abc\n", {"cpu/cpu.cfs_quota_us": "100000\n",
                                                       "cpu/cpu.cfs_period_us": "100000\n"})
    assert CPUS(proc, root) == 1


HELLO = "def app(environ, start_response):\n" \
        "    start_response('200 OK', [('Content-Type', 'text/plain')])\n" \
        "    return [b'ok']\n"


def workers_started(tmp_path: Path, cgroup: Path | None) -> int:
    """Start gunicorn 27 with today.conf.py (in `cgroup` when given), wait until a worker
    answers, and count the master's children; the master and its workers are stopped
    after."""
    (tmp_path / "hello.py").write_text(HELLO)
    port = procs.free_port()
    log = tmp_path / f"gunicorn-{port}.log"
    gunicorn = [str(procs.environment_bin(stages.CURRENT) / "gunicorn"), "-c", str(CONFIG),
                "-b", f"127.0.0.1:{port}", "--no-control-socket", "--chdir", str(tmp_path),
                "hello:app"]
    # the shell joins the cgroup, then becomes gunicorn: the master and every worker
    # it forks are in it from the start, and today.conf.py is read inside it
    join = f"echo $$ > {cgroup / 'cgroup.procs'}; " if cgroup else ""
    master = procs.start(["sh", "-c", join + 'exec "$@"', "sh", *gunicorn], log=log)
    try:
        deadline = time.monotonic() + 30
        while not procs.answers(f"http://127.0.0.1:{port}/"):
            assert master.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "gunicorn did not answer in 30 s"
            time.sleep(0.2)
        time.sleep(1)  # the master forks its workers one after another
        children = psutil.Process(master.pid).children()
        assert log.read_text().count("Booting worker") == len(children), log.read_text()
        return len(children)
    finally:
        procs.stop(master, timeout=40)


@pytest.mark.skipif(os.geteuid() != 0 or not (V1 / "cpu.cfs_quota_us").exists(),
                    reason="needs root and cgroup v1's cpu controller at /sys/fs/cgroup/cpu")
def test_gunicorn_starts_one_worker_in_a_one_cpu_cgroup(tmp_path):
    if AFFINITY < 2 or CPUS() != AFFINITY:
        pytest.skip(f"needs 2+ CPUs and no quota on this process ({AFFINITY}, {CPUS()})")
    assert workers_started(tmp_path, None) == AFFINITY  # unlimited: a worker per CPU
    cgroup = V1 / f"ftl-test-{os.getpid()}"
    cgroup.mkdir()
    try:
        (cgroup / "cpu.cfs_period_us").write_text("100000")
        (cgroup / "cpu.cfs_quota_us").write_text("100000")  # one CPU's time per period
        assert workers_started(tmp_path, cgroup) == 1
    finally:
        cgroup.rmdir()  # empty now: gunicorn and its workers have exited
