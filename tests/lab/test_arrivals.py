"""The open model (`lab run --arrival-rate`, benchmarks/arrivals.py): requests start on
a schedule, whatever the answers, and what could not start on time is said."""

from __future__ import annotations

import json

import pytest
from test_lab import lab, leftovers

from benchmarks.run import open_model


def test_a_schedule_that_slips_is_called_unreliable():
    kept = {"rate": 50, "intended": 500, "started": 500, "late": 3, "not_started": 0}
    assert open_model.unreliable(kept) == ""
    assert "started over 10 ms late" in open_model.unreliable({**kept, "late": 40})
    assert "never started" in open_model.unreliable({**kept, "not_started": 7})
    assert "UNRELIABLE" in open_model.line({**kept, "late": 40})


def test_a_rate_out_of_range_is_refused_before_anything_starts(tmp_path):
    result = lab("run", "--stages", "2", "--arrival-rate", "0", "--results", str(tmp_path))
    assert result.returncode == 2 and "--arrival-rate must be above 0" in result.stdout
    assert list(tmp_path.iterdir()) == [] and leftovers(result.pid) == []


@pytest.mark.netns
@pytest.mark.slow
def test_an_open_model_stage_keeps_its_schedule_and_times_from_the_intended_start(tmp_path):
    rate, seconds = 40, 4
    result = lab("run", "--stages", "2", "--duration", str(seconds), "--warmup", "1",
                 "--arrival-rate", str(rate), "--no-screenshots", "--no-profile",
                 "--results", str(tmp_path), timeout=120)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-3000:]
    stage_dir = (tmp_path / "latest").resolve() / "02-connection-pool"
    counts = json.loads((stage_dir / "arrivals.json").read_text())
    # the schedule ran for the measured seconds less the sessions' log-in, at the rate
    assert rate * seconds * 0.5 <= counts["intended"] <= rate * seconds * 1.1, counts
    assert counts["started"] + counts["not_started"] == counts["intended"]
    assert "ArrivalUser" in (stage_dir / "locust-command.txt").read_text()
    assert f"open model: {rate}/s scheduled" in out
    totals = json.loads((stage_dir / "metrics.json").read_text())
    assert totals["requests"] >= counts["started"] * 0.9, (totals["requests"], counts)
    assert leftovers(result.pid) == []
