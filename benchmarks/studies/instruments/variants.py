"""The instruments the study measures, by name, and what each changes in the app.

- `bare`: stage 8's app as the floor study builds it (benchmarks/studies/floor.py);
- `prometheus`: the app's own metrics (app/watchers/metrics.py, setting METRICS: a counter and
  a latency histogram per route, and /metrics);
- `flask-exporter`: prometheus-flask-exporter's `PrometheusMetrics(app)` with its
  defaults, applied to the built app (the package people reach for);
- `otel`: app/watchers/tracing.py at 100% sampling (TRACING, TRACE_SAMPLE 1.0): a span per
  request and per Redis command, exported over OTLP/HTTP to the study's sink;
- `otel-N`: the same keeping N% of the traces (`otel-10`: ParentBased(TraceIdRatioBased(0.1))).

Why 10% for the sampled one: it is the usual head-sampling share for a service at
hundreds of requests a second per core: it still keeps about a hundred whole traces a
second from one stage-8 worker, plenty to find a slow path, and ParentBased keeps a
request's Redis spans with it (and follows a caller's decision), so what is kept is
whole. Beside 100% it separates what every request pays (the wrappers, the attributes
collected before the sampler decides, the context) from what only a kept span costs
(its recording, its export).
"""

from __future__ import annotations

import importlib.util
import re

from benchmarks.run.options import OptionsError

BARE = "bare"
NAMES = (BARE, "prometheus", "flask-exporter", "otel")
DEFAULT = "bare,prometheus,flask-exporter,otel,otel-10"
OTEL = re.compile(r"otel(?:-(?P<percent>\d+(?:\.\d+)?))?$")


def parse(name: str) -> dict:
    """{name, env (FLASK_* settings added to stage 8's), exporter (apply
    PrometheusMetrics), ratio (the traces kept, or None: no tracing)}; OptionsError
    for a name that is none of them."""
    out = {"name": name, "env": {}, "exporter": False, "ratio": None}
    if name == BARE:
        return out
    if name == "prometheus":
        return {**out, "env": {"FLASK_METRICS": "1"}}
    if name == "flask-exporter":
        return {**out, "exporter": True}
    found = OTEL.match(name)
    if not found:
        raise OptionsError(f"--instruments: {name!r} is not an instrument: "
                           f"{', '.join(NAMES)} or otel-N (N% of the traces kept)")
    percent = float(found["percent"] or 100)
    if not 0 < percent <= 100:
        raise OptionsError(f"--instruments: {name}: the share of traces kept is a "
                           f"percentage above 0 and at most 100 (otel-10 keeps a tenth)")
    ratio = percent / 100
    return {**out, "env": {"FLASK_TRACING": "1", "FLASK_TRACE_SAMPLE": f"{ratio:g}"},
            "ratio": ratio}


def chosen(spec: str) -> list[dict]:
    """--instruments, checked: each known, none twice, bare among them (every other is
    measured against it), and what each needs installed or checked in."""
    names = [n.strip() for n in spec.split(",") if n.strip()]
    if len(set(names)) != len(names):
        raise OptionsError(f"--instruments {spec}: an instrument named twice")
    if BARE not in names:
        raise OptionsError(f"--instruments {spec}: add bare; every instrument's cost is "
                           "measured against it, within each repeat")
    out = [parse(n) for n in names]
    if any(v["env"].get("FLASK_METRICS") for v in out) and \
            importlib.util.find_spec("app.watchers.metrics") is None:
        raise OptionsError("--instruments: prometheus needs app/watchers/metrics.py (setting "
                           "METRICS), which this checkout does not have yet; leave prometheus out")
    return out
