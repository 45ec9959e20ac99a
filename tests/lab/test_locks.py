"""The locks (setup/locks.py, `make lock`): each agrees with its requirements file, every
package in it carries a hash, a pin changed without `make lock` is refused before
anything is installed, and the venvs hold what their locks say; `make lock` compiles
against the index the box names, and a mirror of it gives the same lock."""

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
from setup import locks, package_sources

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


def test_a_servers_part_of_the_lock_keeps_its_pins_hashes_and_what_they_need(tmp_path):
    """`locks.py --subset` (setup/python314-root.sh's venv): what a requirements file pins
    and the packages named, with every package they need, each as the lock has it."""
    lock = ROOT / "requirements.lock"
    part = tmp_path / "server.lock"
    part.write_text(locks.subset(lock, [str(ROOT / "requirements-app.txt"), "gunicorn",
                                        "gevent"]))
    found = {e["name"]: e for e in locks.entries(part)}
    assert {"flask", "python-socketio", "gunicorn", "gevent", "greenlet", "zope-event",
            "zope-interface", "werkzeug", "markupsafe"} <= set(found)
    assert not set(found) & {"locust", "scipy", "granian", "pytest", "pandas"}
    whole = {(e["name"], e["version"]): e for e in locks.entries(lock)}
    for e in locks.entries(part):
        assert e["lines"] == whole[e["name"], e["version"]]["lines"] and e["hashes"]
    with pytest.raises(SystemExit, match="has no no-such-package"):
        locks.subset(lock, ["no-such-package"])


def copy_of_the_locked_files(into: Path) -> Path:
    into.mkdir(parents=True, exist_ok=True)
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


# --- the index a lock is made against -------------------------------------------------

UV_VERSION = re.search(r"^UV_VERSION := (\S+)", (ROOT / "Makefile").read_text(), re.M)[1]


@pytest.fixture(scope="module")
def venv_lock(tmp_path_factory) -> Path:
    """A venv with the Makefile's uv: `make lock`'s own (.venv-lock) when it has that uv,
    else one made here from the box's index (as `make lock` makes it). Skipped where no
    index answers (the image's test-fast runs with no network)."""
    own = ROOT / ".venv-lock"
    said = subprocess.run([str(own / "bin" / "uv"), "--version"], capture_output=True,
                          text=True) if (own / "bin" / "uv").exists() else None
    if said and said.stdout.startswith(f"uv {UV_VERSION} "):
        return own
    venv = tmp_path_factory.mktemp("venv-lock")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    done = subprocess.run([str(venv / "bin" / "pip"), "install", "--quiet", f"uv=={UV_VERSION}"],
                          capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        pytest.skip(f"no uv {UV_VERSION} here, and pip could not install it from the box's "
                    f"index: {(done.stderr.strip().splitlines() or ['?'])[-1]}")
    return venv


LOCKED = ("requirements.lock", "requirements-eventlet.lock", "requirements-notebooks.lock")


def make_lock(folder: Path, venv_lock: Path, **env: str) -> subprocess.CompletedProcess:
    """`make lock` in a copy of the repository's Makefile and setup/, with the box's
    package settings as `env` gives them (no pip file, no uv file, no PIP_/UV_ variable
    of this box's)."""
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("PIP_", "UV_", "MAKE")) and k not in ("XDG_CONFIG_DIRS",)}
    return subprocess.run(
        ["make", "-s", "lock", f"VENV_LOCK={venv_lock}"], cwd=folder, capture_output=True,
        text=True, timeout=120, env={**clean, "PIP_CONFIG_FILE": os.devnull,
                                     "XDG_CONFIG_HOME": str(folder / "no-config"),
                                     "XDG_CONFIG_DIRS": str(folder / "no-config"),
                                     "UV_CACHE_DIR": str(folder / "uv-cache"), **env})


def test_a_lock_made_through_a_mirror_equals_the_one_made_against_its_index(tmp_path,
                                                                            venv_lock):
    """`make lock` compiles against the index the box names (here PIP_INDEX_URL), and
    a lock holds versions and the hashes of the files, never where they came from: an
    index and a mirror that serves its files, at another host name, port and path, give
    the same three locks, byte for byte, each made from no lock. A mirror that lists
    fewer of a release's files (a partial one) gives fewer hashes, so the same lock needs
    a mirror of every file; from a lock already made, uv keeps the hashes it has (a pin
    unchanged is not asked again), so `make lock` leaves a committed lock as it is."""
    from local_index import LocalIndex, sha256, wheel
    needs = ("ftl-dep>=2",)
    files = dict([wheel("ftl-demo", "1.0", requires=needs),
                  wheel("ftl-demo", "1.0", "cp311-cp311-manylinux_2_17_aarch64", needs),
                  wheel("ftl-dep", "2.0")])
    aarch64 = next(f for f in files if "aarch64" in f)
    partial = {f: data for f, data in files.items() if f != aarch64}

    def lock_via(server: LocalIndex, name: str, start: list[str] | None = None) -> list[str]:
        folder = copy_of_the_locked_files(tmp_path / name)
        for lock, text in zip(LOCKED, start or [None] * len(LOCKED), strict=True):
            locks.requirements_of(folder / lock).write_text("ftl-demo==1.0\n")
            (folder / lock).unlink()
            if text:
                (folder / lock).write_text(text)
        done = make_lock(folder, venv_lock, PIP_INDEX_URL=server.url)
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"{server.simple}/ftl-demo/" in server.asked, (name, server.asked)
        return [(folder / lock).read_text() for lock in LOCKED]

    with (LocalIndex(files) as index,
          LocalIndex(files, "/mirror/pypi/simple", "/mirror/pypi/packages", "localhost") as mirror,
          LocalIndex(partial, "/partial/simple", "/partial/files") as partial_mirror):
        made = lock_via(index, "index")
        assert lock_via(mirror, "mirror") == made
        fewer = lock_via(partial_mirror, "partial")
        assert sha256(files[aarch64]) in made[0] and sha256(files[aarch64]) not in fewer[0]
        assert lock_via(partial_mirror, "partial-from-the-lock", start=made) == made
    hashes = set(re.findall(r"--hash=sha256:(\w+)", made[0]))
    assert hashes == {sha256(data) for data in files.values()}
    assert "127.0.0.1" not in made[0] and "simple" not in made[0]


def test_make_lock_stops_in_one_line_where_the_box_names_no_index(tmp_path, venv_lock):
    """pip's no-index set, no index-url: the setting to make, and no lock written."""
    folder = copy_of_the_locked_files(tmp_path)
    before = {lock: (folder / lock).read_text() for lock in LOCKED}
    done = make_lock(folder, venv_lock, PIP_NO_INDEX="1")
    assert done.returncode != 0
    said = [ln for ln in done.stderr.splitlines() if ln.startswith("setup: ")]
    assert said == [package_sources.NO_INDEX], done.stdout + done.stderr
    assert "lock:" not in done.stdout
    assert {lock: (folder / lock).read_text() for lock in LOCKED} == before
