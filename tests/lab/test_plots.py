"""Plots a person reads at a glance, on the committed reference capture.

Stage keys beside the scatter's dots never overlap; two TIME_WAIT lines that lie
on each other are said to; a bar the axis cuts carries a mark with its height;
every legend sits outside the data.
"""

from __future__ import annotations

import shutil

import pandas as pd
from matplotlib.text import Text

from benchmarks import stages
from benchmarks.analysis import frames, plots, report
from benchmarks.run import results

REFERENCE = stages.ROOT / "notebooks" / "reference-run"
KEYS = {s.key for s in stages.STAGES}


def boxes(fig, texts):
    """Where each text's letters are drawn (its leader line left out)."""
    renderer = fig.canvas.get_renderer()
    return [Text.get_window_extent(t, renderer) for t in texts]


def test_stage_keys_beside_the_dots_never_overlap():
    fig = plots.time_wait_vs_throughput(REFERENCE)
    ax = fig.axes[0]
    fig.canvas.draw()
    keys = [t for t in ax.texts if t.get_text() in KEYS]
    assert len(keys) >= len(list(results.measured_stages(REFERENCE))), \
        "every stage is named at least once"
    found = boxes(fig, keys)
    for i, a in enumerate(found):
        for j, b in enumerate(found[i + 1:], start=i + 1):
            assert not a.overlaps(b), (keys[i].get_text(), keys[j].get_text())


def test_time_wait_says_where_two_classes_lie_on_each_other():
    fig = plots.time_wait(REFERENCE)
    by_title = {ax.get_title(): ax for ax in fig.axes}
    notes = [t.get_text() for t in by_title["0 builtin"].texts]
    assert any("redis and front" in n for n in notes), notes
    # a stage whose classes differ says nothing of the kind
    assert not any("the same counts" in t.get_text()
                   for t in by_title["2 connection-pool"].texts)


def test_a_bar_the_axis_cuts_is_marked_with_its_height(tmp_path):
    # stage 4's fast 502s as a run without the chat users' back-off had them:
    # Locust's own figure 20 times the best stage's
    run = tmp_path / "run"
    shutil.copytree(REFERENCE, run)
    best = max(results.read_json(d / results.METRICS_JSON)["rps"]
               for _, d in results.measured_stages(run))
    for key in ("4", "4g"):
        path = results.stage_dir(run, stages.get(key)) / results.METRICS_JSON
        m = results.read_json(path)
        results.write_json(path, {**m, "locust_rps": 20 * best})
    fig = plots.throughput_latency(run)
    top = fig.axes[0]
    marks = [t.get_text() for t in top.texts if t.get_text().startswith("▲ cut")]
    m = frames.metrics_frame(run)
    cut = m[m["ok_rps"] + m["fail_rps"] > top.get_ylim()[1]]
    assert len(cut) >= 2 and len(marks) == len(cut), marks  # stages 4 and 4g
    assert f"{cut['ok_rps'].iloc[0] + cut['fail_rps'].iloc[0]:,.0f}/s in all" in marks[0]


def test_a_failure_spike_past_the_axis_is_marked(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(REFERENCE, run)
    path = results.stage_dir(run, stages.get("4")) / results.LOCUST_HISTORY
    df = pd.read_csv(path)
    rows = df.index[df["Name"] == "Aggregated"]
    # a row written a second late: ten times the failures of its neighbours in one step
    i = rows[len(rows) // 2]
    extra = 10 * (df.loc[i, "Total Failure Count"] - df.loc[i - 1, "Total Failure Count"])
    df.loc[rows[rows >= i], "Total Failure Count"] += extra
    df.loc[rows[rows >= i], "Total Request Count"] += extra
    df.to_csv(path, index=False)
    fig = plots.failures(run)
    marks = [t.get_text() for ax in fig.axes for t in ax.texts if t.get_text().startswith("▲")]
    assert len(marks) == 1, marks


def test_legends_hide_no_data():
    """A figure's legend sits outside every panel; a legend inside a panel covers no bar."""
    for name, draw in plots.PLOTS.items():
        fig = draw(REFERENCE)
        if fig is None:
            continue
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        panels = [ax for ax in fig.axes if ax.get_visible()]
        for legend in fig.legends:
            box = legend.get_window_extent(renderer)
            assert not any(box.overlaps(ax.get_window_extent(renderer)) for ax in panels), name
        for ax in panels:
            if ax.get_legend() is None:
                continue
            box = ax.get_legend().get_window_extent(renderer)
            bars = [p for p in ax.patches if p.get_height() > 0]
            assert not any(box.overlaps(b.get_window_extent(renderer)) for b in bars), name


def test_failures_titles_give_the_tables_figure():
    """Each panel's total is the summary's (metrics.json), not the per-second history's,
    which misses the last second."""
    fig = plots.failures(REFERENCE)
    titles = [ax.get_title() for ax in fig.axes if ax.get_visible() and ax.get_title()]
    table = {r["stage"]: r["failures"] for r in report.rows(REFERENCE)}
    assert titles
    for title in titles:
        key = title.split()[0]
        dirname = stages.get(key).dirname
        assert title.endswith(f": {table[dirname]:,} failed requests"), (title, table[dirname])
