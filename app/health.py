"""``/healthz`` and ``/kv/<key>``: no token, used by the lab's probes and load."""

from __future__ import annotations

import os
import time

from flask import Blueprint, abort, current_app, jsonify

from .errors import REDIS_DOWN_MESSAGE, error_body
from .redis_store import UNAVAILABLE, get_redis

bp = Blueprint("health", __name__)


@bp.get("/healthz")
def healthz():
    """200 when Redis answers PING, else 503. ``pid`` shows which worker answered."""
    info = {"pid": os.getpid(), "redisMode": current_app.config["REDIS_MODE"],
            "asyncMode": current_app.extensions["socketio"].async_mode}
    try:
        get_redis().ping()
    except UNAVAILABLE:
        return jsonify({**error_body(503, REDIS_DOWN_MESSAGE), "status": "unavailable",
                        **info}), 503
    return jsonify({"status": "ok", **info})


@bp.get("/kv/<key>")
def kv(key):
    """The book's benchmark request: SET the key to the time, then GET it back.

    Two round trips on purpose, as in the book; keys live under ``kv:``.
    """
    if len(key) > current_app.config["KV_KEY_MAX_LENGTH"]:
        abort(400, f"key longer than {current_app.config['KV_KEY_MAX_LENGTH']} characters")
    r = get_redis()
    r.set(f"kv:{key}", time.time())
    return jsonify({"key": key, "value": r.get(f"kv:{key}")})
