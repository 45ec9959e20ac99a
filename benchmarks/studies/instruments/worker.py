"""One instrument's app, built and measured in a process of its own, on the study's word.

    python -m benchmarks.studies.instruments.worker --instrument NAME --redis-port P
                                                    --redis-pid PID

The instruments study (study.py) starts one per instrument, pinned to the app's CPU.
Each builds stage 8's app with its instrument (variants.py), signs a user in, warms
every request type up, and then, for each line `{"seconds": S}` on its stdin, sends
every request type of the chat mix for S seconds (the floor study's loop:
benchmarks/studies/floor.py `caller` and `timed`) and answers a line of figures. A
process per instrument because two of them are process-wide: the Redis instrumentor
patches redis-py, and both Prometheus variants register in prometheus_client's
default registry; in one process they would measure each other.

With tracing, each type's loop ends with the provider's `force_flush()`: the spans of
that loop exported and answered before the figures are taken, its CPU counted in the
type's (what the batch processor's thread would do later is the instrument's cost).
Spans made are counted by a span processor beside the batch one (a counter: a call
per span), requests by a wrapper around the app's outermost WSGI callable (in every
variant, bare too).

Its lines to the study start with PREFIX; anything else on stdout is the app's.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from benchmarks.chat_mix import WEIGHTS
from benchmarks.run.cli import StageFailed
from benchmarks.studies import floor
from benchmarks.studies.instruments import variants

PREFIX = "@@instruments "


class Counted:
    """A WSGI callable that counts the requests it passes on."""

    def __init__(self, inner):
        self.inner, self.n = inner, 0

    def __call__(self, environ, start_response):
        self.n += 1
        return self.inner(environ, start_response)


def span_counter():
    """A span processor that counts the spans ended (`.n`)."""
    from opentelemetry.sdk.trace import SpanProcessor

    class Counter(SpanProcessor):
        n = 0

        def on_end(self, span):
            self.n += 1

    return Counter()


def build(variant: dict, redis_port: int):
    """(stage 8's app with the instrument, its request counter, its span counter or None)."""
    with floor.environ_set({**floor.app_env(redis_port), **variant["env"]}):
        from app import create_app
        app = create_app()
    if variant["exporter"]:
        from prometheus_flask_exporter import PrometheusMetrics
        PrometheusMetrics(app)
    spans = None
    if "tracing" in app.extensions:
        spans = span_counter()
        app.extensions["tracing"].add_span_processor(spans)
    app.wsgi_app = counted = Counted(app.wsgi_app)
    return app, counted, spans


def flushed(app, figures: dict) -> dict:
    """`figures` with the provider's force_flush counted in: its CPU and wall time per
    request added to the loop's (and given apart as flush_ms)."""
    provider = app.extensions.get("tracing")
    if provider is None:
        return figures
    cpu0, wall0 = time.process_time(), time.perf_counter()
    if not provider.force_flush(30_000):
        raise StageFailed("the span processor did not flush within 30 s")
    cpu, wall, n = time.process_time() - cpu0, time.perf_counter() - wall0, figures["requests"]
    return {**figures, "app_cpu_ms": figures["app_cpu_ms"] + 1000 * cpu / n,
            "wall_ms": figures["wall_ms"] + 1000 * wall / n, "flush_ms": 1000 * cpu / n}


def measure(app, calls: dict, seconds: float, redis_pid: int, spans) -> dict:
    """Every type for `seconds`: {type: floor.timed's figures, flushed, spans_made}."""
    out = {}
    for name, call in calls.items():
        made = spans.n if spans else 0
        figures = flushed(app, floor.timed(call, seconds, redis_pid))
        out[name] = {**figures, "spans_made": (spans.n if spans else 0) - made}
    return out


def tell(message: dict) -> None:
    print(PREFIX + json.dumps(message), flush=True)


def serve(args) -> int:
    variant = variants.parse(args.instrument)
    app, counted, spans = build(variant, args.redis_port)
    chat = floor.sign_in(app.test_client())
    wanted = floor.requests(chat)
    calls = {name: floor.caller(app, *wanted[name], chat["token"]) for name in WEIGHTS}
    for call in calls.values():  # as the floor: caches, the pool, the exporter's connection
        floor.timed(call, args.warmup, args.redis_pid)
    flushed(app, {"requests": 1, "app_cpu_ms": 0, "wall_ms": 0})
    tell({"ready": True, "requests": counted.n, "spans_made": spans.n if spans else 0})
    for line in sys.stdin:
        asked = json.loads(line)
        if "seconds" not in asked:
            break
        types = measure(app, calls, asked["seconds"], args.redis_pid, spans)
        tell({"types": types, "requests": counted.n, "spans_made": spans.n if spans else 0})
    flushed(app, {"requests": 1, "app_cpu_ms": 0, "wall_ms": 0})
    tell({"done": True, "requests": counted.n, "spans_made": spans.n if spans else 0})
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.studies.instruments.worker",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--instrument", required=True)
    p.add_argument("--redis-port", type=int, required=True)
    p.add_argument("--redis-pid", type=int, required=True)
    p.add_argument("--warmup", type=float, default=floor.WARMUP_S)
    return serve(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
