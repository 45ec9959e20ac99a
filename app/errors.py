"""Every error leaves as JSON ``{"error": <code>, "message": <text>}``.

Views raise ``werkzeug`` HTTP exceptions (``abort(404, "unknown room")``);
a Redis that cannot serve now (down, loading, out of memory, read-only,
too slow) becomes 503 with a message that says which; anything unexpected
is logged and becomes a plain 500 without internals.
"""

from __future__ import annotations

from flask import Flask, current_app, jsonify
from redis import exceptions as rx
from werkzeug.exceptions import HTTPException

# Short, stable codes for clients to branch on (the message is for humans).
ERROR_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    429: "too_many_requests",
    500: "internal_error",
    503: "service_unavailable",
}

REDIS_DOWN_MESSAGE = "Redis is unavailable; try again shortly"

# "Cannot serve now" errors, most specific first, with what the client is told.
# BusyLoadingError is a ConnectionError, so it comes before it.
_UNAVAILABLE = (
    (rx.BusyLoadingError, "Redis is loading its data; try again shortly"),
    (rx.ConnectionError, REDIS_DOWN_MESSAGE),
    (rx.TimeoutError, "Redis did not answer in time; the request may or may not have "
                      "been applied: retry with the same Idempotency-Key"),
    (rx.OutOfMemoryError, "Redis is out of memory and refuses writes; try again later"),
    (rx.ReadOnlyError, "Redis is a read-only replica and refuses writes"),
    (rx.MasterDownError, REDIS_DOWN_MESSAGE),
    (rx.TryAgainError, REDIS_DOWN_MESSAGE),
)
# Refusals that redis-py reports as a plain ResponseError, by Redis's error prefix:
# MISCONF (persistence failing: writes refused), BUSY (a script runs too long),
# NOREPLICAS (min-replicas-to-write not met).
_REFUSAL_PREFIXES = {"MISCONF": "Redis cannot persist data and refuses writes",
                     "BUSY": "Redis is busy; try again shortly",
                     "NOREPLICAS": "Redis has too few replicas and refuses writes"}


def redis_unavailable(e: BaseException) -> str | None:
    """The 503 message when `e` means Redis cannot serve now, else None (a real bug)."""
    for kind, message in _UNAVAILABLE:
        if isinstance(e, kind):
            return message
    if isinstance(e, rx.ResponseError):
        text = str(e)
        for prefix, message in _REFUSAL_PREFIXES.items():
            if text.startswith(prefix):
                return message
        if text.startswith("OOM") or "OOM command not allowed" in text:  # from a script
            return _UNAVAILABLE[3][1]
    return None


def error_code(status: int) -> str:
    return ERROR_CODES.get(status, f"http_{status}")


def error_body(status: int, message: str) -> dict:
    return {"error": error_code(status), "message": message}


def handle_http_exception(e: HTTPException):
    # get_response() keeps the exception's headers (e.g. Allow on 405, Retry-After on 429).
    response = e.get_response()
    response.set_data(current_app.json.dumps(error_body(e.code, e.description)))
    response.content_type = "application/json"
    return response


def handle_redis_error(e: rx.RedisError):
    message = redis_unavailable(e)
    if message is None:
        return handle_unexpected(e)
    # One line, no traceback: during an outage every request lands here.
    current_app.logger.warning("Redis unavailable: %s: %s", type(e).__name__, e)
    return jsonify(error_body(503, message)), 503


def handle_unexpected(e: Exception):
    current_app.logger.exception("unhandled error")
    return jsonify(error_body(500, "internal server error")), 500


def init_app(app: Flask) -> None:
    app.register_error_handler(HTTPException, handle_http_exception)
    app.register_error_handler(rx.RedisError, handle_redis_error)
    app.register_error_handler(Exception, handle_unexpected)
