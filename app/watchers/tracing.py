"""Traces: OpenTelemetry's Flask and Redis instrumentation, exported over OTLP/HTTP.

Off by default (``TRACING`` false): no instrumentor is imported, nothing is patched
and the app is the one it always was (redis-py imports OpenTelemetry's API for its own
observability hooks either way). ``FLASK_TRACING=1`` turns it on:

- a span per HTTP request (the Flask instrumentor wraps ``app.wsgi_app``), and a span
  per Redis command or pipeline (the Redis instrumentor, which patches redis-py for
  the whole process: every client in it, the Socket.IO queue's too);
- ``TRACE_SAMPLE`` (``FLASK_TRACE_SAMPLE``, 0..1, default 1.0): the share of traces
  kept, ``ParentBased(TraceIdRatioBased(ratio))``, so a request's Redis spans are
  kept or dropped with it and an incoming ``traceparent``'s decision is followed;
- a ``BatchSpanProcessor`` sends the spans in the background, protobuf over HTTP,
  to the standard endpoint variables: ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` (the
  full URL, e.g. ``http://127.0.0.1:4318/v1/traces``) or ``OTEL_EXPORTER_OTLP_ENDPOINT``
  (a base URL; ``/v1/traces`` is appended); neither set: ``http://localhost:4318/v1/traces``.
  ``OTEL_EXPORTER_OTLP_COMPRESSION=gzip`` compresses them, ``OTEL_SERVICE_NAME``
  names the service (``chat`` otherwise). A receiver that is down costs the export's
  retries in that thread, never a request's answer.

One tracer provider per process (``provider()``): the Redis patch is process-wide, so
a second app built in the same process shares it, and must ask the same ratio.

Forking servers: the provider and its processor's thread are made where
``create_app`` runs. Under gunicorn without ``--preload`` that is each worker, after
the fork. With ``--preload`` the app is built in the master, and a thread does not
survive ``fork()`` (opentelemetry-python #1497, #3307): the SDK (1.45) registers
``os.register_at_fork(after_in_child=...)`` for every batch processor, which starts a
new export thread in each worker and empties the queue it inherited, so each worker
exports its own spans; the master serves no request, so no export connection is open
at the fork to be shared. ``benchmarks/studies/instruments/`` measures what it costs.

At exit: what is queued is exported as the process ends (``provider``: granian's
workers leave by ``os._exit``, so a multiprocessing finalizer does it there).
"""

from __future__ import annotations

import multiprocessing.util
import os

from flask import Flask

from ..settings import ConfigError

_PROVIDER = None  # this process's TracerProvider, once an app turned tracing on
_RATIO = None


def provider(ratio: float):
    """The process's TracerProvider (made on the first call): the ratio sampler and a
    batch processor exporting OTLP/HTTP to the endpoint the environment names."""
    global _PROVIDER, _RATIO
    if _PROVIDER is not None:
        if ratio != _RATIO:
            raise ConfigError(f"TRACE_SAMPLE {ratio:g}: this process already traces at "
                              f"{_RATIO:g} (one sampler per process: the Redis patch is "
                              "process-wide)")
        return _PROVIDER
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", "chat")})
    made = TracerProvider(resource=resource, sampler=ParentBased(TraceIdRatioBased(ratio)))
    made.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    # What the processor still queues is sent as the process exits. The SDK's atexit
    # hook does it where Python exits normally (flask run, gunicorn's workers), but
    # granian's workers are multiprocessing's children, which leave by os._exit: no
    # atexit, only multiprocessing's own finalizers, which run both ways (the lab's
    # span count, benchmarks/run/spans.py, lost the last ~5 s of spans without this).
    multiprocessing.util.Finalize(None, made.force_flush, exitpriority=10)
    _PROVIDER, _RATIO = made, ratio
    return made


def init_app(app: Flask) -> None:
    """With TRACING on: instrument `app` (before the Socket.IO layer wraps its
    wsgi_app, so that every request the fast path hands to Flask is traced) and
    redis-py; the provider in ``app.extensions["tracing"]`` (``force_flush()`` sends
    what is queued, e.g. before a study counts the spans)."""
    if not app.config["TRACING"]:
        return
    from opentelemetry.instrumentation.flask import FlaskInstrumentor
    from opentelemetry.instrumentation.redis import RedisInstrumentor

    made = provider(app.config["TRACE_SAMPLE"])
    FlaskInstrumentor().instrument_app(app, tracer_provider=made)
    redis = RedisInstrumentor()
    if not redis.is_instrumented_by_opentelemetry:
        redis.instrument(tracer_provider=made)
    app.extensions["tracing"] = made
