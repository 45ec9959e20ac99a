"""The app's own metrics for Prometheus: requests by route and status, and their times.

With METRICS on (``FLASK_METRICS=1``; off by default, so every stage without it is
unchanged), ``init_app`` adds two prometheus_client instruments and ``GET /metrics``,
which answers them in Prometheus's text format:

* ``chat_http_requests_total{method, route, status}``: a Counter of the requests Flask
  answered.
* ``chat_http_request_duration_seconds{method, route}``: a Histogram of the seconds
  from Flask's first hook to its response (the app, not the server's parsing and
  socket writes), in BUCKETS.

Their labels are bounded whatever a client sends: ``route`` is the URL rule's pattern
(``/rooms/<room_id>/messages``), or ``other`` when no rule matched (a 404 of any path, a
405), never the path itself; ``method`` one of METHODS or ``other``; ``status`` the
response's code. ``/metrics`` counts itself nowhere: a scrape every second would add
one request a second to what the load made.

Several processes (gunicorn's workers, granian's): each keeps its own values, so one
process's ``/metrics`` would answer for itself alone. With ``PROMETHEUS_MULTIPROC_DIR``
set to an empty folder before the server starts (the lab makes a fresh one per server),
prometheus_client writes each process's values to a file there and ``/metrics`` sums
every file (its multiprocess mode). gunicorn's master tells prometheus_client of each
worker that exits (the ``child_exit`` hook of gunicorn/today.conf.py, stages 8 and 9,
says why); granian has no such hook, and none is needed while the app has no live
gauge (a dead worker's counter and histogram files are meant to stay counted) and its
workers are not recycled. gunicorn's hook folds the dead worker's files into one a type
(app/watchers/metrics_exit.py), so recycled workers do not pile files up for every scrape to read.

Cost on the request path: a ``perf_counter`` in ``before_request``, one counter
increment and one histogram observation in ``after_request`` (a lock and, in
multiprocess mode, a write into an mmapped file each); nothing else.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from flask import Flask, Response, g, request

from ..settings import ConfigError
from . import metrics_exit

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"  # prometheus_client's own name for it
PATH = "/metrics"
REQUESTS = "chat_http_requests_total"
DURATION = "chat_http_request_duration_seconds"
# 1 ms to 10 s: the lab's requests take a few ms on an idle stage and up to seconds
# when a stage breaks (stage 2b's SYN retries add 1 s, a Redis timeout 2 s); each
# bucket about 2.5x the last, so histogram_quantile's p99 is read within that factor.
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
NO_ROUTE = "other"
_STARTED = "metrics_started"  # its key in flask.g

_instruments: dict = {}


def instruments() -> tuple:
    """(Counter, Histogram), made once per process: every app a process makes (the tests
    make hundreds) counts into the same two, as a registry takes each name once."""
    if not _instruments:
        from prometheus_client import CollectorRegistry, Counter, Histogram

        registry = CollectorRegistry()  # the app's own: none of the default's extras
        _instruments["registry"] = registry
        _instruments["requests"] = Counter(
            REQUESTS.removesuffix("_total"), "HTTP requests Flask answered",
            ("method", "route", "status"), registry=registry)
        _instruments["duration"] = Histogram(
            DURATION, "Seconds from Flask's first hook to its response",
            ("method", "route"), buckets=BUCKETS, registry=registry)
    return _instruments["requests"], _instruments["duration"]


def exposition() -> tuple[bytes, str]:
    """(body, content type) of /metrics: this process's values, or with MULTIPROC_ENV
    set the sum over every process's files in that folder."""
    from prometheus_client import CollectorRegistry, generate_latest, multiprocess
    from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

    path = os.environ.get(MULTIPROC_ENV)
    # the text format's 0.0.4, which every Prometheus reads (Debian 12's is 2.42); the
    # client's default names 1.0.0, the same text for names like these
    if not path:
        return generate_latest(_instruments["registry"]), CONTENT_TYPE_PLAIN_0_0_4
    registry = CollectorRegistry()  # a fresh one per scrape, as the client's docs say
    multiprocess.MultiProcessCollector(registry, path=path)
    # not while gunicorn's master folds a dead worker's files (app/watchers/metrics_exit.py): the
    # scrape would count it twice, or not at all
    with metrics_exit.locked(Path(path), exclusive=False):
        return generate_latest(registry), CONTENT_TYPE_PLAIN_0_0_4


def init_app(app: Flask) -> None:
    if not app.config["METRICS"]:
        return
    path = os.environ.get(MULTIPROC_ENV)
    if path and not os.path.isdir(path):
        raise ConfigError(f"{MULTIPROC_ENV}={path}: no such folder (make it, empty, "
                          "before the server starts)")
    requests_total, duration = instruments()

    @app.before_request
    def start_clock():
        g.setdefault(_STARTED, time.perf_counter())

    @app.after_request
    def count(response):
        started = g.pop(_STARTED, None)
        if started is None or request.path == PATH:
            return response
        method = request.method if request.method in METHODS else NO_ROUTE
        rule = request.url_rule
        route = rule.rule if rule is not None else NO_ROUTE
        requests_total.labels(method, route, str(response.status_code)).inc()
        duration.labels(method, route).observe(time.perf_counter() - started)
        return response

    @app.get(PATH)
    def metrics():
        body, content_type = exposition()
        return Response(body, content_type=content_type)
