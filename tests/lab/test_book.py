"""`lab book`, the book's own benchmark, for real: its own file, so that the suite
(a test file per process at a time) runs it beside test_lab.py's full run."""

from __future__ import annotations

import csv
import json

import pytest
from test_lab import lab, leftovers

from benchmarks import stages


@pytest.mark.netns
@pytest.mark.slow
def test_book_runs_the_books_stages_and_writes_book_csv(tmp_path):
    """`lab book --stages 0,2`: the pool's step on /kv, ours beside the book's figures
    (the five stages are the runner's, which the full run tests: two keep it short)."""
    result = lab("book", "--stages", "0,2", "--duration", "2", "--warmup", "1",
                 "--results", str(tmp_path), timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    run_dir = next(tmp_path.glob("*-book"))
    with open(run_dir / "book.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["stage"] for r in rows] == [stages.get(k).dirname for k in ("0", "2")]
    assert all(float(r["rps"]) > 0 for r in rows), rows
    assert [r["book_rps"] for r in rows] == ["413.78", "683.52"]
    info = json.loads((run_dir / "run.json").read_text())
    assert info["parameters"]["users"] == 100 and info["parameters"]["wait_max_s"] == 0
    assert info["parameters"]["cpus"]["overlap"] == ""  # the server on its own core
    assert "x prev" in result.stdout and "1.65" in result.stdout  # 683.52 / 413.78
    assert leftovers(result.pid) == []


def test_book_refuses_a_stage_the_book_does_not_have(tmp_path):
    result = lab("book", "--stages", "0,4", "--results", str(tmp_path), timeout=60)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "some of 0, 1, 2, 3, 5" in result.stdout + result.stderr
    assert not any(tmp_path.iterdir())
