"""A failed check fails: `lab run`'s last line counts the checks and names each failed
one, `--strict` exits 3 on one, `--leave-out-checks` leaves checks out by name (never
silently), and `make image-test`'s lab step (setup/image-test.sh) fails on a failed check.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys

import pytest

from benchmarks import checks, stages
from benchmarks.analysis import metrics, report
from benchmarks.run import results

ROOT = stages.ROOT
REFERENCE = ROOT / "notebooks" / "reference-run"
POOL = stages.get("2")


def pool_run(leave_out: tuple[str, ...] = (), front_tw: float | None = None) -> dict:
    """Stage 2 of the reference capture, its checks judged again, as the runner returns
    it; `front_tw`: its client TIME_WAIT per request read as under emulation (0.0)."""
    measured = json.loads((REFERENCE / POOL.dirname / "metrics.json").read_text())
    if front_tw is not None:
        measured["tw_front_per_request"] = front_tw
    return {"stage": POOL, "checks": metrics.evaluate(POOL, measured, leave_out), "repeat": 1}


def test_the_last_line_counts_the_checks_and_names_a_failed_one():
    passed = pool_run()
    total = len(passed["checks"])
    assert all(c["passed"] for c in passed["checks"]), passed["checks"]
    assert checks.verdict_line([passed]) == f"lab: {total} of {total} checks passed"
    failed = pool_run(front_tw=0.0)
    assert checks.failures([failed]) == ["stage 2 tw_front_per_request (0, wants >= 0.2)"]
    assert checks.verdict_line([failed], strict=True) == (
        f"lab: 1 of {total} checks FAILED: stage 2 tw_front_per_request (0, wants >= 0.2) "
        "(--strict: exit 3)")
    again = {**failed, "repeat": 2}
    assert checks.failures([again])[0].startswith("stage 2 (repeat 2) tw_front_per_request")


def test_a_check_left_out_by_name_is_judged_said_and_not_counted():
    run = pool_run(leave_out=("tw_front_per_request",), front_tw=0.0)
    left = [c for c in run["checks"] if c.get("left_out")]
    assert [c["name"] for c in left] == ["tw_front_per_request"]
    assert left[0]["passed"] is False  # still judged: the report says it would fail
    total = len(run["checks"]) - 1
    assert checks.failures([run]) == []  # so --strict exits 0
    assert checks.verdict_line([run], strict=True) == (
        f"lab: {total} of {total} checks passed; 1 left out by name (--leave-out-checks): "
        "stage 2 tw_front_per_request")


def test_the_report_shows_a_left_out_check_and_leaves_it_out_of_the_count(tmp_path):
    run_dir = tmp_path / "20260101-120000"  # the reference's stage 2 alone
    shutil.copytree(REFERENCE / POOL.dirname, run_dir / POOL.dirname)
    shutil.copy(REFERENCE / "run.json", run_dir)
    run = pool_run(leave_out=("tw_front_per_request",), front_tw=0.0)
    results.write_json(run_dir / POOL.dirname / "checks.json", run["checks"])
    text = report.checks_section(run_dir)
    assert ("- left out (--leave-out-checks) (would fail): `tw_front_per_request >= 0.2`, "
            "measured `0.0`") in text
    row = next(r for r in report.rows(run_dir) if r["stage"] == POOL.dirname)
    assert row["checks"] == f"{len(run['checks']) - 1}/{len(run['checks']) - 1}"


def test_an_unknown_check_name_is_refused_before_anything_starts(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "benchmarks.lab", "run", "--stages", "0",
                           "--no-plots", "--leave-out-checks", "tw_overflow,tw_front_per_reqest",
                           "--results", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    out = proc.stdout + proc.stderr
    assert "--leave-out-checks: no check is named tw_front_per_reqest; the checks: " in out
    assert "tw_front_per_request" in out  # the names it knows, to pick from
    assert list(tmp_path.iterdir()) == []  # no run folder: nothing started


@pytest.mark.netns
@pytest.mark.slow
def test_the_image_tests_lab_step_fails_on_a_failed_check_and_names_it(tmp_path):
    """setup/image-test.sh's own lab step, run on this box rather than in the image: it is
    setup/ready-lab.sh (`make lab ... LAB_ARGS="--strict ..."`), which lab-ready (the VM
    recipe) runs too, ending with status 1 when it fails (test_box.py holds that). Stage
    0t with one user: its check that the kernel overflowed the TIME_WAIT cap (at least
    200 sockets) cannot pass from the few dozen connections one user makes in 2 s,
    waiting up to 1 s between requests."""
    args = (f"--users 1 --warmup 1 --wait-max 1 --no-screenshots --no-profile "
            f"--leave-out-checks tw_redis_per_request --results {tmp_path}")
    script = (f"source setup/image-test.sh; in_ctr() {{ \"$@\"; }}; RESULTS={tmp_path}; "
              f"lab_step 0,0t 1 {shlex.quote(args)}")
    proc = subprocess.run(["bash", "-c", script], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert "Error 3" in out, out[-3000:]  # make: the lab's exit 3
    assert "ready-lab: NOT ready: a check failed" in out
    verdict = next(line for line in out.splitlines() if line.startswith("lab: ")
                   and "checks" in line and "stage(s)" not in line)
    assert " checks FAILED: stage 0t tw_overflow (0, wants >= 1)" in verdict, verdict
    assert verdict.endswith("; 1 left out by name (--leave-out-checks): stage 0 "
                            "tw_redis_per_request (--strict: exit 3)"), verdict
