"""The lab's plots: one function per picture, each reading a results run folder.

    from benchmarks.analysis import plots
    fig = plots.throughput_latency("results/latest")            # a matplotlib Figure
    plots.throughput_latency("results/latest", out="tput.png")  # ... also written as PNG
    for name, draw in plots.PLOTS.items(): ...                  # every plot, in order

`python -m benchmarks.analysis.report RUN_DIR` writes them all to RUN_DIR/plots/.

`report.md` (benchmarks/analysis/report.py) and the notebook (notebooks/lab-analysis.ipynb)
both draw with these functions and print the same how-to-read sentence, kept
once in `HOW_TO_READ` (captions.py). Figures are built without pyplot (no global state, no
display needed) and written with the Agg canvas; in a notebook, `%matplotlib
inline` shows a returned Figure.

What each plot reads from a stage folder: `metrics.json` (RPS, percentiles,
failures: Locust's Aggregated row), `sampler.csv` (TIME_WAIT per connection
class, CPU per component, 1 Hz), `locust_stats_history.csv` (Locust's
cumulative counts, once a second), `sysctl.json` (the local port range). A
stage counts when its folder has `metrics.json`, so a run of some stages, or
one whose stage failed to run, still plots what is there.
"""

from __future__ import annotations

import textwrap

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from benchmarks.analysis import metrics, repeats
from benchmarks.analysis.captions import HOW_TO_READ, TITLES  # noqa: F401 - plots.TITLES
from benchmarks.analysis.drawing import empty, figure, finish, run_note
from benchmarks.analysis.frames import (
    COMPONENTS,
    StageRun,
    cpu_frame,
    history_frame,
    metrics_frame,
    sampler_frame,
    stage_runs,
)
from benchmarks.analysis.metrics import TIME_WAIT_SECONDS
from benchmarks.profile import buckets
from benchmarks.run import results
from benchmarks.run.results import run_info

# The sampler's connection classes and components, in the order they are drawn.
CLASSES = ("redis", "upstream", "front")
CLASS_LABELS = {"redis": "redis: app → Redis", "upstream": "upstream: Nginx → app",
                "front": "front: client → entry port"}
CLASS_COLORS = {"redis": "#d62728", "upstream": "#9467bd", "front": "#1f77b4"}
# markers and dashes too, so two classes with the same counts (stage 1) stay apart
CLASS_MARKERS = {"redis": "o", "upstream": "s", "front": "^"}
CLASS_DASHES = {"redis": "-", "upstream": "-", "front": "--"}
COMPONENT_COLORS = {"app": "#1f77b4", "app2": "#aec7e8", "redis": "#d62728", "nginx": "#2ca02c",
                    "sampler": "#7f7f7f", "locust": "#ff7f0e"}
OK_COLOR, FAIL_COLOR = "#2ca02c", "#d62728"
# benchmarks/profile/buckets.py's BUCKETS, in order: Redis's two in reds, "other" grey
BUCKET_COLORS = ("#d62728", "#ff9896", "#1f77b4", "#c5b0d5", "#aec7e8", "#2ca02c", "#9467bd",
                 "#17becf", "#bcbd22", "#7f7f7f", "#404040")  # the last: buckets.NATIVE


# --- drawing ---------------------------------------------------------------------

def _plain_numbers(axis) -> None:
    """Tick labels as 1,000 rather than 10^3 (log and symlog axes)."""
    axis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:,.0f}"))
    axis.set_minor_formatter(FuncFormatter(lambda v, _pos: ""))  # no 2x10^1 between them


def _grid(n: int, max_cols: int = 3) -> tuple[int, int]:
    cols = min(n, max_cols)
    return (n + cols - 1) // cols, cols


def overlapping(df: pd.DataFrame, classes: list[str], within: float = 0.05) -> list[str]:
    """The classes whose TIME_WAIT series lie on each other (within 5% at most samples)."""
    for i, a in enumerate(classes):
        for b in classes[i + 1:]:
            x, y = df[f"tw_{a}"], df[f"tw_{b}"]
            close = (x - y).abs() <= within * np.maximum(np.maximum(x, y), 10)
            if len(df) and close.mean() > 0.8 and max(x.max(), y.max()) > 10:
                return [a, b]
    return []


def place_labels(ax, labels: list[tuple[float, float, str, str]]) -> None:
    """Write short labels beside points so no two overlap (the stage keys of a scatter).

    Each label tries offsets around its point, in points, and takes the first whose box
    is clear of those placed before; the same text near the same spot is written once.
    """
    fig = ax.figure
    fig.canvas.draw()  # the layout settles: data -> pixels is final
    to_px = ax.transData.transform
    scale = fig.dpi / 72
    marker = 7 * scale  # the dots themselves are obstacles too
    placed = [(px - marker, py - marker, px + marker, py + marker)
              for px, py in (to_px((x, y)) for x, y, _, _ in labels)]
    bottom_px = ax.transAxes.transform((0, 0))[1]
    seen: list[tuple[float, float, str]] = []
    offsets = [(5, 4), (5, -13), (-6, 4), (-6, -13), (5, 15), (-6, 15), (5, 26), (-6, 26),
               (5, 37), (-6, 37), (5, 48), (-6, 48)]
    for x, y, text, colour in sorted(labels, key=lambda item: (item[0], item[1])):
        px, py = to_px((x, y))
        if any(abs(px - sx) < 4 and abs(py - sy) < 4 and text == st for sx, sy, st in seen):
            continue
        seen.append((px, py, text))
        w, h = (6.5 * len(text) + 2) * scale, 11 * scale
        for dx, dy in offsets:
            left = px + dx * scale - (w if dx < 0 else 0)
            bottom = py + dy * scale
            box = (left, bottom, left + w, bottom + h)
            clear = all(box[2] <= b[0] or box[0] >= b[2] or box[3] <= b[1] or box[1] >= b[3]
                        for b in placed)
            if clear and bottom >= bottom_px - 1:
                break
        placed.append(box)
        far = abs(dy) > 14  # a label pushed away gets a thin line back to its point
        ax.annotate(text, (x, y), xytext=(dx, dy), textcoords="offset points", fontsize=9,
                    color=colour, ha="right" if dx < 0 else "left", va="bottom",
                    arrowprops={"arrowstyle": "-", "lw": 0.5, "color": colour} if far else None,
                    annotation_clip=False)


def rate_axis_top(history: pd.DataFrame) -> float:
    """The requests/s axis of the failures plot: room for every bar of a steady run.

    A Locust history row written soon after the one before makes a spike (a count over
    a short interval); past twice the 98th percentile the axis stops, and the bars it
    cuts are marked with their height.
    """
    values = history[["requests_per_s", "failures_per_s"]].replace(
        [np.inf, -np.inf], np.nan).stack().dropna()
    if values.empty:
        return 1.0
    return max(1.0, min(float(values.max()), 2 * float(values.quantile(0.98))))


def throughput_latency(run_dir, out=None) -> Figure:
    """(a) RPS (answered + failed) and p95/p99 latency per stage, from metrics.json."""
    name = "throughput_latency"
    m = metrics_frame(run_dir)
    if m.empty:
        return empty(name, "no stage with results in this run", out)
    runs = stage_runs(run_dir)
    x = np.arange(len(m))
    fig = figure(max(8.5, 1.15 * len(m) + 2.5), 7.5)
    top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=[1.1, 1])
    _throughput_panel(top, m, x)
    _intervals(top, m, x, repeats.by_stage(run_dir))
    _latency_panel(bottom, m, x)
    bottom.set_xticks(x, [sr.tick for sr in runs], fontsize=9)
    fig.suptitle(f"{TITLES[name]}\n{run_note(run_dir)}", fontsize=13)
    return finish(fig, name, out)


def _throughput_panel(top, m: pd.DataFrame, x) -> None:
    """Answered and failed requests/s per stage, stacked; a bar too tall is cut and says so."""
    top.bar(x, m["ok_rps"], color=OK_COLOR, label="answered")
    top.bar(x, m["fail_rps"], bottom=m["ok_rps"], color=FAIL_COLOR, label="failed")
    for i, (rps, fails) in enumerate(zip(m["rps"], m["failures"], strict=True)):
        note = f"{rps:.0f}" + (f"\n{fails:.0f} failed" if fails else "")
        top.annotate(note, (i, rps), xytext=(0, 3), textcoords="offset points",
                     ha="center", va="bottom", fontsize=9)
    top.set_ylabel("requests/s (Locust)")
    ceiling = m["rps"].max() * 1.25 or 1  # the answered requests set the scale
    top.set_ylim(0, ceiling)
    for i, (ok, failed) in enumerate(zip(m["ok_rps"], m["fail_rps"], strict=True)):
        if ok + failed > ceiling:  # a bar the axis cuts: a break mark and its full height
            for dy in (0.955, 0.985):
                top.plot([i - 0.42, i + 0.42], [ceiling * (dy - 0.012), ceiling * (dy + 0.012)],
                         color="white", lw=2, solid_capstyle="butt", zorder=4)
            top.annotate(f"▲ cut\n{ok + failed:,.0f}/s in all\n{failed:,.0f}/s failed",
                         (i, ceiling * 0.93), xytext=(0, -2), textcoords="offset points",
                         ha="center", va="top", fontsize=7.5, color="white",
                         fontweight="bold", zorder=5)
    top.set_title("Throughput", fontsize=11, loc="left")
    top.legend(loc="upper left", fontsize=9, frameon=False)
    top.grid(axis="y", alpha=0.3)


def _intervals(top, m: pd.DataFrame, x, over: dict) -> None:
    """With --repeats: each stage's geometric mean RPS and its 95% interval over the bar (the bar is
    the first repeat's), and a step its paired test does not find marked `n.s.` (as the
    report judges it: repeats.tested, Holm's method over all the report's steps)."""
    ivs = [over.get(key, {}).get("rps") for key in m["key"]]
    if not any(iv and iv["low"] is not None for iv in ivs):
        return
    for i, iv in enumerate(ivs):
        if iv and iv["low"] is not None:
            whiskers = [[iv["mean"] - iv["low"]], [iv["high"] - iv["mean"]]]
            top.errorbar(i + 0.3, iv["mean"], yerr=whiskers, fmt="o", color="black", ms=4,
                         capsize=5, zorder=6,
                         label="geometric mean, 95% interval" if i == 0 else None)
    judged = {(a["stage"].key, b["stage"].key): test  # as the report judges them: Holm's
              for a, b, _, test in repeats.tested(over)["rps"]}  # over all its steps
    keys = list(m["key"])
    for i, (a, b) in enumerate(zip(ivs, ivs[1:], strict=False)):
        tested = judged.get((keys[i], keys[i + 1]))
        if a and b and tested and tested["significant"] is False:
            top.annotate("n.s.", (i + 0.5, max(a["high"], b["high"])), xytext=(0, 4),
                         textcoords="offset points", ha="center", fontsize=8, color="#555555")
    top.set_ylim(0, max(top.get_ylim()[1], max(iv["high"] for iv in ivs if iv
                                               and iv["high"] is not None) * 1.1))
    top.legend(loc="upper left", fontsize=9, frameon=False)


def _latency_panel(bottom, m: pd.DataFrame, x) -> None:
    """p95 and p99 per stage on a log scale, with the share of failed requests."""
    width = 0.38
    for offset, col, label, color in ((-width / 2, "p95_ms", "p95", "#8c9fca"),
                                      (width / 2, "p99_ms", "p99", "#3b4c8c")):
        values = m[col].fillna(0)
        bottom.bar(x + offset, values, width, color=color, label=label)
        for i, v in enumerate(values):
            if v > 0:
                bottom.annotate(f"{v:.0f}", (i + offset, v), xytext=(0, 2),
                                textcoords="offset points", ha="center", va="bottom",
                                fontsize=8)
    for i, (fails, requests) in enumerate(zip(m["failures"], m["requests"], strict=True)):
        if fails and requests:  # a 502 from Nginx is fast: it pulls the percentiles down
            bottom.annotate(f"{100 * fails / requests:.0f}% failed", (i, 0),
                            xycoords=("data", "axes fraction"), xytext=(0, 5),
                            textcoords="offset points", ha="center", va="bottom", fontsize=8,
                            color=FAIL_COLOR, zorder=5,
                            bbox={"boxstyle": "round,pad=0.25", "fc": "white",
                                  "ec": FAIL_COLOR, "lw": 0.6})
    if "server_p95_ms" in m and m["server_p95_ms"].notna().any():  # runs before it lack it
        bottom.scatter(x - width / 2, m["server_p95_ms"], marker="_", s=500, linewidths=2.5,
                       color="black", zorder=4, label="p95, the server's log")
    bottom.set_yscale("log")
    bottom.set_ylabel("latency, ms (log scale)")
    shown = [c for c in ("p95_ms", "p99_ms", "server_p95_ms") if c in m]
    low = max(1.0, float(m[shown].min().min()) / 2)
    high = float(m[["p95_ms", "p99_ms"]].max().max()) * 8  # room for the legend above the bars
    bottom.set_ylim(low, high)
    _plain_numbers(bottom.yaxis)
    bottom.set_title("Tail latency: 95% and 99% of requests were faster than",
                     fontsize=11, loc="left")
    bottom.legend(loc="upper right", fontsize=9, frameon=False)
    bottom.grid(axis="y", alpha=0.3, which="both")


def time_wait(run_dir, out=None) -> Figure:
    """(b) TIME_WAIT over time per connection class, one panel per stage, shared log scale."""
    name = "time_wait"
    samples = sampler_frame(run_dir)
    runs = [sr for sr in stage_runs(run_dir) if sr.stage.dirname in set(samples["stage"])]
    if not runs:
        return empty(name, "no sampler.csv in this run", out)
    nrows, ncols = _grid(len(runs))
    fig = figure(max(9.0, 4.2 * ncols), 2.9 * nrows + 1.0)
    axes = np.atleast_1d(fig.subplots(nrows, ncols, sharex=True, sharey=True,
                                      squeeze=False)).ravel()
    top = max(10.0, float(np.nanmax([samples[f"tw_{c}"].max() for c in CLASSES
                                     if f"tw_{c}" in samples] or [10])))
    limits = [ports for ax, sr in zip(axes, runs, strict=False)
              if (ports := _time_wait_panel(ax, samples[samples["stage"] == sr.stage.dirname],
                                            sr, top))]
    for ax in axes[len(runs):]:
        ax.set_visible(False)
    ax0 = axes[0]
    ax0.set_yscale("symlog", linthresh=10, linscale=0.5)
    ax0.set_ylim(0, max(top, *limits) * 2.5 if limits else top * 2.5)
    _plain_numbers(ax0.yaxis)
    _label_panels(axes, len(runs), nrows, ncols)
    handles = {}
    for ax in axes[:len(runs)]:
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(lab, h)
    order = [CLASS_LABELS[c] for c in CLASSES if CLASS_LABELS[c] in handles]
    fig.legend([handles[k] for k in order], order, loc="outside lower center",
               ncols=len(order), fontsize=9, frameon=False)
    fig.suptitle(f"{TITLES[name]} (log scale above 10)\n{run_note(run_dir)}", fontsize=13)
    return finish(fig, name, out)


def _time_wait_panel(ax, df: pd.DataFrame, sr: StageRun, top: float) -> int | None:
    """A stage's TIME_WAIT per class over time; the port limit it drew, if any."""
    drawn = [c for c in CLASSES if f"tw_{c}" in df and df[f"tw_{c}"].notna().any()]
    for i, cls in enumerate(drawn):
        # the first drawn are wider and paler, so a class whose counts equal another's
        # (stages 0 and 1: a Redis connection per request) shows around it
        ax.plot(df["t"], df[f"tw_{cls}"], color=CLASS_COLORS[cls],
                lw=2 + 2.5 * (len(drawn) - 1 - i), alpha=0.55 if i < len(drawn) - 1 else 1,
                ls=CLASS_DASHES[cls], marker=CLASS_MARKERS[cls], ms=4,
                label=CLASS_LABELS[cls])
    together = overlapping(df, drawn)
    if together:
        ax.annotate(" and ".join(together) + ": the same counts (lines on each other)",
                    (0.98, 0.04), xycoords="axes fraction", ha="right", fontsize=7.5,
                    color="#444444")
    ports = metrics.local_ports(sr.dir, sr.stage)
    # The port limit only matters to the client end of an outgoing connection; draw it
    # where it is within reach (a narrowed range, or TIME_WAIT past a tenth of it).
    drew = None
    if ports and (ports < 10000 or top > ports / 10):
        ax.axhline(ports, color="black", ls="--", lw=1)
        ax.annotate(f"{ports:,} local ports", (0.02, ports), xycoords=("axes fraction",
                    "data"), xytext=(0, 3), textcoords="offset points", fontsize=8)
        drew = ports
    ax.set_title(sr.label, fontsize=10)
    ax.grid(alpha=0.3, which="major")
    return drew


def _label_panels(axes, n: int, nrows: int, ncols: int) -> None:
    """Ticks on every panel; the y label on each row's first, the x label on each bottom one."""
    for ax in axes[:n]:
        ax.tick_params(labelleft=True, labelbottom=True, labelsize=8)
    for r in range(nrows):
        axes[r * ncols].set_ylabel("TIME_WAIT sockets")
    for ax in axes[(nrows - 1) * ncols:n]:
        ax.set_xlabel("seconds into the measured run")
    if nrows > 1:  # the last row can be short: label the panels above its gaps too
        for ax in axes[n - ncols:(nrows - 1) * ncols]:
            ax.set_xlabel("seconds into the measured run")


def time_wait_vs_throughput(run_dir, out=None) -> Figure:
    """(c) Peak TIME_WAIT per connection class against the stage's answered requests/s.

    Answered, not all: a request that fails at Nginx (no local port) opens no upstream
    connection. The guide line is one TIME_WAIT per request made since the warm-up began
    (a TIME_WAIT socket lasts 60 s, so at most a minute of requests).
    """
    name = "time_wait_vs_throughput"
    m = metrics_frame(run_dir)
    if m.empty:
        return empty(name, "no stage with results in this run", out)
    try:
        p = run_info(run_dir)["parameters"]
        window = min(float(p["duration_s"]) + float(p.get("warmup_s") or 0), TIME_WAIT_SECONDS)
    except (OSError, KeyError, TypeError, ValueError):
        window = TIME_WAIT_SECONDS
    fig = figure(9, 6.8)
    ax = fig.subplots()
    xmax = float(m["ok_rps"].max()) * 1.15 or 1.0
    xs = np.linspace(0, xmax, 50)
    ax.plot(xs, xs * window, color="black", ls="--", lw=1,
            label=f"one TIME_WAIT per request (the {window:g} s of warm-up and run)")
    peak_cols = [f"tw_{c}_peak" for c in CLASSES if f"tw_{c}_peak" in m]
    ymax = max(float(m[peak_cols].max().max()), xmax * window, 10.0)
    floor = ymax * 0.03  # dots this close to 0 share one label per stage, below the axis line
    for cls in CLASSES:
        col = f"tw_{cls}_peak"
        if col not in m or m[col].isna().all():
            continue
        sub = m[m[col].notna()]
        ax.scatter(sub["ok_rps"], sub[col], s=70, color=CLASS_COLORS[cls], label=CLASS_LABELS[cls],
                   marker=CLASS_MARKERS[cls], zorder=3, edgecolor="white", linewidth=0.8,
                   alpha=0.85, clip_on=False)
    labels = _dot_labels(m, peak_cols, floor)
    _narrowed_port_ranges(ax, run_dir, ymax)
    ax.set_ylim(0, ymax * 1.12)
    ax.set_xlim(0, xmax)
    _plain_numbers(ax.yaxis)
    ax.set_xlabel("throughput, answered requests/s (Locust)")
    ax.set_ylabel("peak TIME_WAIT sockets")
    ax.grid(alpha=0.3)
    fig.legend(*ax.get_legend_handles_labels(), loc="outside lower center", ncols=2,
               fontsize=9, frameon=False)
    place_labels(ax, labels)
    keys = ", ".join(sr.label for sr in stage_runs(run_dir))
    # wrapped here: matplotlib's own wrap (wrap=True) squeezes a long title into a narrow
    # column under constrained layout, which then collapses the axes (17 stages)
    title = textwrap.fill(f"Stages (the number beside each dot): {keys}", width=150)
    ax.set_title(title, fontsize=8, color="#444444")
    fig.suptitle(f"{TITLES[name]}\n{run_note(run_dir)}", fontsize=13)
    return finish(fig, name, out)


def _dot_labels(m: pd.DataFrame, peak_cols: list[str],
                floor: float) -> list[tuple[float, float, str, str]]:
    """(x, y, text, colour) of each dot's stage key, placed together later so none lands
    on another; dots this close to 0 share one label per stage, below the axis line."""
    labels = []
    for cls in CLASSES:
        col = f"tw_{cls}_peak"
        if col in m:
            labels += [(row["ok_rps"], row[col], row["key"], CLASS_COLORS[cls])
                       for _, row in m[m[col] > floor].iterrows()]
    for _, row in m.iterrows():
        if any(pd.notna(row.get(c)) and row[c] <= floor for c in peak_cols):
            labels.append((row["ok_rps"], 0.0, row["key"], "#444444"))
    return labels


def _narrowed_port_ranges(ax, run_dir, ymax: float) -> None:
    """A line at each narrowed port range within the axis: it caps the client end of a
    churning class (Nginx -> app)."""
    ranges = (metrics.local_ports(sr.dir, sr.stage) for sr in stage_runs(run_dir))
    narrowed = sorted({p for p in ranges if p and p < ymax})
    for ports in narrowed:
        ax.axhline(ports, color="black", ls=":", lw=1)
        ax.annotate(f"{ports:,} local ports: the most an outgoing class can hold",
                    (0.0, ports), xycoords=("axes fraction", "data"), xytext=(4, 3),
                    textcoords="offset points", ha="left", fontsize=8)


def cpu(run_dir, out=None) -> Figure:
    """(d) Mean CPU per component per stage, stacked; Locust hatched, flagged past 90%.

    The flag is metrics.client_bound (Locust's p95), as the lab's warning and the report's.
    """
    name = "cpu"
    frame = cpu_frame(run_dir)
    frame = frame.dropna(how="all")
    if frame.empty:
        return empty(name, "no CPU samples in this run", out)
    by_name = {sr.stage.dirname: sr for sr in stage_runs(run_dir)}
    runs = [by_name[s] for s in frame.index]
    try:
        cores = int(run_info(run_dir).get("cores") or 0)
    except (OSError, ValueError):
        cores = 0
    x = np.arange(len(frame))
    fig = figure(max(8.5, 1.15 * len(frame) + 2.5), 5.8)
    ax = fig.subplots()
    base = np.zeros(len(frame))
    for comp in COMPONENTS:
        values = frame[comp].fillna(0.0).to_numpy()
        if not values.any() and frame[comp].isna().all():
            continue
        ax.bar(x, values, bottom=base, color=COMPONENT_COLORS[comp], label=comp,
               hatch="//" if comp == "locust" else None, edgecolor="white", linewidth=0.5)
        base = base + values
    # flagged as the lab's warning and report.md's note are
    m = metrics_frame(run_dir).reindex(frame.index)
    p95s = m["client_cpu_p95"] if "client_cpu_p95" in m else m["client_cpu_peak"]
    for i, (mean, p95) in enumerate(zip(frame["locust"].fillna(0.0), p95s, strict=True)):
        p95 = mean if pd.isna(p95) else p95
        busy = metrics.client_bound({"client_cpu_p95": p95})
        # whole percents, rounded down: 89.6 must not read "90" when the flag is off
        ax.annotate(f"Locust {int(mean)}%\np95 {int(p95)}%" + ("\nclient-bound!" if busy else ""),
                    (i, base[i]), xytext=(0, 3), textcoords="offset points", ha="center",
                    va="bottom", fontsize=8, color=FAIL_COLOR if busy else "#444444",
                    fontweight="bold" if busy else "normal", zorder=5,
                    # the all-cores line passes behind the note, not through it
                    bbox={"boxstyle": "square,pad=0.1", "fc": "white", "ec": "none"})
    ymax = max(float(base.max()), cores * 100.0) * 1.18
    if cores:
        ax.axhline(cores * 100, color="black", ls=":", lw=1.2)
        # at the left: the first stage's bar (the built-in server, one core) is short
        ax.annotate(f"{cores} cores = {cores * 100}%", (0.01, cores * 100),
                    xycoords=("axes fraction", "data"), xytext=(0, 3),
                    textcoords="offset points", ha="left", fontsize=8)
    ax.set_ylim(0, ymax)
    ax.set_xlim(-0.5 - 0.5 / len(frame), len(frame) - 0.5 + 0.5 / len(frame))
    ax.set_ylabel("mean CPU over the measured run, % of one core")
    ax.set_xticks(x, [sr.tick for sr in runs], fontsize=9)
    fig.legend(*ax.get_legend_handles_labels(), loc="outside lower center",
               ncols=len(COMPONENTS), fontsize=9, frameon=False)
    ax.grid(axis="y", alpha=0.3)
    fig.suptitle(f"{TITLES[name]}\n{run_note(run_dir)}", fontsize=13)
    return finish(fig, name, out)


def failures(run_dir, out=None) -> Figure | None:
    """(e) Failed requests/s next to upstream TIME_WAIT, one panel per Nginx stage.

    Returns None (and writes nothing) when the run has no Nginx stage.
    """
    name = "failures"
    runs = [sr for sr in stage_runs(run_dir) if sr.stage.front]
    samples = sampler_frame(run_dir)
    history = history_frame(run_dir)
    runs = [sr for sr in runs if sr.stage.dirname in set(samples["stage"])]
    if not runs:
        return None
    nrows, ncols = _grid(len(runs), max_cols=2)
    fig = figure(max(9.0, 5.6 * ncols), 3.3 * nrows + 1.3)
    axes = np.atleast_1d(fig.subplots(nrows, ncols, sharex=True, squeeze=False)).ravel()
    tw_top = max(10.0, float(samples.loc[samples["stage"].isin(
        [sr.stage.dirname for sr in runs]), "tw_upstream"].max()))
    ports_all = [p for p in (metrics.local_ports(sr.dir, sr.stage) for sr in runs) if p]
    tw_top = max(tw_top, *ports_all) if ports_all else tw_top
    fail_top = rate_axis_top(history[history["stage"].isin([sr.stage.dirname for sr in runs])])
    twins = [_failures_panel(ax, sr, samples[samples["stage"] == sr.stage.dirname],
                             history[history["stage"] == sr.stage.dirname].dropna(
                                 subset=["requests_per_s"]), tw_top, fail_top)
             for ax, sr in zip(axes, runs, strict=False)]
    for ax in axes[len(runs):]:
        ax.set_visible(False)
    handles = axes[0].get_legend_handles_labels()
    more = twins[0].get_legend_handles_labels()
    fig.legend(handles[0] + more[0], handles[1] + more[1], loc="outside lower center",
               ncols=3, fontsize=9, frameon=False)
    fig.suptitle(f"{TITLES[name]}\n{run_note(run_dir)}", fontsize=13)
    return finish(fig, name, out)


def _failures_panel(ax, sr: StageRun, df: pd.DataFrame, hist: pd.DataFrame, tw_top: float,
                    fail_top: float):
    """A stage's failed and answered requests/s (right axis) beside Nginx's upstream
    TIME_WAIT (left); returns the right axis."""
    right = ax.twinx()
    right.bar(hist["t"] - 0.5, hist["failures_per_s"].clip(upper=fail_top), width=0.9,
              color=FAIL_COLOR, alpha=0.55, label="failed requests/s (Locust)")
    for t, v in zip(hist["t"], hist["failures_per_s"], strict=True):
        if v > fail_top:  # a bar the axis cuts says how tall it was
            right.annotate(f"▲{v:,.0f}", (t - 0.5, fail_top), xytext=(0, 1),
                           textcoords="offset points", ha="center", va="bottom",
                           fontsize=6.5, color=FAIL_COLOR, annotation_clip=False)
    # each history row counts the second before it
    right.hlines(hist["requests_per_s"] - hist["failures_per_s"], hist["t"] - 1, hist["t"],
                 color=OK_COLOR, lw=2.2, label="answered requests/s (Locust)")
    ax.plot(df["t"], df["tw_upstream_client"], color=CLASS_COLORS["upstream"], lw=2.2,
            marker=CLASS_MARKERS["upstream"], ms=4, zorder=3,
            label="upstream TIME_WAIT, Nginx's end (local ports held)")
    ax.set_zorder(right.get_zorder() + 1)
    ax.patch.set_visible(False)
    ports = metrics.local_ports(sr.dir, sr.stage)
    if ports:
        ax.axhline(ports, color="black", ls="--", lw=1)
        ax.annotate(f"{ports:,} local ports", (0.02, ports),
                    xycoords=("axes fraction", "data"), xytext=(0, 3),
                    textcoords="offset points", fontsize=8)
    # the table's figure (metrics.json), not the per-second history's last row: Locust's
    # history misses the last second
    total_fail = results.read_json(sr.dir / results.METRICS_JSON).get("failures") or 0
    ax.set_title(f"{sr.label}: {total_fail:,} failed requests", fontsize=10)
    ax.set_ylim(0, tw_top * 1.15)
    right.set_ylim(0, fail_top * 1.12)
    ax.set_ylabel("TIME_WAIT sockets", color=CLASS_COLORS["upstream"])
    right.set_ylabel("requests/s: failed (bars), answered (line)")
    ax.set_xlabel("seconds into the measured run")
    ax.tick_params(labelbottom=True)
    ax.grid(alpha=0.3)
    return right


def cpu_by_bucket(run_dir, out=None) -> Figure | None:
    """(f) The app server's CPU per answered request, split by where py-spy saw it go.

    Each bar is app_cpu_ms_per_request (the sampler's), cut by buckets.per_request: the
    CPU of threads py-spy cannot see (granian's Rust) a hatched segment of its own, the
    rest into the stage's cpu_share_*; a stage that was not profiled is one grey bar.
    Returns None (and writes nothing) when no stage was profiled."""
    name = "cpu_by_bucket"
    m = metrics_frame(run_dir)
    shares = [f"cpu_share_{b}" for b in buckets.BUCKETS]
    m = m.reindex(columns=[*m.columns.difference(shares), *shares])
    if m[shares].isna().all(axis=None):
        return None
    m = m.dropna(subset=["app_cpu_ms_per_request"])
    x = np.arange(len(m))
    fig = figure(max(8.5, 1.15 * len(m) + 2.5), 5.8)
    ax = fig.subplots()
    base = np.zeros(len(m))
    total = m["app_cpu_ms_per_request"].to_numpy()
    rows = [buckets.per_request({k: (None if pd.isna(v) else v) for k, v in row.items()})
            or {} for _, row in m.iterrows()]
    for bucket, color in zip((*buckets.BUCKETS, buckets.NATIVE), BUCKET_COLORS, strict=True):
        values = np.array([row.get(bucket, 0.0) for row in rows])
        if bucket == buckets.NATIVE and not values.any():
            continue  # no stage with threads py-spy cannot see
        label = buckets.NATIVE_LABEL if bucket == buckets.NATIVE else bucket.replace("_", " ")
        ax.bar(x, values, bottom=base, color=color, label=label, edgecolor="white",
               linewidth=0.5, hatch="//" if bucket == buckets.NATIVE else None)
        base = base + values
    unprofiled = m[shares].isna().all(axis=1).to_numpy()
    if unprofiled.any():
        ax.bar(x[unprofiled], total[unprofiled], color="#cccccc", label="not profiled")
    for i, ms in enumerate(total):
        ax.annotate(f"{ms:.2f} ms", (i, ms), xytext=(0, 3), textcoords="offset points",
                    ha="center", va="bottom", fontsize=9)
    ax.set_ylim(0, float(total.max()) * 1.15)
    ax.set_ylabel("app server CPU per answered request, ms")
    ticks = {sr.stage.dirname: sr.tick for sr in stage_runs(run_dir)}
    ax.set_xticks(x, [ticks[s] for s in m.index], fontsize=9)
    fig.legend(*ax.get_legend_handles_labels(), loc="outside lower center", ncols=5,
               fontsize=9, frameon=False)
    ax.grid(axis="y", alpha=0.3)
    fig.suptitle(f"{TITLES[name]}\n{run_note(run_dir)}", fontsize=13)
    return finish(fig, name, out)


# name -> function, in the order report.md and the notebook show them
PLOTS = {
    "throughput_latency": throughput_latency,
    "time_wait": time_wait,
    "time_wait_vs_throughput": time_wait_vs_throughput,
    "cpu": cpu,
    "failures": failures,
    "cpu_by_bucket": cpu_by_bucket,
}

