"""`make image-test SUITE=... ARCH=...`: a base the script cannot make is refused, with
what it can make, before anything is installed or built."""

from __future__ import annotations

import os
import subprocess

import pytest

from benchmarks import stages

ROOT = stages.ROOT


def image_test(**env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "setup/image-test.sh"], cwd=ROOT, capture_output=True,
                          text=True, timeout=30, env={**os.environ, **env})


@pytest.mark.parametrize(("env", "said"), [
    ({"SUITE": "jessie"}, "SUITE=jessie: bookworm (Debian 12) or trixie (Debian 13)"),
    ({"ARCH": "riscv64"}, "ARCH=riscv64: amd64 or arm64"),
])
def test_a_base_it_cannot_make_is_refused_before_anything_starts(env, said):
    proc = image_test(**env)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert said in proc.stderr
    assert "== tools" not in proc.stdout  # nothing ran


def test_each_suite_and_arch_has_a_base_of_its_own():
    names = {(suite, arch): subprocess.run(
        ["sh", "setup/debian-base.sh", "--name"], cwd=ROOT, capture_output=True, text=True,
        timeout=10, env={**os.environ, "SUITE": suite, "ARCH": arch}).stdout.strip()
        for suite in ("bookworm", "trixie") for arch in ("amd64", "arm64")}
    host = subprocess.run(["dpkg", "--print-architecture"], capture_output=True,
                          text=True).stdout.strip() or "amd64"
    for (suite, arch), name in names.items():  # the machine's own arch unsuffixed
        number = {"bookworm": 12, "trixie": 13}[suite]
        assert name == f"debian:{number}" + ("" if arch == host else f"-{arch}"), names
