"""`make setup`'s pre-flight (setup/preflight.sh): what a box lacks is said in one line
with its fix, before anything is installed."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile

import pytest

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
