"""`make setup`'s pre-flight (setup/preflight.sh): what a box lacks is said in one line
with its fix, before anything is installed."""

from __future__ import annotations

import glob
import os
import runpy
import shutil
import subprocess
import tempfile

import pytest
from conftest import skip_unless_a_git_clone

from benchmarks import stages

ROOT = stages.ROOT
PREFLIGHT = ROOT / "setup" / "preflight.sh"


def preflight(*args, env=None, user=None, script=PREFLIGHT, cwd=ROOT
              ) -> subprocess.CompletedProcess:
    prefix = (["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups"]
              if user is not None else [])
    return subprocess.run([*prefix, "sh", str(script), *args], cwd=cwd, text=True,
                          capture_output=True, timeout=30,
                          env={**os.environ, "PYTHON_GIVEN": "1", **(env or {})})


def one_line(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 1, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("setup: "), result.stderr
    return lines[0]


def older_python() -> str | None:
    """A Python 3.10 on this machine (pyenv's, or the system's), if there is one."""
    found = sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.10*/bin/python3")))
    return found[0] if found else shutil.which("python3.10")


def test_a_python_older_than_3_11_stops_setup_with_the_fix():
    python = older_python()
    if python is None:
        pytest.skip("no Python 3.10 on this machine to try")
    line = one_line(preflight("box", python))
    assert "is Python 3.10" in line and "3.11 or newer" in line
    assert "make setup PYTHON=" in line
    # the README quotes it, as said of a `python3` that is 3.10
    quoted = line.replace(f"setup: {python} is", "setup: python3 is")
    assert quoted in (ROOT / "README.md").read_text().splitlines(), quoted


def test_a_missing_python_is_named():
    line = one_line(preflight("box", "python3.99-not-here"))
    assert "no python3.99-not-here" in line and "PYTHON=" in line


def test_without_root_it_gives_the_sudo_command():
    if os.geteuid() != 0:
        pytest.skip("needs root, to run the check as another user")
    # a copy the other user can read: a clone under /root or any mktemp -d is 0700
    folder = tempfile.mkdtemp(prefix="ftl-preflight-")
    try:
        os.chmod(folder, 0o755)
        copy = shutil.copy(PREFLIGHT, folder)
        line = one_line(preflight("box", "python3", user=65534, script=copy, cwd=folder))
    finally:
        shutil.rmtree(folder)
    assert "needs root" in line and "sudo make setup" in line


def test_this_box_passes_and_the_netns_check_leaves_nothing():
    ip = shutil.which("ip", path=os.environ["PATH"] + ":/usr/sbin:/sbin")
    if os.geteuid() != 0 or ip is None:
        pytest.skip("needs root and iproute2")
    assert preflight("box", "python3", env={"PYTHON_GIVEN": ""}).returncode == 0
    proc = subprocess.Popen(["sh", str(PREFLIGHT), "netns"], cwd=ROOT, text=True,
                            stderr=subprocess.PIPE)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert f"ftl-preflight-{proc.pid}" not in left  # its own namespace, deleted


# --- a checkout made on Windows -------------------------------------------------------

def test_a_windows_checkout_keeps_lf_and_its_install_starts(tmp_path):
    """Git for Windows checks out with core.autocrlf=true: .gitattributes keeps LF in
    every file the box runs, so the install's first steps (make's pre-flight and the
    system packages, the netns check) run from such a clone as from any other. It clones
    what is committed (HEAD)."""
    skip_unless_a_git_clone()
    clone = tmp_path / "clone"
    # -c after `clone`: kept in the clone's config, as Git for Windows' system config is
    cloned = subprocess.run(["git", "clone", "-q", "-c", "core.autocrlf=true", str(ROOT),
                             str(clone)], capture_output=True, text=True, timeout=120)
    assert cloned.returncode == 0, cloned.stderr
    files = subprocess.run(["git", "-C", str(clone), "ls-files", "--eol"],
                           capture_output=True, text=True, check=True).stdout.splitlines()
    # `i/lf w/crlf attr/...  path`: what the work tree got; captures (*.csv) stay as written
    crlf = [ln.split("\t")[-1] for ln in files if "w/crlf" in ln.split("\t")[0]
            and not ln.endswith(".csv")]
    assert crlf == [], crlf[:10]
    for name in ("Makefile", "Containerfile", "setup/preflight.sh", "setup/cloud-init.yaml",
                 "nginx/conf.d/socketio-split.conf"):
        assert b"\r" not in (clone / name).read_bytes(), name
    if os.geteuid() != 0 or shutil.which("make") is None:
        pytest.skip("the install's steps need root and make")
    ran = subprocess.run([shutil.which("make"), "-s", "preflight", "system-packages",
                          f"PYTHON={shutil.which('python3')}"], cwd=clone, text=True,
                         capture_output=True, timeout=120,
                         env={k: v for k, v in os.environ.items() if k != "MAKEFLAGS"})
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "Illegal option" not in ran.stderr
    netns = subprocess.run(["sh", "setup/preflight.sh", "netns"], cwd=clone, text=True,
                           capture_output=True, timeout=30)
    assert netns.returncode == 0, netns.stderr


# --- the CPUs a box gives the lab ------------------------------------------------------

def usable_cpus(prefix: list[str], mode: str = "cpus") -> subprocess.CompletedProcess:
    return subprocess.run([*prefix, "sh", str(PREFLIGHT), mode], cwd=ROOT, text=True,
                          capture_output=True, timeout=30)


def test_the_cpus_a_box_gives_count_its_affinity_and_its_cpu_quota(tmp_path):
    """`docker run --cpus 1` sets a CPU quota, not an affinity: both count. Here the
    affinity by taskset, the quota in a cgroup v1 of the test's own (this kernel's)."""
    if not shutil.which("taskset") or len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs taskset and 2 CPUs")
    # this process's own count: its affinity, or fewer under a quota (`make test-slow`
    # runs the suite in a cgroup of one CPU's time), read as gunicorn's config reads it
    own = runpy.run_path(str(ROOT / "gunicorn" / "today.conf.py"))["_cpus"]()
    assert usable_cpus([]).stdout.strip() == str(own)
    assert usable_cpus(["taskset", "-c", "0"]).stdout.strip() == "1"
    said = subprocess.run(["taskset", "-c", "0", "sh", str(PREFLIGHT), "netns"], cwd=ROOT,
                          text=True, capture_output=True, timeout=30)
    if said.returncode == 0:    # root, a netns here: the note, and the check goes on
        assert said.stderr.startswith("setup: note: this box gives the lab 1 CPU; it wants 2")
    # make image-test's `cpus` step: the same line, and it stops there (status 1)
    stop = usable_cpus(["taskset", "-c", "0"], "cpus-check")
    assert stop.returncode == 1 and stop.stderr.count("\n") == 1, stop
    for fix in ("Docker Desktop: Settings > Resources > CPUs", "docker run --cpus 2"):
        assert fix in stop.stderr
    assert usable_cpus([], "cpus-check").returncode == (0 if own >= 2 else 1)
    cpu = "/sys/fs/cgroup/cpu"
    if os.geteuid() != 0 or not os.path.exists(f"{cpu}/cpu.cfs_quota_us"):
        pytest.skip("the quota's part needs root and cgroup v1's cpu controller")
    group = f"{cpu}/ftl-cpus-{os.getpid()}"
    os.mkdir(group)
    try:
        for name, value in (("cpu.cfs_period_us", "100000"), ("cpu.cfs_quota_us", "100000")):
            with open(f"{group}/{name}", "w") as f:
                f.write(value)
        ran = usable_cpus(["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', group])
    finally:
        os.rmdir(group)     # empty again: its one process has exited
    assert ran.stdout.strip() == "1", ran.stderr
