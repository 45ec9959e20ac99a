"""Coordinated omission (benchmarks/studies/omission.py, benchmarks/analysis/omission.py).

The arithmetic and the plots on made-up rows; the stall's SIGCONT on a real
process; bad input refused before anything starts; and one short real stall on
stage 2 (root only): the open model records every request scheduled into the
stall, the closed model about one per user.
"""

from __future__ import annotations

import json
import subprocess
import time

import psutil
import pytest
from conftest import run_module, running_with

from benchmarks import latency_log
from benchmarks.analysis import omission, report
from benchmarks.run import options, results
from benchmarks.sandbox import hosts
from benchmarks.studies import omission as study


def row(stage, model, level, repeat, p50, p99, slow=0, requests=5000):
    return {"stage": stage, "model": model, "level": level, "rate": 100.0, "repeat": repeat,
            "requests": requests, "rps": 95.0, "p50": p50, "p90": p50 * 2, "p99": p99,
            "p99_9": p99 * 2,
            "p99_99": p99 * 3, "slow": slow, "late": 0}


ROWS = [row("2", model, level, r, p50, p99 + r)
        for r in (1, 2, 3) for level in (50, 110)
        for model, p50, p99 in (("closed", 10, 40), ("open", 5, 30 if level == 50 else 3000))]
ROWS += [row("2", "closed", "stall", 1, 10, 2000, slow=9),
         row("2", "open", "stall", 1, 700, 2000, slow=180)]


def test_percentiles_are_the_labs_rule_and_count_the_slow_requests():
    """Locust's rule (stats.percentile), as the lab's figures: of 100 requests the p99 is
    the slowest one (nearest rank, the study's old rule, said 5)."""
    times = {1: 90, 5: 9, 1500: 1}  # 100 requests
    got = omission.figures(times)
    assert (got["p50"], got["p99"], got["p99_99"], got["max"], got["slow"]) == (1, 1500, 1500,
                                                                                1500, 1)
    assert omission.figures({})["p50"] is None


def test_a_percentile_of_too_few_requests_is_marked_not_shown():
    """p99 needs 1,000 requests (ten beyond it): a run of 812 shows `too few`, in the
    study's line and its table; p50 of the same run is shown."""
    few = row("2", "open", "stall", 1, 700, 2000, slow=180, requests=812)
    assert omission.ms(few, 99) == "too few (812)" and omission.ms(few, 50) == "700 ms"
    text = omission.table(omission.summarize([few]))
    assert "| 2 | stall | 100 | open | 95 | 700 | too few (812) | 180 | 1 |" in text


def test_the_summary_gives_each_model_its_interval_over_the_repeats():
    summary = omission.summarize(ROWS)
    assert [(s["level"], s["model"]) for s in summary] == [
        (50, "closed"), (50, "open"), (110, "closed"), (110, "open"),
        ("stall", "closed"), ("stall", "open")]
    open_110 = summary[3]
    assert open_110["n"] == 3 and open_110["p99_gmean"] == 3002.0  # 3001, 3002, 3003
    assert open_110["p99_low"] < 3002 < open_110["p99_high"]
    assert summary[4]["p99_low"] is None  # one stall run: no interval
    text = omission.table(summary)
    assert "| 2 | 110% | 100 | open | 95 | 5 [5, 5] | 3002 [3000, 3004] | 0 | 3 |" in text
    assert "| 2 | stall | 100 | open | 95 | 700 | 2000 | 180 | 1 |" in text
    # an open-model run whose schedule slipped is counted, never passed off as the server's
    slipped = [{**r, "unreliable": "40 of 500 requests started over 10 ms late"}
               if r["model"] == "open" and r["level"] == 110 and r["repeat"] == 1 else r
               for r in ROWS]
    assert "| 3002 [3000, 3004] | 0 | 3 (1 unreliable) |" in omission.table(
        omission.summarize(slipped))


def test_the_report_section_needs_both_models(tmp_path):
    omission.write(tmp_path / omission.OMISSION_CSV, omission.COLUMNS, ROWS)
    assert omission.read(tmp_path)[0]["p50"] == 10  # numbers back as numbers
    assert "## The closed and the open model" in omission.section(tmp_path)
    # rows from before the .hlog: their percentiles are Locust's, and the section says so
    assert ("Percentiles: Locust, 10 ms buckets to 1 s, 100 ms to 10 s (each run's "
            "locust.json).") in omission.section(tmp_path)
    omission.write(tmp_path / omission.OMISSION_CSV, omission.COLUMNS,
                   [r for r in ROWS if r["model"] == "open"])
    assert omission.section(tmp_path) == ""
    assert omission.section(tmp_path / "none") == ""


def test_the_plots_draw_both_models_and_nothing_without_rows(tmp_path):
    fig = omission.hockey_stick(ROWS, out=tmp_path / "p99.png")
    assert fig.axes[0].get_legend_handles_labels()[1] == ["closed model", "open model"]
    assert (tmp_path / "p99.png").stat().st_size > 1000
    fig = omission.spectrum(ROWS, out=tmp_path / "spectrum.png")
    drawn = {ln.get_label(): list(ln.get_ydata()) for ln in fig.axes[0].get_lines()}
    assert drawn["open model"][0] == 700 and drawn["closed model"][0] == 10
    assert omission.hockey_stick([r for r in ROWS if r["level"] == "stall"]) is None
    assert omission.spectrum([r for r in ROWS if r["level"] != "stall"]) is None


def test_a_stall_continues_the_process_whatever_ends_it():
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        with pytest.raises(KeyboardInterrupt), study.stalled([sleeper.pid]) as stopped:
            assert stopped == [sleeper.pid]
            time.sleep(0.2)
            assert psutil.Process(sleeper.pid).status() == psutil.STATUS_STOPPED
            raise KeyboardInterrupt  # a Ctrl-C in the middle of the stall
        time.sleep(0.2)
        assert psutil.Process(sleeper.pid).status() != psutil.STATUS_STOPPED
    finally:
        sleeper.kill()
        sleeper.wait()


@pytest.mark.parametrize("args, said", [
    (["--stages", "0"], "choose a gunicorn stage"),
    (["--capacity", "-5"], "--capacity must be above 0"),
    (["--duration", "2"], "--duration at least 4 s"),
    (["--stall-only", "--stall", "0"], "above 0 with --stall-only"),
])
def test_bad_input_is_refused_before_anything_starts(tmp_path, args, said):
    parsed = study.build_parser().parse_args([*args, "--results", str(tmp_path)])
    with pytest.raises(options.OptionsError, match=said):
        study.run(parsed)
    assert list(tmp_path.iterdir()) == []


def test_bad_input_exits_2_with_one_line(tmp_path):
    code, output = run_module("benchmarks.studies.omission", "--stall", "20", "--results",
                              str(tmp_path), timeout=60)
    assert (code, output.strip()) == (2, "omission: --stall must be 0-10 s, and above 0 "
                                         "with --stall-only (got 20)")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.netns
@pytest.mark.slow
def test_a_stall_is_every_scheduled_request_open_and_one_per_user_closed(tmp_path):
    users, rate = 10, 100  # --capacity 200 at --levels 50
    started: list[int] = []
    code, output = run_module(
        "benchmarks.studies.omission", "--stages", "2", "--stall-only", "--capacity", "200",
        "--levels", "50", "--users", str(users), "--duration", "4", "--results",
        str(tmp_path), timeout=120, pids=started)
    assert code == 0, output[-3000:]
    (run_dir,) = tmp_path.glob("*-omission")
    got = {r["model"]: r for r in omission.read(run_dir)}
    assert set(got) == {"closed", "open"} and {r["level"] for r in got.values()} == {"stall"}
    # the open model: the requests scheduled into the stall's first second waited over
    # 1 s (about `rate` of them); the closed model: each user was stuck on one request
    assert got["open"]["slow"] >= rate // 2, got
    assert 1 <= got["closed"]["slow"] <= users, got
    # each run's percentiles are its .hlog's timed rows: every one Locust counted
    for model, r in got.items():
        folder = run_dir / "02-connection-pool" / f"stall-{model}"
        counted = sum(e["num_requests"] for e in json.loads(
            (folder / results.LOCUST_JSON).read_text()) if e["name"] == study.TIMED)
        hlog = latency_log.read(folder / results.LATENCY_HLOG)
        assert sum(h.get_total_count() for tag, h in hlog.items()
                   if latency_log.name_of(tag) == study.TIMED) == r["requests"] == counted, r
        assert r["percentiles_from"] == "hdrhistogram", r
    assert "Percentiles: HdrHistogram, 3 digits (each run's latency.hlog)." in output
    assert (run_dir / "spectrum.png").exists()
    assert hosts.owned_namespaces(started[0]) == [] and running_with(str(tmp_path)) == []
    # no gunicorn worker left stopped (SIGCONT came before the stage's stop)
    stopped = [p.pid for p in psutil.process_iter(["status", "cmdline"])
               if p.info["status"] == psutil.STATUS_STOPPED
               and "gunicorn" in " ".join(p.info["cmdline"] or ())]
    assert stopped == []


def test_the_report_shows_both_models_of_a_study_folder(tmp_path, capsys):
    omission.write(tmp_path / omission.OMISSION_CSV, omission.COLUMNS, ROWS)
    assert report.main([str(tmp_path)]) == 0
    text = (tmp_path / "report.md").read_text()
    assert "| 2 | stall | 100 | closed | 95 | 10 | 2000 | 9 | 1 |" in text
    assert (tmp_path / "hockey_stick.png").exists() and (tmp_path / "spectrum.png").exists()
    assert "| 2 | 50% | 100 | open |" in capsys.readouterr().out
