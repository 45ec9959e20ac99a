"""A timed access log written by the app itself, for a server that times nothing.

gunicorn logs each request's time (`%(L)s`) and Nginx its `$request_time`;
`flask run` (werkzeug) logs the request line and status only. With
ACCESS_LOG (FLASK_ACCESS_LOG) set to a path, the app writes one line per
request there, in the shape the lab reads from every access log
(benchmarks/analysis/access_logs.py, REQUEST_LINE), followed by the seconds from
the first hook to the response: `"GET /users/me HTTP/1.1" 200 0.004213`. It
times the app (routing, hooks, the view, Redis), not the server's parsing and
socket writes. Off by default: the lab turns it on for the built-in server.

No log gets a token: a Socket.IO client may send its token as ``?token=``, and a
log is read by more people than the API's users. Every request line written
here, by werkzeug (`flask run`) and by gunicorn (its access log, whatever its
format, and its error log's "Error handling request ...") has the token's value
replaced (``token=[redacted]``): a filter on their loggers, installed in the
process that serves (gunicorn's worker). Nginx does the same with a ``map``
(nginx/nginx.conf).
"""

from __future__ import annotations

import logging
import re
import time

from flask import Flask, g, request

REDACTED = "[redacted]"
# A `token` query parameter, its name as Werkzeug decodes it (`%74oken` too), any case.
TOKEN_PARAM = re.compile(r"(^|[?&])((?:t|%74)(?:o|%6f)(?:k|%6b)(?:e|%65)(?:n|%6e))=[^&\s\"]*",
                         re.IGNORECASE)


def redact(text: str) -> str:
    """A query string, a URL or a request line with every token's value replaced."""
    return TOKEN_PARAM.sub(rf"\1\2={REDACTED}", text) if "=" in text else text


class RedactTokens(logging.Filter):
    """A server's log record with the token's value replaced in its arguments: werkzeug's
    and gunicorn's error log pass a tuple, gunicorn's access log its atoms (a dict whose
    class it needs: changed in place)."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple):
            record.args = tuple(redact(a) if isinstance(a, str) else a for a in args)
        elif isinstance(args, dict):
            for key, value in list(args.items()):
                if isinstance(value, str) and "=" in value:
                    args[key] = redact(value)
        return True


# The servers' loggers whose records carry a request's URL.
SERVER_LOGS = ("werkzeug", "gunicorn.access", "gunicorn.error")


def init_app(app: Flask) -> None:
    for name in SERVER_LOGS:
        server_log = logging.getLogger(name)
        if not any(isinstance(f, RedactTokens) for f in server_log.filters):
            server_log.addFilter(RedactTokens())
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
            log.info('"%s %s %s" %s %.6f', request.method, redact(target),
                     request.environ.get("SERVER_PROTOCOL", "HTTP/1.1"), response.status_code,
                     time.perf_counter() - started)
        return response
