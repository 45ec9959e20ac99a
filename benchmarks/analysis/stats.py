"""The lab's statistics, in one place: intervals, the step test, the percentile rule.

- **An interval of a positive quantity** (`interval`: a time, CPU per request, a rate,
  RPS, a percentile; every interval the lab prints is of one): on the log scale, the t
  interval of the logs exponentiated, exp(mean log ± t * sd / sqrt(n)) with Student's t
  of n - 1 degrees of freedom from scipy.stats (4.30 with 3 repeats: three runs that
  agree within 5% still give about ±12%). Its centre is the geometric mean, and that is
  the mean printed beside it. Why: a time cannot be negative, and a t interval on the
  raw scale crosses zero with 3 noisy repeats (0.07, 0.53, 1.0 ms give 0.53
  [-0.62, 1.69]); on the log scale it is 0.33 [0.011, 10.5]: wide, as three such repeats
  are, but only over values the quantity can take. The plots draw these.
- **A step between two stages** (`step`): the stages ran interleaved, once per
  repeat, so a drift of the box moves both; the step is judged on the ratio within
  each repeat. The test is a paired t test on the log ratios (a ratio of 2 and one
  of 1/2 are the same size of change): the ratio is their geometric mean, its 95%
  interval exp(mean log ± t * sd / sqrt(n)), and p the two-sided one-sample t test of
  the logs against 0. "Significant" means p < ALPHA, everywhere the lab says it.
- **Several steps in one report** (`family`): thirty tests at 0.05 find one or two
  "significant" steps by chance. A report that tests several steps adjusts their p
  together by Holm's method (Holm-Bonferroni, `holm`: the k-th smallest of m p values
  times m - k + 1, never below the one before, at most 1), and a step is significant
  when its adjusted p < ALPHA: the chance of any false finding among them stays under
  ALPHA. The report says how many it tested (`family_line`), and each verdict gives both
  p's. A step's interval stays its own 95% one.
- **A ratio of two things measured apart** (`ratio`: a stage's CPU per request over the
  floor's): the ratio of their geometric means, its interval from Welch's t on the
  logs; unpaired, so wider than a step's. With `lab run --floor` each repeat has a
  floor of its own, and the multiple is judged as a step is (`step`).
- **A percentile** (`percentile`): Locust's own rule, so the lab's figures are the
  ones its web UI shows; shown only with ENOUGH requests beyond it (`too_few`). The
  same rule reads Locust's buckets or an HdrHistogram's (benchmarks/latency_log.py):
  SOURCES says how precise each is, and the report says which one a figure comes from.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping

# scipy (and numpy under it) is imported where a test is computed: `lab list` imports
# the report, and starts without them (tests/lab/test_layout.py)
ALPHA = 0.05  # a step is "significant" when its paired test's p is below this
CANNOT_TELL = "this run cannot tell"  # ends every "not significant" (verdict)
ENOUGH = 10  # requests beyond a percentile for it to be shown: p99 needs 1,000
# where a percentile's times come from, and to what precision they are kept
# (locust.stats.bucket_response_time; latency_log.DIGITS)
SOURCES = {"locust": "Locust, 10 ms buckets to 1 s, 100 ms to 10 s",
           "hdrhistogram": "HdrHistogram, 3 digits"}


def t95(df: int) -> float:
    """Student's t for a two-sided 95% interval with `df` degrees of freedom."""
    from scipy import stats as scipy_stats
    return float(scipy_stats.t.ppf(0.975, df))


def interval(values) -> dict:
    """A positive quantity's interval over its repeats (the rule above): {n, mean (the
    geometric mean), sd (of the values themselves, their spread as summary.csv gives
    it), low, high (the 95% interval, log scale), log (True)}. None and NaN are
    skipped; sd, low and high are None with fewer than two values. A value of 0 or less
    has no log: then mean is the arithmetic mean, low and high None and log False
    (such a figure is not a positive quantity, or a stage that answered nothing)."""
    xs = [float(v) for v in values if v is not None and not math.isnan(float(v))]
    out = {"n": len(xs), "mean": None, "sd": None, "low": None, "high": None, "log": True}
    if not xs:
        return out
    if min(xs) <= 0:
        return {**out, "mean": statistics.fmean(xs), "log": False,
                "sd": statistics.stdev(xs) if len(xs) > 1 else None}
    if len(xs) < 2:
        return {**out, "mean": xs[0]}
    logs = [math.log(x) for x in xs]
    centre = statistics.fmean(logs)
    out["mean"] = math.exp(centre)
    half = t95(len(xs) - 1) * statistics.stdev(logs) / math.sqrt(len(xs))
    return {**out, "sd": statistics.stdev(xs), "low": math.exp(centre - half),
            "high": math.exp(centre + half)}


def mean(values) -> float | None:
    """The arithmetic mean of the numbers among `values` (None skipped), for a figure
    printed alone; one printed with an interval takes `interval`'s (geometric) mean."""
    xs = [float(v) for v in values if v is not None and not math.isnan(float(v))]
    return statistics.fmean(xs) if xs else None


def step(ratios: list[float]) -> dict:
    """The paired test of a step from its ratios within each repeat: {n, ratio (geometric
    mean), low, high (its 95% interval: `interval` of the ratios), t, p, significant}.
    With one ratio there is no test: low, high, t, p and significant are None."""
    iv = interval([r for r in ratios if r and r > 0])
    out = {"n": iv["n"], "ratio": iv["mean"], "low": iv["low"], "high": iv["high"],
           "t": None, "p": None, "significant": None}
    if iv["low"] is None:
        return out
    logs = [math.log(r) for r in ratios if r and r > 0]
    if statistics.stdev(logs) == 0:  # every repeat gave the same ratio: no spread to test
        t, p = (math.inf, 0.0) if logs[0] else (0.0, 1.0)
    else:
        from scipy import stats as scipy_stats
        result = scipy_stats.ttest_1samp(logs, 0.0)
        t, p = float(result.statistic), float(result.pvalue)
    return {**out, "t": t, "p": p, "significant": p < ALPHA}


def holm(ps: list[float]) -> list[float]:
    """Holm's adjusted p values, in the order given: sorted ascending, the k-th (from 1)
    of m times m - k + 1, each at least the one before it, at most 1."""
    order = sorted(range(len(ps)), key=lambda i: ps[i])
    out, running = [0.0] * len(ps), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(ps) - rank) * ps[i]))
        out[i] = running
    return out


def family(tests: list[dict]) -> list[dict]:
    """The steps of one report as one family (Holm's method): each step that has a p
    gains `p_holm` (its adjusted p) and `family` (how many steps had one), and is
    `significant` when p_holm < ALPHA; the others are returned as they are."""
    ps = [t["p"] for t in tests if t.get("p") is not None]
    adjusted = iter(holm(ps))
    out = []
    for t in tests:
        if t.get("p") is None:
            out.append(t)
            continue
        p_holm = next(adjusted)
        out.append({**t, "p_holm": p_holm, "family": len(ps), "significant": p_holm < ALPHA})
    return out


def family_line(tests, start: bool = False) -> str:
    """What a report says beside its verdicts: how many steps it tested, and how it keeps
    chance findings out. `tests`: the steps (dicts) or (name, step) pairs; `start`: as
    a sentence's start (its first letter a capital)."""
    said = _family_line(tests)
    return said[:1].upper() + said[1:] if start else said


def _family_line(tests) -> str:
    steps = [t[-1] if isinstance(t, tuple) else t for t in tests]
    n = sum(1 for t in steps if t.get("p") is not None)
    if n == 0:
        return ("no step is tested (one repeat: `--repeats 3` runs each three times and "
                "tests each step)")
    if n == 1:
        return f"1 step tested, significant when p < {ALPHA:g}"
    return (f"{n} steps tested; each p adjusted for the {n} by Holm's method "
            f"(Holm-Bonferroni), significant when the adjusted p < {ALPHA:g} (unadjusted, "
            f"{n} tests at {ALPHA:g} would find {n * ALPHA:g} by chance on average)")


def ratio(over, under) -> dict:
    """The ratio of two positive quantities measured apart, not paired (a stage's CPU per
    request over the floor's): {ratio (geometric mean of `over` over that of `under`),
    low, high}, its 95% interval from Welch's t on the logs, exp(d ± t * se) with se =
    sqrt(var1/n1 + var2/n2) of the logs and the Welch-Satterthwaite degrees of freedom.
    low and high are None unless both have two values or more."""
    a, b = interval(over), interval(under)
    out = {"ratio": None, "low": None, "high": None}
    if a["mean"] is None or b["mean"] is None or not (a["log"] and b["log"]) or not b["mean"]:
        return out
    out["ratio"] = a["mean"] / b["mean"]
    if a["low"] is None or b["low"] is None:
        return out
    parts = [statistics.variance([math.log(x) for x in xs if x is not None]) / n
             for xs, n in ((over, a["n"]), (under, b["n"]))]
    se = math.sqrt(sum(parts))
    if se == 0:  # neither side moved: nothing to widen it
        return {**out, "low": out["ratio"], "high": out["ratio"]}
    df = se ** 4 / sum(v ** 2 / (n - 1) for v, n in zip(parts, (a["n"], b["n"]), strict=True))
    half = t95(df) * se
    return {**out, "low": out["ratio"] * math.exp(-half), "high": out["ratio"] * math.exp(half)}


def verdict(s: dict) -> str:
    """A step in words, the one form the report, `lab run` and the pages use:
    `2.09x [1.46, 2.99], p = 0.013: significant`, and when it is not, what its interval
    still allows: `1.06x [0.85, 1.34], p = 0.360: not significant: between 0.85x and
    1.34x, this run cannot tell` (no evidence either way, not evidence of no change).
    A step of a family (`family`) gives its adjusted p beside its own: `1.62x [1.00,
    2.62], p = 0.049, adjusted p = 0.683 (Holm, 15 steps): not significant once 15 steps
    are counted: between 1.00x and 2.62x, this run cannot tell`."""
    if s["ratio"] is None:
        return "not measured in a repeat of both"
    if s["p"] is None:
        return f"{_x(s['ratio'])}x, one repeat: no test"  # family_line says how, once
    p, counted = _p(s["p"]), "p_holm" in s and s.get("family", 1) > 1
    if counted:
        p += f", adjusted {_p(s['p_holm'])} (Holm, {s['family']} steps)"
    said = f"{_x(s['ratio'])}x [{_x(s['low'])}, {_x(s['high'])}], {p}: "
    if s["significant"]:
        return said + "significant"
    if counted and s["p"] < ALPHA:  # its own interval leaves 1x out; the family's does not
        return (said + f"not significant once {s['family']} steps are counted: "
                + cannot_tell(s["low"], s["high"]))
    return said + "not significant: " + cannot_tell(s["low"], s["high"])


def _p(p: float, name: str = "p") -> str:
    return f"{name} < 0.001" if p < 0.001 else f"{name} = {p:.3f}"


def cannot_tell(low: float, high: float) -> str:
    """What a step that is not significant still allows: `between 0.85x and 1.34x, this
    run cannot tell`."""
    return f"between {_x(low)}x and {_x(high)}x, {CANNOT_TELL}"


def _x(ratio: float) -> str:
    """A ratio to two decimals; under 0.1 to two significant digits, so that a small
    bound reads as the positive number it is (0.0042, not 0.00)."""
    return f"{ratio:.2f}" if ratio >= 0.1 else f"{ratio:.2g}"


def percentile(counts: Mapping[float, int], fraction: float) -> float | None:
    """The value `fraction` of the counted values are at or under, from {value: count},
    by Locust's rule (locust.stats.calculate_response_time_percentile: the value at
    rank int(n * fraction) + 1); None when nothing was counted. A list of values:
    `percentile(collections.Counter(values), 0.95)`. HdrHistogram's Python package
    (get_value_at_percentile) takes rank round(n * fraction), its Java library (and so
    HistogramLogProcessor) ceil(n * fraction): on the same .hlog either can give the next
    request down."""
    n = sum(counts.values())
    if not n:
        return None
    below, seen = int(n * fraction), 0
    for value in sorted(counts, reverse=True):
        seen += counts[value]
        if n - seen <= below:
            return value
    return min(counts)  # not reached: the smallest value always qualifies


def needed(fraction: float) -> int:
    """Requests a run needs for its `fraction` percentile: ENOUGH beyond it."""
    return round(ENOUGH / (1 - fraction))


def too_few(fraction: float, count: int | None) -> str | None:
    """`p99.99: too few requests (5,809; needs 100,000)`, or None when `count` supports
    the percentile."""
    if count is not None and count >= needed(fraction):
        return None
    have = "none" if not count else f"{count:,}"
    return (f"p{100 * fraction:g}: too few requests ({have}; needs "
            f"{needed(fraction):,})")
