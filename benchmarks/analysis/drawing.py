"""What every plot of the lab draws with: a figure without pyplot, written as a small PNG,
the empty picture of a run without the data, and the line that says which run it is.
benchmarks/analysis/plots.py uses it."""

from __future__ import annotations

import io
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from PIL import Image

from benchmarks.analysis.captions import TITLES
from benchmarks.run.results import run_info

DPI = 100


def figure(width: float, height: float) -> Figure:
    fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def finish(fig: Figure, name: str, out) -> Figure:
    """Write the figure as a 256-colour PNG (a third of the size, same look) when asked."""
    if out is not None:
        out = Path(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=DPI)
        buf.seek(0)
        with Image.open(buf) as image:
            image.convert("RGB").quantize(colors=256, dither=Image.Dither.NONE).save(
                out, format="PNG", optimize=True)
    return fig


def empty(name: str, why: str, out) -> Figure:
    fig = figure(8, 2)
    fig.suptitle(TITLES[name], fontsize=13)
    fig.text(0.5, 0.45, why, ha="center", va="center", fontsize=11, color="#555555")
    return finish(fig, name, out)


def run_note(run_dir) -> str:
    """`run of 2026-11-22T02:41:15: 30 s measured per stage, 50 Locust users, 2 cores`."""
    try:
        info = run_info(run_dir)
    except (OSError, ValueError):
        return f"run {Path(run_dir).resolve().name}"
    p = info.get("parameters", {})
    seconds = p.get("duration_s")
    seconds = f"{seconds:g}" if isinstance(seconds, int | float) else "?"
    return (f"run of {info.get('started') or Path(run_dir).resolve().name}: {seconds} s "
            f"measured per stage, {p.get('users', '?')} Locust users, "
            f"{info.get('cores', '?')} cores")
