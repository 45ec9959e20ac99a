"""The floor study: the chat mix through stage 8's app in-process, on a real Redis.

Short runs (a tenth of a second per request type) of the real study, as a user runs
it: its own folder, then into a copy of the reference capture, whose report then
reads each stage against the floor. Figures are asserted for their shape, never
their size: this box is shared and noisy.
"""

from __future__ import annotations

import ast
import json
import shutil

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
