"""report.write rebuilds summary.csv, report.md and its plots from a run folder.

Works on copies of the committed reference capture (notebooks/reference-run/),
whole and cut down to some stages, as a run of `--stages 0,2` would leave it.
"""

from __future__ import annotations

import csv
import json
import math
import re
import shutil
import statistics
from pathlib import Path

import pytest

from benchmarks import latency_log, stages
from benchmarks.analysis import metrics, nginx_errors, plots, reference, repeats, report, stats
from benchmarks.analysis.metrics import SUMMARY_COLUMNS
from benchmarks.run import results

ROOT = stages.ROOT
REFERENCE = ROOT / "notebooks" / "reference-run"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
IMAGE = re.compile(r"!\[[^\]]*\]\(([^)]+)\)")
# The reference keeps its profiles cut to the buckets' frames (buckets.reduce), so every
# plot has something to draw there, the CPU by bucket included.
REFERENCE_PLOTS = list(plots.PLOTS)


def stage_folders(run_dir: Path) -> list[str]:
    """Stage folders with results, in registry order (the order of summary.csv)."""
    return [s.dirname for s in stages.STAGES if (run_dir / s.dirname / "metrics.json").exists()]


@pytest.fixture
def run_copy(tmp_path) -> Path:
    """The reference run without its generated files."""
    run_dir = tmp_path / "20260101-120000"
    shutil.copytree(REFERENCE, run_dir)
    shutil.rmtree(run_dir / "plots", ignore_errors=True)
    (run_dir / "summary.csv").unlink(missing_ok=True)
    (run_dir / "report.md").unlink(missing_ok=True)
    return run_dir


def keep_only(run_dir: Path, keys: set[str]) -> None:
    """Cut a run down to some stages, run.json included, as `--stages` would have made it."""
    for s in stages.STAGES:
        if s.key not in keys:
            shutil.rmtree(run_dir / s.dirname, ignore_errors=True)
    info = json.loads((run_dir / "run.json").read_text())
    info["parameters"]["stages"] = [k for k in info["parameters"]["stages"] if k in keys]
    info["stages"] = {k: v for k, v in info.get("stages", {}).items() if k in keys}
    (run_dir / "run.json").write_text(json.dumps(info, indent=2))


def read_summary(run_dir: Path) -> tuple[list[str], list[dict]]:
    with open(run_dir / "summary.csv", newline="") as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames or []), list(reader)


def embedded_images(run_dir: Path) -> list[Path]:
    return [run_dir / link for link in IMAGE.findall((run_dir / "report.md").read_text())]


def assert_real_png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC, f"{path.name} is not a PNG"
    assert len(data) > 10_000, f"{path.name} is only {len(data)} bytes"


def test_reference_run_is_complete_and_small():
    assert stage_folders(REFERENCE) == [s.dirname for s in reference.captured_stages()]
    assert reference.size(REFERENCE) < reference.SIZE_LIMIT
    kept = {p.name for p in REFERENCE.rglob("*") if p.is_file()}
    assert not kept & {"users.json", "ss-tanp.txt", "netstat-tan.txt", "app.log", "error.log"}


def test_write_full_run(run_copy):
    report.write(run_copy)

    header, rows = read_summary(run_copy)
    assert header == [*SUMMARY_COLUMNS, *repeats.COLUMNS]
    assert [r["stage"] for r in rows] == stage_folders(run_copy)
    assert {r["repeats"] for r in rows} == {"1"} and {r["rps_sd"] for r in rows} == {""}
    assert "## Repeats" not in (run_copy / "report.md").read_text()  # one repeat: none

    text = (run_copy / "report.md").read_text()
    images = embedded_images(run_copy)
    assert {p.name for p in images} == {f"{name}.png" for name in REFERENCE_PLOTS}
    for path in images:
        assert path.exists(), f"report.md embeds {path.name}, which was not written"
        assert_real_png(path)
    for name in REFERENCE_PLOTS:
        assert plots.HOW_TO_READ[name] in text
    assert report.summary_table(run_copy) in text


def test_an_interval_is_students_t_over_the_logs():
    iv = stats.interval([1.0, 2.0, None, 3.0])  # None: a repeat without the figure
    assert (iv["n"], round(iv["mean"], 4), iv["sd"]) == (3, round(6 ** (1 / 3), 4), 1.0)
    logs = [math.log(x) for x in (1.0, 2.0, 3.0)]
    half = 4.303 * statistics.stdev(logs) / 3 ** 0.5
    assert round(math.log(iv["high"] / iv["mean"]), 3) == round(half, 3)
    assert round(math.log(iv["mean"] / iv["low"]), 3) == round(half, 3)
    assert stats.interval([5.0])["low"] is None and stats.interval([5.0])["mean"] == 5.0
    # Student's t past any table: wider than the normal 1.96, narrowing towards it
    assert [round(stats.t95(df), 3) for df in (2, 31, 40, 100)] == [4.303, 2.040, 2.021,
                                                                     1.984]


def test_the_interval_of_a_positive_quantity_cannot_cross_zero():
    """Three noisy repeats of a time (ms): on the raw scale mean ± t sd / sqrt(n) is
    0.53 [-0.62, 1.69], a negative time; the lab's rule gives the geometric mean and an
    interval inside (0, inf) around it."""
    values = [0.07, 0.53, 1.0]
    raw = statistics.fmean(values) - stats.t95(2) * statistics.stdev(values) / 3 ** 0.5
    assert raw < 0  # what the rule is for
    iv = stats.interval(values)
    gmean = math.prod(values) ** (1 / 3)
    assert round(iv["mean"], 9) == round(gmean, 9)
    assert 0 < iv["low"] < gmean < iv["high"] < math.inf
    # a value of 0 has no log: the arithmetic mean alone, said as such
    zero = stats.interval([0.0, 1.0, 2.0])
    assert (zero["mean"], zero["low"], zero["log"]) == (1.0, None, False)
    assert stats.mean([1.0, None, 2.0]) == 1.5 and stats.mean([]) is None


def test_the_issues_worked_example_is_a_paired_t_test_on_the_logs():
    """The pool's step held in all three repeats (2.41, 1.79, 2.12): t = 8.6 with 2
    degrees of freedom, p about 0.013, where the stages' intervals overlapped."""
    s = stats.step([2.41, 1.79, 2.12])
    assert (s["n"], round(s["t"], 1), round(s["p"], 3)) == (3, 8.6, 0.013)
    assert (round(s["ratio"], 2), round(s["low"], 2), round(s["high"], 2)) == (2.09, 1.44,
                                                                               3.03)
    assert stats.verdict(s) == "2.09x [1.44, 3.03], p = 0.013: significant"
    # a ratio and its inverse weigh the same: no step, however large each move
    assert round(stats.step([2.0, 0.5, 1.0])["ratio"], 6) == 1.0
    one = stats.step([2.41])
    assert one["p"] is None and "one repeat: no test" in stats.verdict(one)


def test_a_ratio_of_two_unpaired_samples_is_welchs_on_the_logs():
    """A stage's CPU per request over the floor's: measured apart, so Welch's t on the
    logs (scipy's unequal-variance test, its degrees of freedom), never below zero."""
    from scipy import stats as scipy_stats
    over, under = [0.76, 0.90, 0.81], [0.35, 0.41, 0.45, 0.40]
    r = stats.ratio(over, under)
    logs = [[math.log(x) for x in xs] for xs in (over, under)]
    welch = scipy_stats.ttest_ind(*logs, equal_var=False)
    d = statistics.fmean(logs[0]) - statistics.fmean(logs[1])
    se = d / welch.statistic
    assert round(math.log(r["ratio"]), 9) == round(d, 9)
    assert round(math.log(r["high"] / r["ratio"]), 6) == round(stats.t95(welch.df) * se, 6)
    assert 0 < r["low"] < r["ratio"] < r["high"]
    assert stats.ratio([0.8], under)["low"] is None and stats.ratio([], under)["ratio"] is None


def test_a_step_not_significant_says_what_its_interval_allows():
    """Lab 15's 8 -> 9: three repeats with ratios 1.05, 0.98, 1.17 (its req/s in each
    repeat). Not significant is no evidence either way: the sentence gives the range the
    run cannot tell apart."""
    s = stats.step([b / a for a, b in zip((1004.6, 861.3, 956.5), (1057.6, 841.4, 1121.2),
                                          strict=True)])
    assert stats.verdict(s) == ("1.06x [0.85, 1.34], p = 0.360: not significant: between "
                                "0.85x and 1.34x, this run cannot tell")
    assert stats.verdict(s).endswith(stats.CANNOT_TELL)


def test_holm_adjusts_a_familys_p_values_as_the_method_says():
    """Holm's method on known p values: sorted, the k-th of m times m - k + 1, never below
    the one before, at most 1; given back in their own order."""
    adjusted = stats.holm([0.01, 0.04, 0.03, 0.005])
    assert [round(p, 6) for p in adjusted] == [0.03, 0.06, 0.06, 0.02]
    assert stats.holm([0.5, 0.9]) == [1.0, 1.0] and stats.holm([]) == []


def test_a_family_is_significant_only_where_its_adjusted_p_is_below_alpha():
    """Lab 17's served run, its 9 -> 9o p95 (p = 0.049 alone) among 15 steps: significant
    alone, not once the 15 are counted; a step of one repeat has no p and stays out of
    the count; the report's sentence says how many were tested."""
    alone = stats.step([1.33, 1.65, 1.95])
    strong = stats.step([1.29, 1.26, 1.24])
    assert alone["significant"] and 0.04 < alone["p"] < 0.05
    family = stats.family([alone, strong, *[stats.step([1.1, 0.9, 1.0])] * 13,
                           stats.step([2.0])])
    assert [t.get("family") for t in family[:15]] == [15] * 15 and "family" not in family[15]
    assert family[0]["significant"] is False and family[1]["significant"] is True
    # second smallest of 15: times 14, and never below the smallest's (times 15)
    assert family[0]["p_holm"] == max(15 * strong["p"], 14 * alone["p"])
    said = stats.verdict(family[0])
    assert said.startswith("1.62x [1.01, 2.61], p = 0.048, adjusted p = ")
    assert "(Holm, 15 steps): not significant once 15 steps are counted: between" in said
    assert said.endswith(stats.CANNOT_TELL)
    assert stats.family_line(family, start=True).startswith(
        "15 steps tested; each p adjusted for the 15 by Holm's method")
    assert "one repeat" in stats.family_line([stats.step([2.0])])


def with_repeats(run_copy: Path, rps: dict[str, tuple[float, ...]],
                 more=lambda key, k: {}) -> None:
    """Cut the run to rps's stages and give repeat k of each stage the kth RPS (repeats 2
    on under repeats/K/, copies of the run's own folders), as --repeats leaves them;
    `more(key, k)`: other metrics of that stage in that repeat."""
    keep_only(run_copy, set(rps))
    for k in range(1, 1 + len(next(iter(rps.values())))):
        root = results.repeat_dir(run_copy, k)
        for key, values in rps.items():
            folder = results.stage_dir(root, stages.get(key))
            if k > 1:
                shutil.copytree(results.stage_dir(run_copy, stages.get(key)), folder)
            m = results.read_json(folder / results.METRICS_JSON)
            results.write_json(folder / results.METRICS_JSON,
                               {**m, "rps": values[k - 1], **more(key, k)})


@pytest.mark.parametrize("pool,verdict", [
    ((723.0, 590.7, 657.2), "- 1 -> 2: 2.09x [1.44, 3.03], p = 0.013, adjusted p = 0.013 "
                            "(Holm, 4 steps): significant (each repeat 2.41, 1.79, 2.12)"),
    ((330.0, 300.0, 320.0), "- 1 -> 2: 1.01x [0.79, 1.29], p = 0.868, adjusted p = 0.868 "
                            "(Holm, 4 steps): not significant: between 0.79x and 1.29x, this "
                            "run cannot tell (each repeat 1.10, 0.91, 1.03)"),
], ids=["agree", "disagree"])
def test_the_report_judges_a_step_by_its_paired_test(run_copy, pool, verdict):
    """`lab run --stages 1,2 --repeats 3`: the pool's step with its ratio, interval and
    p; significant when the three repeats agree in direction, not when they do not. The
    report says how many steps it tested (RPS, p95, p99, CPU: 4) and adjusts their p
    together (Holm's method)."""
    with_repeats(run_copy, {"1": (300.0, 330.0, 310.0), "2": pool})
    report.write(run_copy, plots=False)
    text = (run_copy / "report.md").read_text()
    assert verdict in text.splitlines(), text[text.index("Steps, RPS"):]
    assert "4 steps tested; each p adjusted for the 4 by Holm's method" in text
    assert "p < 0.05" in text


def test_one_repeat_says_its_steps_are_not_tested(run_copy):
    keep_only(run_copy, {"1", "2"})
    report.write(run_copy, plots=False)
    assert "One repeat: no step between stages is tested" in (
        run_copy / "report.md").read_text()


def test_repeats_give_intervals_and_say_which_steps_are_noise(run_copy):
    """Repeats 2 and 3 under repeats/K/: the summary's intervals, the report's verdict on
    each step, and the check that failed in one repeat."""
    rps = {"0": (300.0, 310.0, 290.0), "2": (305.0, 295.0, 300.0), "3": (600.0, 610.0, 590.0)}

    def neighbour(key: str, k: int) -> dict:   # a neighbour in one run
        others = 40.0 if (key, k) == ("0", 2) else 1.0
        return {"foreign_cpu_pct": others, "foreign_cpu_p95": others}

    with_repeats(run_copy, rps, neighbour)
    failing = results.stage_dir(results.repeat_dir(run_copy, 3), stages.get("2"))
    checks = results.read_json(failing / results.CHECKS_JSON)
    results.write_json(failing / results.CHECKS_JSON, [{**checks[0], "passed": False},
                                                       *checks[1:]])
    report.write(run_copy, plots=False)
    _, rows = read_summary(run_copy)
    first = rows[0]
    # the geometric mean, the values' own sd, the interval on the log scale
    assert (first["repeats"], first["rps_gmean"], first["rps_sd"]) == ("3", "299.9", "10.0")
    assert (first["rps_ci_low"], first["rps_ci_high"]) == ("276.0", "325.8")
    assert [r["repeats_passed"] for r in rows] == ["3", "2", "3"]
    text = (run_copy / "report.md").read_text()
    assert ("- 0 -> 2: 1.00x [0.90, 1.12], p = 0.992, adjusted p = 0.992 (Holm, 12 steps): "
            "not significant: between 0.90x and 1.12x, this run cannot tell (each repeat "
            "1.02, 0.95, 1.03); in 1 of their 6 runs other processes took over 10% of the "
            "server's CPUs" in text)
    assert ("- 2 -> 3: 2.00x [1.86, 2.15], p < 0.001, adjusted p = 0.001 (Holm, 12 steps): "
            "significant (each repeat 1.97, 2.07, 1.97)" in text)
    assert "12 steps tested; each p adjusted for the 12 by Holm's method" in text
    assert "| 00-builtin | 3/3 | 299.9 [276.0, 325.8] | " in text and "| 1, 40, 1 |" in text
    assert "- **00-builtin** (repeat 2): other processes used 40% of the server's CPUs" in text
    assert text.count("(repeat ") == 1  # the only run past the limit
    assert f"- repeat 3, stage 2: `{checks[0]['expected']}`" in text


def write_hlog(folder: Path, scale: float) -> None:
    """A latency.hlog as Locust's processes leave it: 2,000 HTTP requests of 1-100 ms and
    400 Socket.IO acks of 1-20 ms, each time times `scale`."""
    latency_log.reset()
    try:
        for i in range(2000):
            latency_log.record("GET", "/users/friends", (1 + i % 100) * scale)
        for i in range(400):
            latency_log.record(metrics.SOCKETIO_TYPE, "message", (1 + i % 20) * scale)
        latency_log.save(folder / results.LATENCY_HLOG, [latency_log.figures(None)])
    finally:
        latency_log.reset()


def test_each_step_gives_its_tail_beside_its_rate(run_copy):
    """Stage 8's tail is 0.7 of stage 5's in every repeat while the box drifts: the
    report gives p95, p99 and the ack p95 of each stage over the repeats, each step's
    ratio of them with its interval and p, and where they come from."""
    drift = (1.0, 1.3, 0.8)
    with_repeats(run_copy, {"5": (700.0, 650.0, 720.0), "8": (1000.0, 900.0, 1050.0)})
    for k, scale in enumerate(drift, start=1):
        root = results.repeat_dir(run_copy, k)
        write_hlog(results.stage_dir(root, stages.get("5")), scale)
        write_hlog(results.stage_dir(root, stages.get("8")), 0.7 * scale)
    report.write(run_copy, plots=False)
    text = (run_copy / "report.md").read_text()
    lines = text.splitlines()
    for label in ("p95", "p99", "ack p95"):
        line = next(x for x in lines if x.startswith(f"- 5 -> 8 {label}: "))
        assert re.match(rf"- 5 -> 8 {label}: 0\.70x \[0\.\d\d, 0\.\d\d\], p < 0\.001, "
                        r"adjusted p < 0\.001 \(Holm, \d+ steps\): "
                        r"significant \(each repeat 0\.70, 0\.70, 0\.70\)", line), line
    assert "| 05-upstream-keepalive | 3/3 |" in text
    row = next(x for x in lines if x.startswith("| 08-todays-stack | 3/3 |"))
    p95 = stats.interval([stats.percentile(latency_log.times_ms(
        results.stage_dir(results.repeat_dir(run_copy, k), stages.get("8"))
        / results.LATENCY_HLOG, metrics.http_tag), 0.95) for k in (1, 2, 3)])
    assert f"| {p95['mean']:.1f} [{p95['low']:.1f}, {p95['high']:.1f}] |" in row, row
    assert ("p95, p99 and ack p95 over the repeats from HdrHistogram, 3 digits (each run's "
            "`latency.hlog`) in stage(s) 5, 8") in text
    # without its .hlog a stage's tail is Locust's, and the report says so
    for k in (1, 2, 3):
        folder = results.stage_dir(results.repeat_dir(run_copy, k), stages.get("5"))
        (folder / results.LATENCY_HLOG).unlink()
    report.write(run_copy, plots=False)
    text = (run_copy / "report.md").read_text()
    assert ("from Locust, 10 ms buckets to 1 s, 100 ms to 10 s (each run's `locust.json`) in "
            "stage(s) 5") in text
    assert "- 5 -> 8 p99: " in text


INTERVAL = re.compile(r"\[(-?[\d.,]+), (-?[\d.,]+)\]")


def test_no_interval_in_a_report_crosses_zero(run_copy):
    """Three repeats as noisy as 0.07, 0.53, 1.0 (RPS, p95, CPU per request) and a floor
    whose wall times are as noisy: every interval report.md prints (stages, steps, the
    floor, each stage against it) lies above zero, where the raw t interval of each
    would reach below it."""
    noisy = (0.07, 0.53, 1.0)

    def more(key: str, k: int) -> dict:
        scale = noisy[k - 1]
        return {"p95_ms": 100 * scale, "app_cpu_ms_per_request": 2 * scale,
                "server_cpu_ms_per_request": 3 * scale}

    with_repeats(run_copy, {"1": tuple(1000 * x for x in noisy),
                            "2": tuple(900 * x for x in reversed(noisy))}, more)
    types = {"me": 1, "friends": 2}
    floor_data = {"stage": "8", "settings": {}, "cpus": {"app": "0", "redis": "1"},
                  "seconds": 1.0, "weights": types, "git_commit": "x",
                  "repeats": [{t: {"requests": 100, "app_cpu_ms": 0.4 * x,
                                   "redis_cpu_ms": 0.1 * x, "wall_ms": x}
                               for t in types} for x in noisy]}
    results.write_json(run_copy / results.FLOOR_JSON, floor_data)
    report.write(run_copy, plots=False)
    text = (run_copy / "report.md").read_text()
    found = [(float(a.replace(",", "")), float(b.replace(",", "")))
             for a, b in INTERVAL.findall(text)]
    assert len(found) >= 10, text  # stages' RPS and p95, the steps, the floor's rows
    assert all(0 < low <= high for low, high in found), found


def test_write_some_stages_without_nginx(run_copy):
    keep_only(run_copy, {"0", "2"})
    report.write(run_copy)

    _, rows = read_summary(run_copy)
    assert [r["stage"] for r in rows] == ["00-builtin", "02-connection-pool"]
    assert all(r["tw_upstream_peak"] == "" for r in rows)  # no Nginx, no upstream class
    images = embedded_images(run_copy)
    assert "failures.png" not in {p.name for p in images}
    assert not (run_copy / "plots" / "failures.png").exists()
    for path in images:
        assert_real_png(path)


def test_write_one_nginx_stage(run_copy):
    keep_only(run_copy, {"4"})
    report.write(run_copy)

    _, rows = read_summary(run_copy)
    assert [r["stage"] for r in rows] == ["04-nginx-proxy"]
    assert {p.name for p in embedded_images(run_copy)} == {f"{n}.png" for n in REFERENCE_PLOTS}


def test_a_stage_that_failed_to_run_is_named(run_copy):
    keep_only(run_copy, {"2", "3"})
    shutil.rmtree(run_copy / "03-eventlet-keepalive")
    (run_copy / "03-eventlet-keepalive").mkdir()  # the lab made the folder, then failed
    info = json.loads((run_copy / "run.json").read_text())
    info["stages"]["3"] = {"dir": "03-eventlet-keepalive", "error": "app did not start: boom"}
    (run_copy / "run.json").write_text(json.dumps(info))
    report.write(run_copy, plots=False)

    _, rows = read_summary(run_copy)
    assert [r["stage"] for r in rows] == ["02-connection-pool"]
    text = (run_copy / "report.md").read_text()
    assert "app did not start: boom" in text
    # plots=False (`lab run --no-plots`): none drawn, and the report says how to draw them
    assert not (run_copy / "plots").exists()
    assert "Not drawn (`--no-plots`): `python -m benchmarks.analysis.report " in text


def test_main_regenerates(run_copy, capsys):
    keep_only(run_copy, {"5"})
    assert report.main([str(run_copy)]) == 0
    assert (run_copy / "report.md").exists()
    assert "05-upstream-keepalive" in capsys.readouterr().out
    assert report.main([str(run_copy / "no-such-run")]) == 2


def test_reference_copies_the_curated_subset(tmp_path, run_copy):
    keep_only(run_copy, {"0", "4"})
    (run_copy / "report.md").write_text("# an old report\n")
    for s in stages.STAGES:  # what a real run has and the copy must leave behind
        if not (run_copy / s.dirname).is_dir():
            continue
        (run_copy / s.dirname / "users.json").write_text("[]")
        (run_copy / s.dirname / "app.log").write_text("log")
    history = run_copy / "04-nginx-proxy" / "locust_stats_history.csv"
    lines = history.read_text().splitlines()
    per_url = lines[1].replace(",Aggregated,", ",/users/me,")
    history.write_text("\n".join([*lines, per_url]) + "\n")

    dest = tmp_path / "reference-run"
    reference.copy(run_copy, dest)

    names = {p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file()}
    assert {"run.json", "summary.csv", "report.md"} <= names
    for stage_dir in ("00-builtin", "04-nginx-proxy"):
        for f in reference.STAGE_FILES:
            if (run_copy / stage_dir / f).exists():
                assert f"{stage_dir}/{f}" in names
    # stage 4's failure count survives the copy, so metrics.compute gives it back
    stage4 = stages.get("4")
    again = metrics.compute(dest / stage4.dirname, stage4)
    assert again == results.read_json(run_copy / stage4.dirname / results.METRICS_JSON)
    assert not any(n.endswith(("users.json", ".log")) for n in names)
    copied = (dest / "04-nginx-proxy" / "locust_stats_history.csv").read_text()
    assert "/users/me" not in copied and copied.count("Aggregated") == len(lines) - 1
    assert len(embedded_images(dest)) == len(REFERENCE_PLOTS)  # report.md written again
    for path in embedded_images(dest):
        assert_real_png(path)


def test_reference_counts_nginx_errors_of_a_run_that_kept_only_the_log(tmp_path, run_copy):
    """A run from before errors.json: the copy counts the log once and leaves the run as is."""
    keep_only(run_copy, {"4"})
    stage_dir = run_copy / "04-nginx-proxy"
    (stage_dir / results.NGINX_ERRORS).unlink()
    line = f"connect() to 127.0.0.1:8000 failed {nginx_errors.EADDRNOTAVAIL} while connecting\n"
    short = f"[alert] 7#7: 32 {nginx_errors.NOT_ENOUGH}\n"
    raced = f"[error] 7#7: *9 recv() failed {nginx_errors.UPSTREAM_CLOSED[1]}, client: ...\n"
    (stage_dir / results.NGINX_ERROR_LOG).write_text(
        line * 3 + short * 2 + raced + "an unrelated line\n")
    dest = tmp_path / "reference-run"
    reference.copy(run_copy, dest)
    assert results.read_json(dest / "04-nginx-proxy" / results.NGINX_ERRORS) == {
        "eaddrnotavail": 3, "worker_connections": 2, "upstream_closed": 1}
    assert not (dest / "04-nginx-proxy" / results.NGINX_ERROR_LOG).exists()
    assert not (stage_dir / results.NGINX_ERRORS).exists()  # the run itself is only read


def test_reference_recompute_computes_every_metric_again(tmp_path):
    dest = tmp_path / "reference-run"
    shutil.copytree(REFERENCE, dest)
    keep_only(dest, {"5"})
    stage_metrics = dest / stages.get("5").dirname / results.METRICS_JSON
    before = results.read_json(stage_metrics)
    results.write_json(stage_metrics, {k: v for k, v in before.items()
                                       if k != "rps"})
    reference.recompute(dest)
    assert results.read_json(stage_metrics) == before
    with pytest.raises(SystemExit):  # neither a run nor --recompute
        reference.main([])


def test_reference_add_puts_a_runs_stages_beside_the_others(tmp_path, run_copy):
    """`reference RUN --add`: the run's stages replace theirs, the others stay, run.json
    says where the added ones came from, and every stage's metrics are computed again."""
    dest = tmp_path / "reference-run"
    shutil.copytree(REFERENCE, dest)
    keep_only(dest, {"0", "2"})
    keep_only(run_copy, {"4"})
    info = json.loads((run_copy / "run.json").read_text())
    info["git_commit"] = "f" * 40
    (run_copy / "run.json").write_text(json.dumps(info))
    metrics_0 = results.read_json(dest / "00-builtin" / results.METRICS_JSON)
    (dest / "00-builtin" / results.METRICS_JSON).write_text('{"stale": 1}')

    reference.add(run_copy, dest)

    assert stage_folders(dest) == ["00-builtin", "02-connection-pool", "04-nginx-proxy"]
    merged = results.run_info(dest)
    assert list(merged["stages"]) == ["0", "2", "4"] == merged["parameters"]["stages"]
    assert merged["added"][-1]["stages"] == ["4"]
    assert merged["added"][-1]["git_commit"] == "f" * 40
    assert results.read_json(dest / "00-builtin" / results.METRICS_JSON) == {
        **metrics_0, **{k: None for k in metrics.CATALOGUE if k not in metrics_0}}
    keys = [row["stage"] for row in read_summary(dest)[1]]
    assert keys == ["00-builtin", "02-connection-pool", "04-nginx-proxy"]


def test_a_step_within_each_repeat_is_paired_by_repeat():
    """Stage b doubled a in every repeat, while both drifted together: the stages'
    intervals overlap, the step's own ratio does not hold 1."""
    a = {"by_repeat": {"rps": {1: 200.0, 2: 400.0, 3: 300.0}}}
    b = {"by_repeat": {"rps": {1: 410.0, 2: 790.0, 3: 600.0, 4: 1.0}}}  # 4: a missed it
    ratios, test = repeats.paired(a, b)
    assert [round(r, 3) for r in ratios] == [2.05, 1.975, 2.0]
    assert test["n"] == 3 and 1.8 < test["low"] < 2.0 < test["high"] < 2.2
    assert test["significant"] and test["p"] < 0.01
    spread, pool = (stats.interval(s["by_repeat"]["rps"].values()) for s in (a, b))
    assert spread["high"] > pool["low"], "the stages' own intervals overlap"
