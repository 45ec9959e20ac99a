"""The floor study: the chat mix through stage 8's app in-process, on a real Redis.

Short runs (a tenth of a second per request type) of the real study, as a user runs
it: its own folder, then into a copy of the reference capture, whose report then
reads each stage against the floor. Figures are asserted for their shape, never
their size: this box is shared and noisy.
"""

from __future__ import annotations

import ast
import json
import math
import shutil
import statistics
from pathlib import Path

import pytest
from conftest import make_config, run_module

from app import create_app
from benchmarks import stages
from benchmarks.analysis import floor, stats
from benchmarks.chat_mix import WEIGHTS
from benchmarks.run import options, results
from benchmarks.run.cli import StageFailed
from benchmarks.sandbox import hosts
from benchmarks.studies import floor as study

ROOT = stages.ROOT
REFERENCE = ROOT / "notebooks" / "reference-run"
QUICK = ("--repeats", "2", "--seconds", "0.1")


def test_the_floor_has_every_request_type_and_the_mix_with_intervals(tmp_path):
    code, output = run_module("benchmarks.studies.floor", *QUICK, "--results", str(tmp_path),
                              timeout=120)
    assert code == 0, output
    [folder] = [p for p in tmp_path.iterdir() if p.name.endswith("-floor")]
    data = json.loads((folder / results.FLOOR_JSON).read_text())
    assert data["weights"] == WEIGHTS and data["stage"] == "8"
    assert data["settings"]["FLASK_FUSED_ROUND_TRIPS"] == "1"  # stage 8's code: stage 7's
    assert len(data["repeats"]) == 2
    # Redis where every stage has it: on the app's CPU (the default --redis-cpu server)
    assert data["redis_cpu"] == "server" and data["cpus"]["redis"] == data["cpus"]["app"]
    assert floor.REDIS_CPU["server"] in (folder / results.REPORT_MD).read_text()
    # what else the box did while it was measured, in terms a reader can check
    assert len(data["box"]["load_average"]) == 2 and 0 <= data["box"]["others_cpu_pct"] <= 100
    cheapest = min(f["app_cpu_ms"] for r in data["repeats"] for f in r.values())
    assert 0 < data["loop_us"]["GET"] < 1000 * cheapest  # the loop: less than any request
    for repeat in data["repeats"]:
        assert set(repeat) == set(WEIGHTS)
        for figures in repeat.values():
            assert figures["requests"] > 0
            assert all(figures[f] > 0 for f in floor.FIGURES), figures
    rows = floor.summarize(data)
    assert [r["type"] for r in rows] == [*WEIGHTS, floor.MIX]
    for row in rows:
        for f in floor.FIGURES:
            iv = row[f]
            assert iv["n"] == 2 and iv["mean"] > 0 and iv["low"] <= iv["mean"] <= iv["high"]
    mix = rows[-1]["app_cpu_ms"]["mean"]
    each = [r["app_cpu_ms"]["mean"] for r in rows[:-1]]
    assert min(each) <= mix <= max(each)  # a weighted mean of the types
    text = (folder / results.REPORT_MD).read_text()
    assert all(f"| {t} | {w} |" in text for t, w in WEIGHTS.items()) and "| **mix** |" in text
    assert f"other processes used {data['box']['others_cpu_pct']:g}% of the app's CPU" in text
    assert (folder / results.FLOOR_CSV).read_text().count("\n") == len(WEIGHTS) + 2
    assert floor.table(rows) in output  # what it printed is what it wrote


def test_into_a_run_the_report_gives_each_stage_as_a_multiple_of_the_floor(tmp_path):
    run_dir = tmp_path / "20260101-120000"
    keep = [s.dirname for s in stages.STAGES if s.key in ("5", "8")]
    shutil.copytree(REFERENCE, run_dir, ignore=lambda d, names: [
        n for n in names if d == str(REFERENCE) and (REFERENCE / n).is_dir()
        and n != "plots" and n not in keep])
    code, output = run_module("benchmarks.studies.floor", *QUICK, "--into", str(run_dir),
                              timeout=120)
    assert code == 0, output
    data = floor.read(run_dir)
    app, both = (stats.interval(v)["mean"] for v in floor.bases(data).values())
    assert round(app, 9) == round(floor.summarize(data)[-1]["app_cpu_ms"]["mean"], 9)
    text = (run_dir / results.REPORT_MD).read_text()
    assert "## The floor" in text
    for dirname in keep:
        m = json.loads((run_dir / dirname / results.METRICS_JSON).read_text())
        line = next(x for x in text.splitlines() if x.startswith(f"| {dirname} |"
                                                                  ) and "x |" in x)
        assert f"{m['app_cpu_ms_per_request'] / app:.2f}x" in line, line
        assert f"{m['server_cpu_ms_per_request'] / both:.2f}x" in line, line


def test_every_task_of_chat_user_is_in_the_mix_with_its_own_weight():
    """ChatUser's tasks (read from the locustfile's source: pytest cannot import Locust)
    are the mix's, each weighted `@task(WEIGHTS["<its name>"])`, so the floor sends
    every request type the stages' users send."""
    tree = ast.parse((ROOT / "benchmarks" / "chat.py").read_text())
    user = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ChatUser")
    weighted = {}
    for method in (n for n in user.body if isinstance(n, ast.FunctionDef)):
        for d in method.decorator_list:
            if isinstance(d, ast.Call) and getattr(d.func, "id", None) == "task":
                weighted[method.name] = ast.unparse(d.args[0]) if d.args else None
    assert weighted == {name: f"WEIGHTS['{name}']" for name in WEIGHTS}
    assert set(study.requests({"room": 1, "friend": {"id": 2, "email": "f@x.test"}})) \
        == set(WEIGHTS)


@pytest.mark.parametrize("args, said", [
    (["--repeats", "0"], "--repeats must be at least 1"),
    (["--seconds", "0"], "--seconds 0.05-60"),
    (["--app-cpus", "999"], "--app-cpus: CPU set '999': CPU 999 not available"),
    (["--redis-cpus", "x"], "--redis-cpus: CPU set 'x': expected numbers"),
])
def test_bad_input_is_refused_before_anything_starts(tmp_path, args, said):
    parsed = study.build_parser().parse_args([*args, "--results", str(tmp_path)])
    with pytest.raises(options.OptionsError, match=said):
        study.run(parsed)
    assert list(tmp_path.iterdir()) == []


def test_redis_goes_with_the_app_or_apart_as_asked():
    lab = hosts.placement()
    for argv, redis in (([], lab.server), (["--redis-cpu", "apart"], lab.client),
                        (["--redis-cpu", "apart", "--redis-cpus", "0"], frozenset({0}))):
        args = study.build_parser().parse_args(argv)
        assert study.placement(args) == (lab.server, redis), argv
    assert study.layout(study.build_parser().parse_args(["--redis-cpus", "0"])) == "given"


def test_into_a_folder_that_is_no_run_exits_2_with_one_line(tmp_path):
    code, output = run_module("benchmarks.studies.floor", "--into", str(tmp_path), timeout=60)
    assert code == 2 and output.count("\n") == 1, output
    assert output.startswith(f"floor: --into {tmp_path}: not a lab run's folder (no run.json)")
    assert list(tmp_path.iterdir()) == []


def test_a_request_that_fails_is_an_error_not_a_figure(redis_url):
    app = create_app(make_config(redis_url))
    call = study.caller(app, "GET", "/users/me", b"", 200, token="not-a-token")
    with pytest.raises(StageFailed, match=r"GET /users/me: answered \['401 UNAUTHORIZED'\]"):
        call()


def interleaved_run(tmp_path, app: tuple, server: tuple, floors: tuple) -> Path:
    """A run of stage 8 with three repeats, as `lab run --stages 8 --repeats 3 --floor`
    leaves it: the reference's stage 8 in each repeat's folder with app and server CPU per
    request `app[k]`, `server[k]`, and beside it that repeat's floor.json, whose mix has
    app CPU `floors[k][0]` and Redis CPU `floors[k][1]` (lab_repeat: k)."""
    run_dir = tmp_path / "20260101-120000"
    run_dir.mkdir()
    shutil.copy(REFERENCE / results.RUN_JSON, run_dir / results.RUN_JSON)
    stage = stages.get("8")
    types = {"me": 1, "friends": 3}
    for k in (1, 2, 3):
        root = results.repeat_dir(run_dir, k)
        shutil.copytree(results.stage_dir(REFERENCE, stage), results.stage_dir(root, stage))
        path = results.stage_dir(root, stage) / results.METRICS_JSON
        results.write_json(path, {**results.read_json(path), "app_cpu_ms_per_request":
                                  app[k - 1], "server_cpu_ms_per_request": server[k - 1]})
        mine, redis = floors[k - 1]
        floor.write(root, {
            "stage": "8", "settings": {}, "cpus": {"app": "1", "redis": "1"},
            "redis_cpu": "server", "seconds": 0.1, "weights": types, "git_commit": "x",
            "box": {"load_average": [1.0 * k, 1.5], "others_cpu_pct": 2.0 * k},
            "lab_repeat": k, "repeats": [{t: {"requests": 50, "app_cpu_ms": mine,
                                              "redis_cpu_ms": redis, "wall_ms": 1.0}
                                          for t in types}]})
    return run_dir


def test_a_floor_per_repeat_gives_each_stage_a_paired_multiple(tmp_path):
    """Three repeats, each with its floor: stage 8's app CPU 0.80, 0.90, 1.00 ms against
    floors of 0.40, 0.40, 0.45 ms are the ratios 2, 2.25 and 2.22 (their product 10), by
    hand: geometric mean 10^(1/3) = 2.154; the logs' sd 0.0647, so t = 20.54 with 2
    degrees of freedom, where Student's t has closed forms: t95 = 0.95 / sqrt(2 x 0.975 x
    0.025) = 4.303, p = 1 - t / sqrt(t^2 + 2) = 0.0024; the interval exp(mean log +-
    t95 x sd / sqrt(3)) = [1.83, 2.53]. Without repeat 3's floor the report falls back to
    the unpaired ratio and says so."""
    run_dir = interleaved_run(tmp_path, app=(0.80, 0.90, 1.00), server=(1.5, 1.6, 1.4),
                              floors=((0.40, 0.10), (0.40, 0.10), (0.45, 0.05)))
    logs = [math.log(x) for x in (2.0, 2.25, 1.0 / 0.45)]
    centre, sd = statistics.fmean(logs), statistics.stdev(logs)
    se = sd / math.sqrt(3)
    t95 = 0.95 / math.sqrt(2 * 0.975 * 0.025)
    t = centre / se
    p = 1 - t / math.sqrt(t * t + 2)
    assert round(math.exp(centre), 6) == round(10 ** (1 / 3), 6)
    assert (round(t, 2), round(p, 4), round(t95, 3)) == (20.54, 0.0024, 4.303)
    low, high = math.exp(centre - t95 * se), math.exp(centre + t95 * se)
    assert (round(low, 2), round(high, 2)) == (1.83, 2.53)

    found = floor.floors(run_dir)
    assert len(found) == 3 and floor.paired(run_dir, found)
    [row] = floor.stages_against(run_dir, found, pair=True)
    x = row["app_cpu_ms_per_request_x"]
    assert x["n"] == 3 and round(x["ratio"], 9) == round(10 ** (1 / 3), 9)
    assert (round(x["low"], 9), round(x["high"], 9)) == (round(low, 9), round(high, 9))
    assert round(x["p"], 9) == round(p, 9) and x["significant"]
    # every server role's against app + Redis: 1.5, 1.6, 1.4 over 0.5 each time
    assert round(row["server_cpu_ms_per_request_x"]["ratio"], 9) == round(
        (3.0 * 3.2 * 2.8) ** (1 / 3), 9)

    text = floor.section(run_dir)  # report.md's (the lab run below writes one)
    line = next(x for x in text[text.index("## The floor"):].splitlines()
                if x.startswith("| 08-todays-stack |"))
    assert ("| 2.15x [1.83, 2.53], p = 0.002, adjusted p = 0.002 (Holm, 2 steps): "
            "significant |") in line, line  # the two multiples, one family
    assert "The multiples' tests: 2 steps tested; each p adjusted for the 2 by Holm's" in text
    assert floor.PAIRED in text and floor.UNPAIRED not in text
    assert "| 3 | 0.450 | 0.500 | 3 to 1.5 | 6% |" in text  # repeat 3's floor and box

    (results.repeat_dir(run_dir, 3) / results.FLOOR_JSON).unlink()
    assert not floor.paired(run_dir, floor.floors(run_dir))
    text = floor.section(run_dir)
    line = next(x for x in text[text.index("## The floor"):].splitlines()
                if x.startswith("| 08-todays-stack |"))
    unpaired = stats.ratio([0.80, 0.90, 1.00], [0.40, 0.40])
    assert f"| {unpaired['ratio']:.2f}x [{unpaired['low']:.2f}, {unpaired['high']:.2f}] |" \
        in line, line
    assert floor.UNPAIRED in text and "p = " not in line


def test_a_floor_written_later_into_a_run_is_not_paired(tmp_path):
    """`python -m benchmarks.studies.floor --into` after the run (no lab_repeat) over
    repeat 1's floor: measured apart from the repeats, so the multiple is unpaired."""
    run_dir = interleaved_run(tmp_path, app=(0.8, 0.9, 1.0), server=(1.5, 1.6, 1.4),
                              floors=((0.4, 0.1),) * 3)
    data = floor.read(run_dir)
    floor.write(run_dir, {k: v for k, v in data.items() if k != "lab_repeat"})
    assert not floor.paired(run_dir, floor.floors(run_dir))


@pytest.mark.parametrize("argv, said", [
    (["--floor-seconds", "1"], "--floor-seconds 1 without --floor: add --floor"),
    (["--floor", "--floor-seconds", "0.01"], r"--floor-seconds must be 0.05-60 \(got 0.01\)"),
])
def test_lab_floor_options_are_refused_when_bad(argv, said):
    from benchmarks import lab as lab_cli
    args = lab_cli.build_parser().parse_args(["run", "--stages", "2", *argv])
    with pytest.raises(options.OptionsError, match=said):
        options.from_args(args)
    ok = lab_cli.build_parser().parse_args(["run", "--stages", "2", "--floor"])
    assert options.from_args(ok).floor_seconds == study.DEFAULT_SECONDS
    assert options.from_args(lab_cli.build_parser().parse_args(
        ["run", "--stages", "2"])).floor_seconds is None


def test_lab_floor_with_a_target_is_refused_before_anything_starts(tmp_path):
    code, output = run_module("benchmarks.lab", "run", "--target", "http://127.0.0.1:9",
                              "--floor", "--results", str(tmp_path), timeout=60)
    assert code == 2 and output.count("\n") == 1, output
    assert output.startswith("lab: --floor measures stage 8's app on this machine"), output
    assert list(tmp_path.iterdir()) == []


def test_lab_repeat_needs_into(tmp_path):
    parsed = study.build_parser().parse_args(["--lab-repeat", "2", "--results", str(tmp_path)])
    with pytest.raises(options.OptionsError, match="--lab-repeat 2: give it with --into"):
        study.run(parsed)
    assert list(tmp_path.iterdir()) == []
