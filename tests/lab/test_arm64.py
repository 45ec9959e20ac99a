"""setup/arm64_wheels.py's verdicts on fixed file names (no network): which wheel fits
Linux aarch64 on CPython 3.11 (Debian 12, glibc 2.36), and which lock lines that box
installs; the index it asks is the one the box names (an index on loopback here)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from benchmarks.stages import ROOT
from setup import arm64_wheels as arm64
from setup import package_sources

X86 = "orjson-3.13.0-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"
MUSL = "orjson-3.13.0-cp311-cp311-musllinux_1_2_aarch64.whl"
CP311 = "orjson-3.13.0-cp311-cp311-manylinux_2_17_aarch64.manylinux2014_aarch64.whl"
CP312 = "orjson-3.13.0-cp312-cp312-manylinux_2_17_aarch64.manylinux2014_aarch64.whl"
ABI3 = "psutil-7.2.2-cp36-abi3-manylinux2014_aarch64.manylinux_2_17_aarch64.whl"
PURE = "flask-3.1.3-py3-none-any.whl"
TOO_NEW_GLIBC = "numpy-9.0-cp311-cp311-manylinux_2_39_aarch64.whl"
SDIST = "orjson-3.13.0.tar.gz"


@pytest.mark.parametrize("files, wanted", [
    ([X86, MUSL, CP312, CP311, SDIST], CP311),       # the CPython 3.11 aarch64 build
    ([X86, ABI3], ABI3),                              # the stable ABI from 3.6 on
    ([PURE, SDIST], PURE),                            # pure Python
    ([PURE, CP311], CP311),                           # pip prefers the specific build
    ([X86, MUSL, CP312, SDIST], arm64.SDIST),         # musl is Alpine's, 3.12 another ABI
    ([TOO_NEW_GLIBC, SDIST], arm64.SDIST),            # Debian 12 has glibc 2.36
    ([X86, "orjson-3.13.0-cp311-cp311-win_arm64.whl"], arm64.NOTHING),
    ([], arm64.NOTHING),
])
def test_verdict(files, wanted):
    assert arm64.verdict(files) == wanted


def test_file_version_matches_the_lock_spelling():
    assert arm64.file_version("PySocks-1.7.1-py3-none-any.whl") == "1.7.1"
    assert arm64.file_version("zope.event-6.2.tar.gz") == "6.2"
    assert arm64.file_version("readme.txt") is None


def test_the_box_installs_by_its_markers(tmp_path):
    """Debian 12's Python is 3.11.2 on Linux: a marker false there leaves a line out."""
    lock = tmp_path / "requirements.lock"
    lock.write_text(
        "async-timeout==5.0.1 ; python_full_version < '3.11.3' \\\n    --hash=sha256:aa\n"
        "numpy==2.4.6 ; python_full_version < '3.12' \\\n    --hash=sha256:bb\n"
        "numpy==2.5.5 ; python_full_version >= '3.12' \\\n    --hash=sha256:cc\n"
        "pywin32==312 ; sys_platform == 'win32' \\\n    --hash=sha256:dd\n"
        "flask==3.1.3 \\\n    --hash=sha256:ee\n    # via -r requirements.txt\n")
    pins, left_out = arm64.on_the_box([lock])
    assert pins == [("async-timeout", "5.0.1"), ("flask", "3.1.3"), ("numpy", "2.4.6")]
    assert left_out == {"numpy==2.5.5": "python_full_version >= '3.12'",
                        "pywin32==312": "sys_platform == 'win32'"}


@pytest.mark.parametrize("machine, builds", [("aarch64", True), ("x86_64", False)])
def test_setup_brings_a_compiler_where_a_package_builds_from_its_sdist(machine, builds):
    """hdrhistogram is "sdist only" on aarch64: there `make setup` checks for gcc and
    the Python headers (and installs gcc, python3-dev); on x86_64 its wheel needs neither."""
    shown = subprocess.run(["make", "-n", "system-packages", f"MACHINE={machine}"], cwd=ROOT,
                           capture_output=True, text=True, timeout=60).stdout
    assert ("command -v gcc" in shown and "python3-dev" in shown) is builds, shown[-2000:]


# --- the index it asks: the box's -----------------------------------------------------

def without_the_boxs_package_settings(**env: str) -> dict[str, str]:
    """This environment with no pip file, no uv file, no PIP_/UV_ variable, then env."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}
    return {**clean, "PIP_CONFIG_FILE": os.devnull, "XDG_CONFIG_HOME": os.devnull,
            "XDG_CONFIG_DIRS": os.devnull, **env}


@pytest.mark.parametrize("json_api", [True, False], ids=["PEP 691 JSON", "PEP 503 HTML"])
def test_it_asks_the_index_the_box_names_and_reads_either_page(tmp_path, json_api):
    """PIP_INDEX_URL names an index on loopback: the check asks it, not another, for
    each package the lock installs on arm64, and reads its JSON or its HTML page."""
    from local_index import LocalIndex, wheel
    files = dict([wheel("ftl-demo", "1.0"),
                  wheel("ftl-demo", "1.0", "cp311-cp311-manylinux_2_17_aarch64"),
                  wheel("ftl-demo", "0.9", "cp311-cp311-manylinux_2_17_aarch64"),
                  wheel("ftl-x86", "2.0", "cp311-cp311-manylinux_2_17_x86_64")])
    lock = tmp_path / "requirements.lock"
    lock.write_text("ftl-demo==1.0 \\\n    --hash=sha256:aa\n"
                    "ftl-x86==2.0 \\\n    --hash=sha256:bb\n")
    with LocalIndex(files, "/mirror/simple", json_api=json_api) as index:
        done = subprocess.run([sys.executable, "-m", "setup.arm64_wheels", str(lock)],
                              cwd=ROOT, capture_output=True, text=True, timeout=60,
                              env=without_the_boxs_package_settings(PIP_INDEX_URL=index.url))
    assert done.returncode == 1, done.stdout + done.stderr  # ftl-x86: neither
    lines = dict(line.split(None, 1) for line in done.stdout.splitlines()[:2])
    assert lines == {"ftl-demo==1.0": "ftl_demo-1.0-cp311-cp311-manylinux_2_17_aarch64.whl",
                     "ftl-x86==2.0": arm64.NOTHING}
    assert sorted(index.asked) == ["/mirror/simple/ftl-demo/", "/mirror/simple/ftl-x86/"]


def test_it_stops_in_one_line_where_the_box_names_no_index():
    done = subprocess.run([sys.executable, "-m", "setup.arm64_wheels", "requirements.lock"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env=without_the_boxs_package_settings(PIP_NO_INDEX="1"))
    assert done.returncode == 1
    assert done.stderr.splitlines() == [package_sources.NO_INDEX] and done.stdout == ""
