"""Means with a 95% interval, for figures measured several times (`lab run --repeats`).

A difference between two stages means something only when it is larger than the
box's own noise. With n repeats of a stage, its mean has a 95% confidence
interval of mean ± t * sd / sqrt(n) (Student's t, n - 1 degrees of freedom:
with 3 repeats t is 4.30, so three runs that agree within 5% still give an
interval of about ±12%). Two consecutive stages whose intervals overlap are
"not significant on this box": a conservative test, and one a reader can see on
the plot.
"""

from __future__ import annotations

import math
import statistics

# Student's t for a two-sided 95% interval, by degrees of freedom (n - 1)
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
       9: 2.262, 10: 2.228, 12: 2.179, 15: 2.131, 20: 2.086, 30: 2.042}
NORMAL_95 = 1.96  # many repeats


def t95(df: int) -> float:
    """Student's t for `df` degrees of freedom (the next smaller tabled one: wider)."""
    if df > max(T95):
        return NORMAL_95
    return T95[max(k for k in T95 if k <= df)]


def interval(values) -> dict:
    """{n, mean, sd, low, high} of the numbers among `values` (None skipped); sd, low and
    high are None with fewer than two."""
    xs = [float(v) for v in values if v is not None and not math.isnan(float(v))]
    if not xs:
        return {"n": 0, "mean": None, "sd": None, "low": None, "high": None}
    mean = statistics.fmean(xs)
    if len(xs) < 2:
        return {"n": 1, "mean": mean, "sd": None, "low": None, "high": None}
    sd = statistics.stdev(xs)
    half = t95(len(xs) - 1) * sd / math.sqrt(len(xs))
    return {"n": len(xs), "mean": mean, "sd": sd, "low": mean - half, "high": mean + half}


def nearest_rank(ordered: list[float], fraction: float) -> float | None:
    """The `fraction` percentile of sorted values, nearest rank (a value that occurred);
    None without values."""
    if not ordered:
        return None
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def significant(a: dict, b: dict) -> bool | None:
    """True when the two intervals do not overlap; None when either has none."""
    if None in (a["low"], a["high"], b["low"], b["high"]):
        return None
    return a["high"] < b["low"] or b["high"] < a["low"]
