"""benchmarks/studies/recycling: stage 8's gunicorn recycled under a real load, its
restarts seen, every request accounted for, and prometheus_client's folder after them.

One short run (2 workers, max_requests 20, 100 requests): the counts it asserts follow
from requests served, not from speed, so they hold on a box of any pace."""

from __future__ import annotations

import json

import pytest
from conftest import run_module

from benchmarks.studies.recycling import report

RATE, SECONDS, WORKERS, MAX_REQUESTS = 50, 2, 2, 20
REQUESTS = RATE * SECONDS


@pytest.mark.parametrize("args, says", [
    (["--seconds", "1"], "--seconds 2-600"),
    (["--max-requests", "0"], "--max-requests"),
    (["--metrics-exit", "tidy"], "tidy: not a hook"),
    (["--workers", "0"], "a worker count"),
], ids=["too-short", "no-recycling-asked", "unknown-hook", "no-workers"])
def test_bad_input_is_refused_before_anything_starts(args, says, tmp_path):
    code, out = run_module("benchmarks.studies.recycling", *args, "--results", str(tmp_path),
                           timeout=60)
    assert code == 2, out
    assert says in out
    assert not list(tmp_path.iterdir()), "a results run was made for bad input"


def test_exits_within_a_second_are_counted_together():
    restarts = [{"exit_s": t, "fork_s": t + 0.1} for t in (1.0, 1.5, 1.9, 5.0)]
    assert report.together(restarts) == 3
    assert report.together([]) == 0


@pytest.fixture(scope="module")
def study(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("recycling")
    code, said = run_module(
        "benchmarks.studies.recycling", "--workers", str(WORKERS), "--rate", str(RATE),
        "--seconds", str(SECONDS), "--max-requests", str(MAX_REQUESTS), "--jitter", "0",
        "--repeats", "1", "--metrics-exit", "fold", "--metrics-max-requests",
        str(MAX_REQUESTS), "--growth", "0,20", "--results", str(out), timeout=240)
    assert code == 0, said
    (run,) = out.iterdir()
    data = json.loads((run / "recycling.json").read_text())
    return {**{r["variant"]: r for r in data["rows"]}, "growth": data["growth"]}


def test_every_slot_is_sent_and_the_recycled_workers_are_seen_restarting(study):
    plain = study["2 workers, no recycling"]
    recycled = study["2 workers, max_requests 20, jitter 0"]
    for name, row in study.items():
        if name == "growth":
            continue
        assert row["requests"] == REQUESTS  # an open model: every slot, late or not
        assert set(row["outcomes"]) <= {"ok", "4xx", "5xx", "reset", "refused", "timeout"}
    assert plain["restarts"] == 0
    # a worker past MAX_REQUESTS finishes its keep-alive connections before it exits, so
    # how many exit within the run depends on the box's pace: at least one does
    assert recycled["restarts"] >= 1
    assert all(r["fork_s"] >= r["exit_s"] for r in recycled["restart_times"])


def test_folding_leaves_no_exited_workers_file_and_the_count_whole(study):
    fold = study["fold"]  # today.conf.py's own child_exit
    lost = fold["outcomes"].get("reset", 0) + fold["outcomes"].get("timeout", 0)
    # the scrape counts what the load was answered, no more
    assert fold["answered"] <= fold["counted"] <= fold["answered"] + lost
    # none of an exited worker's files is left, its values are in the archives (the
    # growth test below shows them piling up unfolded)
    assert fold["restarts"] >= 1 and fold["dead_files"] == 0


def test_the_scrape_reads_every_exited_workers_files_until_they_are_folded(study):
    none, twenty = study["growth"]
    assert (none["files"], none["folded_files"]) == (0, 0)
    # twenty exited workers: a counter and a histogram file each, then one archive a type
    assert (twenty["files"], twenty["folded_files"]) == (40, 2)
