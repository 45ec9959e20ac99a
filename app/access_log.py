"""A timed access log written by the app itself, for a server that times nothing.

gunicorn logs each request's time (`%(L)s`) and Nginx its `$request_time`;
`flask run` (werkzeug) logs the request line and status only. With
ACCESS_LOG (FLASK_ACCESS_LOG) set to a path, the app writes one line per
request there, in the shape the lab reads from every access log
(benchmarks/analysis/access_logs.py, REQUEST_LINE), followed by the seconds from
the first hook to the response: `"GET /users/me HTTP/1.1" 200 0.004213`. It
times the app (routing, hooks, the view, Redis), not the server's parsing and
socket writes. Off by default: the lab turns it on for the built-in server.
"""

from __future__ import annotations

import logging
import time

from flask import Flask, g, request


def init_app(app: Flask) -> None:
    path = app.config.get("ACCESS_LOG")
    if not path:
        return
    log = logging.getLogger(f"chat.access:{path}")  # one per file, however many apps
    log.setLevel(logging.INFO)
    log.propagate = False  # its own file only, never the app's output
    if not log.handlers:
        handler = logging.FileHandler(path)  # thread-safe: `flask run` serves in threads
        handler.setFormatter(logging.Formatter("%(message)s"))
        log.addHandler(handler)

    @app.before_request
    def start_clock():
        g.request_started = time.perf_counter()

    @app.after_request
    def write_line(response):
        started = g.pop("request_started", None)
        if started is not None:
            target = request.environ.get("REQUEST_URI") or request.full_path.rstrip("?")
            log.info('"%s %s %s" %s %.6f', request.method, target,
                     request.environ.get("SERVER_PROTOCOL", "HTTP/1.1"), response.status_code,
                     time.perf_counter() - started)
        return response
