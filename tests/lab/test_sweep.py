"""The workers-versus-cores sweep: a real, short one (stage 2, -w 1,2, 3 s each).

Checks the CSV and the table, that the worker count is the only change to
the registry's stage, and that no namespace or process is left behind.
"""

from __future__ import annotations

import csv

import pytest
from conftest import run_module, running_with

from benchmarks import stages
from benchmarks.sandbox import hosts
from benchmarks.studies import sweep

ROOT = stages.ROOT


@pytest.mark.parametrize("key", ["1", "2", "3", "3g", "5"])
def test_with_workers_changes_only_the_worker_count(key):
    stage = stages.get(key)
    eight = sweep.with_workers(stage, 8)
    cmd, original = eight.server_command(), stage.server_command()
    after = original.index(stage.gunicorn_config) + 1  # `-w 8` right after the config file
    assert cmd == [*original[:after], "-w", "8", *original[after:]]
    assert sweep.with_workers(eight, 2).server_command() == [
        *original[:after], "-w", "2", *original[after:]]  # replaced, not added twice
    assert (eight.key, eight.dirname, eight.checks) == (stage.key, stage.dirname, stage.checks)
    assert stages.get(key).server == stage.server  # the registry is not changed


def test_with_workers_refuses_a_stage_without_workers():
    with pytest.raises(ValueError, match="not a gunicorn stage"):
        sweep.with_workers(stages.get("0"), 2)


@pytest.mark.parametrize("text", ["0", "1,0", "", "2,x", "1.5"])
def test_bad_worker_counts_are_refused_by_the_parser(text, capsys):
    with pytest.raises(SystemExit) as exit_:
        sweep.build_parser().parse_args(["--workers", text])
    assert exit_.value.code == 2
    assert f"worker counts must be integers >= 1: {text!r}" in capsys.readouterr().err


def test_worker_counts_take_commas_and_spaces():
    assert sweep.build_parser().parse_args(["--workers", "1,2 8"]).workers == [1, 2, 8]


def test_summary_has_mean_and_stdev_per_worker_count():
    rows = [{"workers": w, "repeat": r, "rps": rps, "p50": 10, "p95": 20, "p99": 30,
             "failures": 0, "app_cpu": 100.0, "locust_cpu": 50.0, "load1": 1.0}
            for w, r, rps in ((1, 1, 100.0), (1, 2, 110.0), (1, 3, 120.0), (2, 1, 200.0))]
    summary = sweep.summarize(rows)
    assert [s["workers"] for s in summary] == [1, 2]
    assert summary[0]["rps_mean"] == 110.0 and summary[0]["rps_sd"] == 10.0
    assert summary[1]["rps_sd"] is None
    assert "110 ± 10" in sweep.table(summary) and "200 ± -" in sweep.table(summary)


@pytest.mark.slow
def test_a_short_sweep_writes_the_csv_and_prints_the_table(tmp_path):
    results = tmp_path / "results"
    started: list[int] = []
    code, output = run_module(
        "benchmarks.studies.sweep", "--workers", "1,2", "--repeats", "1", "--duration", "3",
        "--warmup", "1", "--users", "20", "--spawn-rate", "20", "--results", str(results),
        timeout=85, pids=started)
    (pid,) = started
    assert code == 0, output[-3000:]
    (sweep_dir,) = results.glob("*-sweep")
    with open(sweep_dir / "sweep.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert tuple(rows[0]) == sweep.CSV_COLUMNS
    assert [(r["workers"], r["repeat"]) for r in rows] == [("1", "1"), ("2", "1")]
    for r in rows:
        assert float(r["rps"]) > 0 and float(r["app_cpu"]) > 0, r
        assert float(r["app_cpu_ms_per_req"]) > 0, r
        if hosts.netns_available()[0]:  # context switches are read per namespace
            assert r["cs_invol_per_req"] != "" and r["cs_vol_per_req"] != "", r
    assert (sweep_dir / "w2-r1" / stages.get("2").dirname / "locust_stats.csv").exists()
    assert "req/s (mean ± sd)" in output
    table_rows = [ln.split() for ln in output.splitlines() if ln.split()[:1] in (["1"], ["2"])]
    assert [t[0] for t in table_rows[-2:]] == ["1", "2"]
    # no namespace of this sweep's points left (named with its pid: another lab may run
    # beside it)
    assert hosts.owned_namespaces(pid) == []
    assert running_with(str(tmp_path)) == []
