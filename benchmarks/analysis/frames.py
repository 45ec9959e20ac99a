"""A results run folder as pandas data frames: what the plots and the notebook draw from.

    from benchmarks.analysis import frames
    frames.metrics_frame("results/latest")   # a row per stage: its metrics.json
    frames.sampler_frame("results/latest")   # a row per sample: every stage's sampler.csv
    frames.history_frame("results/latest")   # Locust's history, on the sampler's clock
    frames.cpu_frame("results/latest")       # mean CPU, stage x component

A stage counts when its folder has `metrics.json` (`stage_runs`), so a run of
some stages, or one whose stage failed to run, still gives what is there.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from benchmarks.analysis import metrics
from benchmarks.capture import csvfile
from benchmarks.run import results
from benchmarks.stages import Stage

COMPONENTS = ("app", "app2", "redis", "nginx", "sampler", "locust")  # the sampler's, as plotted


@dataclass(frozen=True)
class StageRun:
    """One stage of a run: its registry entry and its folder."""

    stage: Stage
    dir: Path

    @property
    def label(self) -> str:
        """`3g gevent-keepalive`: the stage's key and slug, as plots show them."""
        return f"{self.stage.key} {self.stage.slug}"

    @property
    def tick(self) -> str:
        """The label on a few short lines, for a bar's tick."""
        return "\n".join([self.stage.key, *textwrap.wrap(self.stage.slug, 16)])


def stage_runs(run_dir) -> list[StageRun]:
    """The run's stages that have results (`metrics.json`), in registry order."""
    return [StageRun(stage, folder) for stage, folder in results.measured_stages(run_dir)]


def metrics_frame(run_dir) -> pd.DataFrame:
    """One row per stage: every number of its metrics.json, indexed by the stage folder name."""
    rows = []
    for sr in stage_runs(run_dir):
        m = results.read_json(sr.dir / results.METRICS_JSON)
        rows.append({"stage": sr.stage.dirname, "key": sr.stage.key, "label": sr.label,
                     "title": sr.stage.title, "front": sr.stage.front, **m})
    if not rows:
        return pd.DataFrame(columns=["stage", "key", "label", "title", "front"]).set_index("stage")
    frame = pd.DataFrame(rows).set_index("stage")
    # metrics.json has None where a number does not apply (no `upstream` without Nginx)
    numeric = [c for c in frame.columns if c not in ("key", "label", "title", "front")]
    frame[numeric] = frame[numeric].apply(pd.to_numeric, errors="coerce")
    # metrics' `rps` counts answered requests; `locust_rps` counts failures too
    frame["ok_rps"] = frame["rps"]
    frame["fail_rps"] = (frame["locust_rps"] - frame["rps"]).fillna(0.0).clip(lower=0.0)
    return frame


def sampler_frame(run_dir) -> pd.DataFrame:
    """Every stage's sampler.csv, one row per sample, with `stage` and `label` columns.

    `t` is seconds since the sampler started (it starts with the measured Locust run).
    """
    parts = []
    for sr in stage_runs(run_dir):
        names, rows = csvfile.table(sr.dir / results.SAMPLER_CSV)
        df = pd.DataFrame(rows, columns=names)
        if df.empty:
            continue
        df.insert(0, "stage", sr.stage.dirname)
        df.insert(1, "label", sr.label)
        df.insert(2, "t", df["elapsed_s"])
        parts.append(df)
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(
        columns=["stage", "label", "t", "ts", "elapsed_s"])


def history_frame(run_dir) -> pd.DataFrame:
    """Locust's per-second history (Aggregated rows) of every stage, on the sampler's clock.

    `requests_per_s` and `failures_per_s` are differences of Locust's cumulative counts
    between rows, over the second before each row (its own `Requests/s` and `Failures/s`
    columns are averages over the last seconds that lag behind). `t` is the row's time in
    seconds since that stage's sampler started, so it lines up with `sampler_frame`.
    """
    parts = []
    for sr in stage_runs(run_dir):
        path = sr.dir / results.LOCUST_HISTORY
        if not path.exists():
            continue
        df = pd.read_csv(path)
        df = df[df["Name"] == "Aggregated"].sort_values("Timestamp").reset_index(drop=True)
        if df.empty:
            continue
        dt = df["Timestamp"].diff()
        # the first row has no interval before it: NaN, not 0
        df["requests_per_s"] = df["Total Request Count"].diff() / dt
        df["failures_per_s"] = df["Total Failure Count"].diff() / dt
        df["t"] = df["Timestamp"] - _sampler_start(sr.dir, default=df["Timestamp"].iloc[0])
        df.insert(0, "stage", sr.stage.dirname)
        df.insert(1, "label", sr.label)
        parts.append(df)
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(
        columns=["stage", "label", "t", "requests_per_s", "failures_per_s"])


def _sampler_start(stage_dir: Path, default: float) -> float:
    first = csvfile.rows(stage_dir / results.SAMPLER_CSV)[:1]
    return float(first[0]["ts"] - first[0]["elapsed_s"]) if first else float(default)


def cpu_frame(run_dir) -> pd.DataFrame:
    """Mean CPU (% of one core) of each component over the measured window: stage x component.

    `metrics.mean_cpu` (weighted by each sample's interval). A component a stage does not
    have (Nginx without a proxy) is NaN.
    """
    runs = stage_runs(run_dir)
    out = pd.DataFrame(index=pd.Index([sr.stage.dirname for sr in runs], name="stage"),
                       columns=list(COMPONENTS), dtype=float)
    for sr in runs:
        for comp in COMPONENTS:
            mean = metrics.mean_cpu(sr.dir / results.SAMPLER_CSV, f"cpu_{comp}")
            if mean is not None:
                out.loc[sr.stage.dirname, comp] = mean
    return out
