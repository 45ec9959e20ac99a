"""The open model (`lab run --arrival-rate`, benchmarks/arrivals.py): requests start on
a schedule, whatever the answers, and what could not start on time is said."""

from __future__ import annotations

import json
import shutil

import pytest
from test_lab import lab, leftovers

from benchmarks import latency_log, stages
from benchmarks.analysis import metrics, report, stats
from benchmarks.run import locust_cli, open_model, results

REFERENCE = stages.ROOT / "notebooks" / "reference-run"


def test_a_schedule_that_slips_is_called_unreliable():
    kept = {"rate": 50, "intended": 500, "started": 500, "late": 3, "not_started": 0}
    assert open_model.unreliable(kept) == ""
    assert "started over 10 ms late" in open_model.unreliable({**kept, "late": 40})
    assert "never started" in open_model.unreliable({**kept, "not_started": 7})
    assert "UNRELIABLE" in open_model.line({**kept, "late": 40})


def hlog_of(path, rows: dict[str, list[float]]) -> None:
    """A .hlog as a Locust process writes it, from {tag: [ms, ...]}."""
    latency_log.reset()
    for key, times in rows.items():
        method, name = key.split(":", 1)
        for ms in times:
            latency_log.record(method, name, ms)
    latency_log.save(path, [latency_log.figures(None)])


def test_an_open_model_stage_takes_its_percentiles_from_its_hlog(tmp_path):
    """An open-model stage's p50/p95/p99 are its .hlog's HTTP rows by the lab's rule, to the
    µs (Locust would say 1200 for the tail's 1234.567 ms), its Socket.IO acks left out;
    the report says so, and a closed-model stage keeps Locust's."""
    run_dir = tmp_path / "run"
    shutil.copytree(REFERENCE, run_dir, ignore=shutil.ignore_patterns("*.png", "*.folded"))
    stage_dir = run_dir / "02-connection-pool"
    closed = metrics.locust_totals(stage_dir)
    assert open_model.tail_source(stage_dir) == "locust"
    (stage_dir / locust_cli.ARRIVALS_JSON).write_text(json.dumps({"rate": 50, "intended": 2}))
    assert open_model.tail_source(stage_dir) == "locust"  # no .hlog: a run from before
    hlog_of(stage_dir / results.LATENCY_HLOG, {"GET:/rooms/[id]/messages": [5.0] * 990,
                                               "POST:/auth/login": [1234.567] * 20,
                                               "WSIO:sendMessage": [9000.0] * 500})
    got = metrics.locust_totals(stage_dir)
    # each at the top of its HdrHistogram bucket (0.1% wide at most)
    assert (got["p50_ms"], got["p99_ms"]) == (5.003, 1234.943), got
    assert got["p99_ms"] == stats.percentile(latency_log.times_ms(
        stage_dir / results.LATENCY_HLOG, lambda t: not t.startswith("WSIO")), 0.99)
    assert got["requests"] == closed["requests"] and got["p99_ms"] != closed["p99_ms"]
    line = report.sources_line(run_dir)
    assert "p50, p95, p99 from Locust, 10 ms buckets to 1 s, 100 ms to 10 s (`locust.json`) " \
        "in 00-builtin, 01-gunicorn-sync, 03-" in line, line
    assert "from HdrHistogram, 3 digits (`latency.hlog`) in 02-connection-pool." in line, line


def test_a_rate_out_of_range_is_refused_before_anything_starts(tmp_path):
    result = lab("run", "--stages", "2", "--arrival-rate", "0", "--results", str(tmp_path))
    assert result.returncode == 2 and "--arrival-rate must be above 0" in result.stdout
    assert list(tmp_path.iterdir()) == [] and leftovers(result.pid) == []


@pytest.mark.netns
@pytest.mark.slow
def test_an_open_model_stage_keeps_its_schedule_and_times_from_the_intended_start(tmp_path):
    rate, seconds = 40, 4
    result = lab("run", "--no-plots", "--stages", "2", "--duration", str(seconds), "--warmup", "1",
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
    # its percentiles are its .hlog's: every HTTP request Locust counted, to 3 digits
    hlog = latency_log.read(stage_dir / results.LATENCY_HLOG)
    assert sum(h.get_total_count() for tag, h in hlog.items() if tag) == totals["requests"]
    times = latency_log.times_ms(stage_dir / results.LATENCY_HLOG,
                                 lambda tag: latency_log.method_of(tag) != "WSIO")
    assert totals["p99_ms"] == stats.percentile(times, 0.99), totals
    assert leftovers(result.pid) == []
