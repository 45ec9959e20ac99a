"""The locks (setup/locks.py, `make lock`): each agrees with its requirements file, every
package in it carries a hash, a pin changed without `make lock` is refused before
anything is installed, and the venvs hold what their locks say."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import stages
from benchmarks.sandbox import procs
from setup import locks

ROOT = stages.ROOT
LOCKS = sorted(ROOT.glob("requirements*.lock"))


def test_every_requirements_file_has_its_lock_and_the_makefile_installs_them():
    wanted = {p.name for p in ROOT.glob("requirements*.txt")} - {"requirements-app.txt"}
    assert {locks.requirements_of(p).name for p in LOCKS} == wanted
    makefile = (ROOT / "Makefile").read_text()
    for environment in stages.ENVIRONMENTS.values():
        lock = Path(environment.requirements).with_suffix(".lock").name
        assert f"--require-hashes -r {lock}" in makefile, lock
        assert re.search(rf"^LOCKS :=.*\b{re.escape(lock)}\b", makefile, re.M), lock


@pytest.mark.parametrize("lock", LOCKS, ids=lambda p: p.name)
def test_each_lock_agrees_with_its_requirements_file(lock):
    assert locks.problems(lock) == []
    pinned = locks.requested(locks.requirements_of(lock))
    locked = locks.locked(lock)
    for name, version in pinned.items():
        assert version and locked[name]["versions"] == {version}, name
    if "notebooks" not in lock.name:  # read through `-r requirements-app.txt`
        assert pinned["flask"] and pinned["python-socketio"]


@pytest.mark.parametrize("lock", LOCKS, ids=lambda p: p.name)
def test_every_locked_package_carries_a_hash(lock):
    entries = locks.locked(lock)
    assert len(entries) >= 20
    assert all(e["hashes"] for e in entries.values())
    # and the lines say so: no pin without `--hash=` below it
    starts = [ln for ln in lock.read_text().splitlines() if ln and ln[0].isalnum()]
    assert len(starts) == sum(len(e["versions"]) for e in entries.values())
    assert lock.read_text().count("--hash=sha256:") >= len(starts)


def copy_of_the_locked_files(into: Path) -> Path:
    for path in (*ROOT.glob("requirements*"), ROOT / "Makefile"):
        shutil.copy(path, into)
    shutil.copytree(ROOT / "setup", into / "setup", ignore=shutil.ignore_patterns("__pycache__"))
    return into


def change_pin(path: Path, name: str, version: str) -> str:
    """A pin changed by hand, `make lock` not run; the version it had."""
    text = path.read_text()
    was = re.search(rf"^{name}==(\S+)", text, re.M)[1]
    path.write_text(re.sub(rf"^{name}==\S+", f"{name}=={version}", text, flags=re.M))
    return was


def test_a_pin_changed_without_make_lock_fails_the_check(tmp_path):
    folder = copy_of_the_locked_files(tmp_path)
    lock = folder / "requirements-eventlet.lock"
    assert locks.problems(lock) == []
    was = change_pin(folder / "requirements-eventlet.txt", "eventlet", "0.40.0")
    said = locks.problems(lock)
    assert said == ["requirements-eventlet.txt pins eventlet==0.40.0, "
                    f"requirements-eventlet.lock has {was}"]
    done = subprocess.run([sys.executable, "setup/locks.py", "requirements.lock",
                           "requirements-eventlet.lock"], cwd=folder, capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 1
    assert done.stdout.splitlines() == [f"setup: stale lock: {said[0]}: make lock "
                                        "(then commit the lock)"]


@pytest.mark.skipif(os.geteuid() != 0, reason="the pre-flight wants root")
def test_make_setup_refuses_a_stale_lock_before_installing_anything(tmp_path):
    folder = copy_of_the_locked_files(tmp_path)
    flask = change_pin(folder / "requirements-app.txt", "flask", "3.0.0")  # both read it
    eventlet = change_pin(folder / "requirements-eventlet.txt", "eventlet", "0.40.0")
    done = subprocess.run(["make", "-s", "install", f"PYTHON={sys.executable}"], cwd=folder,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    said = [ln for ln in done.stdout.splitlines() if ln.startswith("setup: ")]
    assert said == [
        f"setup: stale lock: requirements.txt pins flask==3.0.0, requirements.lock has {flask}:"
        " make lock (then commit the lock)",
        "setup: stale lock: requirements-eventlet.txt pins flask==3.0.0, "
        f"requirements-eventlet.lock has {flask}: make lock (then commit the lock)",
        "setup: stale lock: requirements-eventlet.txt pins eventlet==0.40.0, "
        f"requirements-eventlet.lock has {eventlet}: make lock (then commit the lock)",
    ], done.stdout + done.stderr
    assert not list(folder.glob(".venv*"))


def test_a_requirement_dropped_without_make_lock_fails_the_check(tmp_path):
    """The lock would still install it (JupyterLab in .venv, before .venv-notebooks)."""
    folder = copy_of_the_locked_files(tmp_path)
    path = folder / "requirements.txt"
    path.write_text(re.sub(r"^ruff==\S+\n", "", path.read_text(), flags=re.M))
    assert locks.problems(folder / "requirements.lock") == [
        "requirements.lock still has ruff, which requirements.txt no longer asks for"]


def test_a_lock_without_hashes_fails_the_check(tmp_path):
    folder = copy_of_the_locked_files(tmp_path)
    lock = folder / "requirements-eventlet.lock"
    lines = lock.read_text().splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.startswith("gunicorn=="))
    lines[at] = lines[at].rstrip(" \\")
    while lines[at + 1].strip().startswith("--hash="):
        del lines[at + 1]
    lock.write_text("\n".join(lines) + "\n")
    assert locks.problems(lock) == ["requirements-eventlet.lock has no hash for gunicorn"]


@pytest.mark.parametrize("environment", list(stages.ENVIRONMENTS))
def test_each_venv_holds_what_its_lock_says(environment):
    """pip freeze against the lock: every installed package at a locked version, nothing
    the lock lacks (a package locked only for another platform is not installed)."""
    lock = ROOT / Path(stages.ENVIRONMENTS[environment].requirements).with_suffix(".lock")
    python = procs.environment_bin(environment) / "python"
    frozen = subprocess.run([str(python), "-m", "pip", "freeze", "--all"], capture_output=True,
                            text=True, timeout=60).stdout.splitlines()
    installed = dict(ln.split("==") for ln in frozen if "==" in ln)
    locked = locks.locked(lock)
    assert len(installed) >= 20
    for name, version in installed.items():
        name = locks.normalize(name)
        if name in locks.VENV_OWN:
            continue
        assert name in locked, f"{name} is installed, {lock.name} does not lock it"
        assert version in locked[name]["versions"], (name, version, locked[name])
