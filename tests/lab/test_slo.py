"""Objectives as gates (`lab run --slo`, benchmarks/run/slo.py): met exits 0, missed
exits 1, malformed exits 2 before anything starts."""

from __future__ import annotations

import json

import pytest
from test_lab import lab, leftovers

from benchmarks.run import slo


def test_the_grammar_reads_units_and_refuses_what_it_cannot_read():
    p99, failures, rps = slo.parse("p99<500ms, failures<0.1%,rps>=200")
    assert (p99.metric, p99.op, p99.value) == ("p99_ms", "<", 500)
    assert failures.metric == "failure_share" and failures.value == pytest.approx(0.001)
    assert (rps.metric, rps.op, rps.value) == ("rps", ">=", 200)
    assert slo.parse("p95 <= 2s")[0].value == 2000
    assert slo.parse("") == ()
    for bad, says in (("p99<500", "takes ms or s"), ("p42<1ms", "unknown figure"),
                      ("p99=1ms", "not an objective"), ("rps>5ms", "takes no unit"),
                      ("p99<500ms,", "not an objective")):
        with pytest.raises(slo.SLOError, match=says) as e:
            slo.parse(bad)
        assert "Example: --slo" in str(e.value)


def test_judging_counts_an_unmeasured_figure_as_missed():
    judged = slo.judge(slo.parse("p99<500ms,failures<1%,server_p99<1ms"),
                       {"p99_ms": 300, "server_p99_ms": 12, "requests": 1000, "failures": 20})
    assert [j["met"] for j in judged] == [True, False, False]
    assert judged[0]["server"] == 12 and judged[1]["measured"] == 0.02
    assert slo.missed(slo.judge(slo.parse("server_p50<1s"), {})) == ["server_p50<1s"]


def test_a_malformed_objective_stops_the_run_before_anything_starts(tmp_path):
    result = lab("run", "--stages", "2", "--slo", "p99<fast", "--results", str(tmp_path))
    assert result.returncode == 2
    assert "not an objective" in result.stdout + result.stderr
    assert list(tmp_path.iterdir()) == [] and leftovers(result.pid) == []


SHORT = ("run", "--no-plots", "--stages", "0", "--duration", "2", "--warmup", "1", "--users", "5",
         "--no-screenshots", "--no-profile")


@pytest.mark.netns
@pytest.mark.slow
@pytest.mark.parametrize("objectives,code", [("p99<60s,failures<50%", 0),
                                             ("p99<60s,rps>1000000", 1)],
                         ids=["met", "missed"])
def test_a_stage_that_meets_its_objectives_exits_0_and_one_that_misses_exits_1(
        objectives, code, tmp_path):
    result = lab(*SHORT, "--slo", objectives, "--results", str(tmp_path), timeout=120)
    out = result.stdout + result.stderr
    assert result.returncode == code, out[-3000:]
    run_dir = (tmp_path / "latest").resolve()
    judged = json.loads((run_dir / "00-builtin" / slo.SLO_JSON).read_text())
    assert judged[0]["met"] and judged[0]["measured"] > 0
    assert judged[1]["met"] is (code == 0)
    assert ("[slo MISSED] rps>1000000" in out) is (code == 1)
    assert ("objectives missed: stage 0 (rps>1000000)" in out) is (code == 1)
    assert "## Objectives (--slo)" in (run_dir / "report.md").read_text()
    assert leftovers(result.pid) == []
