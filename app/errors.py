"""Every error leaves as JSON ``{"error": <code>, "message": <text>}``.

Views raise ``werkzeug`` HTTP exceptions (``abort(404, "unknown room")``);
Redis being unreachable becomes 503; anything unexpected is logged and
becomes a plain 500 without internals.
"""

from __future__ import annotations

from flask import Flask, current_app, jsonify
from werkzeug.exceptions import HTTPException

from .redis_store import UNAVAILABLE

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
    500: "internal_error",
    503: "service_unavailable",
}

REDIS_DOWN_MESSAGE = "Redis is unavailable; try again shortly"


def error_code(status: int) -> str:
    return ERROR_CODES.get(status, f"http_{status}")


def error_body(status: int, message: str) -> dict:
    return {"error": error_code(status), "message": message}


def handle_http_exception(e: HTTPException):
    # get_response() keeps the exception's headers (e.g. Allow on 405).
    response = e.get_response()
    response.set_data(current_app.json.dumps(error_body(e.code, e.description)))
    response.content_type = "application/json"
    return response


def handle_redis_unavailable(e: Exception):
    # One line, no traceback: during an outage every request lands here.
    current_app.logger.warning("Redis unavailable: %s: %s", type(e).__name__, e)
    return jsonify(error_body(503, REDIS_DOWN_MESSAGE)), 503


def handle_unexpected(e: Exception):
    current_app.logger.exception("unhandled error")
    return jsonify(error_body(500, "internal server error")), 500


def init_app(app: Flask) -> None:
    app.register_error_handler(HTTPException, handle_http_exception)
    for exc in UNAVAILABLE:
        app.register_error_handler(exc, handle_redis_unavailable)
    app.register_error_handler(Exception, handle_unexpected)
