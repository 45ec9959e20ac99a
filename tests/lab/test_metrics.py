"""The metric catalogue and a golden test on the committed reference capture (no root).

`metrics.compute` and `metrics.evaluate` on notebooks/reference-run/ must give back
exactly the metrics.json and checks.json that were committed with it: a change to
how a number is computed shows here first, and the catalogue names every number.
"""

from __future__ import annotations

import pytest

from benchmarks import metrics, results, stages

REFERENCE = stages.ROOT / "notebooks" / "reference-run"
MEASURED = list(results.measured_stages(REFERENCE))


def test_reference_capture_has_every_stage():
    assert [s.key for s, _ in MEASURED] == [s.key for s in stages.STAGES]


@pytest.mark.parametrize("stage, folder", MEASURED, ids=[s.key for s, _ in MEASURED])
def test_compute_reproduces_the_committed_metrics(stage, folder):
    assert metrics.compute(folder, stage) == results.read_json(folder / results.METRICS_JSON)


@pytest.mark.parametrize("stage, folder", MEASURED, ids=[s.key for s, _ in MEASURED])
def test_evaluate_reproduces_the_committed_checks(stage, folder):
    computed = metrics.evaluate(stage, metrics.compute(folder, stage))
    assert computed == results.read_json(folder / results.CHECKS_JSON)


def test_stage_4_failure_count_comes_from_the_kept_error_summary():
    stage = stages.get("4")
    m = metrics.compute(results.stage_dir(REFERENCE, stage), stage)
    assert m["nginx_eaddrnotavail"] > 1000  # tens of thousands of connect() failures


def test_every_check_names_a_catalogued_metric():
    named = {c.metric for s in stages.STAGES for c in s.checks}
    assert named <= set(metrics.CATALOGUE), named - set(metrics.CATALOGUE)


@pytest.mark.parametrize("stage, folder", MEASURED, ids=[s.key for s, _ in MEASURED])
def test_catalogue_and_compute_name_the_same_metrics(stage, folder):
    assert set(metrics.compute(folder, stage)) == set(metrics.CATALOGUE)


def test_summary_columns_are_catalogued():
    assert set(metrics.SUMMARY_COLUMNS[1:]) <= set(metrics.CATALOGUE)


def test_a_stage_with_no_answered_request_fails_every_check():
    stage = stages.get("5")  # its checks are all "nothing went wrong": 0 failures, ...
    nothing = {"requests": 0, "failures": 0, "tw_upstream_per_request": 0.0,
               "nginx_eaddrnotavail": 0}
    checks = metrics.evaluate(stage, nothing)
    assert checks and not any(c["passed"] for c in checks)
    assert all("no request was answered" in c["why"] for c in checks)


def test_mean_cpu_is_weighted_by_each_samples_interval(tmp_path):
    path = tmp_path / results.SAMPLER_CSV
    # 1 s at 100%, then 3 s at 0%: the mean over the 4 s is 25%, not 50%
    path.write_text("elapsed_s,cpu_app\n0.0,\n1.0,100\n4.0,0\n")
    assert metrics.mean_cpu(path, "cpu_app") == 25.0
    assert metrics.mean_cpu(path, "cpu_nginx") is None


def test_client_bound_uses_the_one_limit():
    assert not metrics.client_bound({"client_cpu_peak": metrics.CLIENT_CPU_LIMIT})
    assert metrics.client_bound({"client_cpu_peak": metrics.CLIENT_CPU_LIMIT + 0.1})
