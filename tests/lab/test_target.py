"""`lab run --target`: load against a stack that runs elsewhere, and only where it may go."""

from __future__ import annotations

import pytest
from conftest import gunicorn, run_module

from benchmarks.run import results
from benchmarks.sandbox import hosts


@pytest.mark.parametrize("target", ["http://198.18.0.30:8000", "http://198.19.255.1"])
def test_a_target_in_the_lab_range_is_refused_from_the_machines_network(tmp_path, target):
    # from the root namespace 198.18.0.0/15 is routed by the default route, out of the box
    assert hosts.current_lab_namespace() is None
    code, out = run_module("benchmarks.lab", "run", "--target", target, "--duration", "1",
                           "--no-plots", "--results", str(tmp_path / "results"), timeout=60)
    assert code == 2, out
    assert "lab's range 198.18.0.0/15" in out and "lab exec --" in out, out
    assert f"--target {target}" in out.splitlines()[-1], out
    assert not (tmp_path / "results").exists(), "refused before anything was made"


def test_verify_refuses_a_lab_address_from_the_machines_network():
    code, out = run_module("benchmarks.run.verify", "http://198.18.0.30:8000", timeout=60)
    assert code == 2, out
    assert "lab's range 198.18.0.0/15" in out, out
    assert out.strip().endswith(
        "lab exec -- python -m benchmarks.run.verify http://198.18.0.30:8000"), out


def test_an_address_outside_the_range_is_not_the_lab_s():
    assert hosts.lab_address_from_outside("127.0.0.1") is None
    assert hosts.lab_address_from_outside("198.20.0.1") is None
    assert hosts.lab_address_from_outside("198.18.0.30") == "198.18.0.30"


def test_a_target_run_has_its_own_folder_and_leaves_latest_alone(tmp_path, redis_url):
    base = tmp_path / "results"
    full = results.new_run(base)  # a full run made before: latest points at it
    with gunicorn(redis_url, tmp_path, ["-w", "1"]) as url:
        code, out = run_module("benchmarks.lab", "run", "--target", url, "--duration", "2",
                               "--no-plots", "--users", "2", "--user-classes", "KeyValueUser",
                               "--slo", "p99<60s,failures<1%", "--results", str(base),
                               timeout=120)
    assert code == 0, out
    assert "[slo met] p99<60s" in out and "[slo met] failures<1%" in out  # judged on Locust's
    runs = sorted(p.name for p in base.iterdir() if p.name.endswith("-target"))
    assert len(runs) == 1, sorted(p.name for p in base.iterdir())
    stage_dir = base / runs[0] / "target"
    assert (stage_dir / "locust.json").exists(), sorted(p.name for p in stage_dir.iterdir())
    assert (base / results.LATEST).resolve() == full.resolve()
