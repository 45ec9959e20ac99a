"""``/healthz`` and ``/kv/<key>``: no token, used by the lab's probes and load."""

from __future__ import annotations

import time

from flask import Blueprint, abort, current_app, jsonify
from redis.exceptions import RedisError

from .errors import error_body, redis_unavailable
from .redis_store import get_redis

bp = Blueprint("health", __name__)

# Written by every health check: the service is only healthy when Redis accepts writes.
PROBE_KEY = "health:probe"
KV_TTL = 60  # seconds


@bp.get("/healthz")
def healthz():
    """200 when Redis answers and accepts a write, else 503 with the reason."""
    body, status = report(current_app.extensions["socketio"].async_mode)
    return jsonify(body), status


def report(async_mode: str) -> tuple[dict, int]:
    """The health check's answer and status, for the Flask view and the asyncio
    server's /healthz (app/realtime/server_asgi.py) alike."""
    info = {"redisMode": current_app.config["REDIS_MODE"], "asyncMode": async_mode}
    try:
        get_redis().set(PROBE_KEY, int(time.time()), ex=60)
    except RedisError as e:
        message = redis_unavailable(e)
        if message is None:
            raise
        return {**error_body(503, message), "status": "unavailable", **info}, 503
    return {"status": "ok", **info}, 200


@bp.get("/kv/<key>")
def kv(key):
    """The book's benchmark request: SET the key to the time, then GET it back.

    Two round trips on purpose, as in the book; keys live under ``kv:``. The
    value is only needed between its SET and GET: it expires after a minute,
    so anonymous requests with ever new keys cannot fill Redis.
    """
    if len(key) > current_app.config["KV_KEY_MAX_LENGTH"]:
        abort(400, f"key longer than {current_app.config['KV_KEY_MAX_LENGTH']} characters")
    r = get_redis()
    r.set(f"kv:{key}", time.time(), ex=KV_TTL)
    return jsonify({"key": key, "value": r.get(f"kv:{key}")})
