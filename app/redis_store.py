"""The one way to reach Redis: ``get_redis()``.

Two modes, chosen with ``REDIS_MODE``, so the lab can show the difference:

``per-request``
    The book's anti-pattern. Every request (or Socket.IO event) that touches
    Redis opens a NEW ``redis.Redis`` client, hence a new TCP connection, on
    first use; the teardown closes it. The app is the side that closes, so
    every request leaves one socket in TIME_WAIT toward the Redis port.

``pool``
    One ``BlockingConnectionPool`` per worker process, created lazily on first
    use *in that process*: gunicorn forks its workers, and a pool created in
    the master would hand the same sockets to several processes. Connections
    are reused across requests, so TIME_WAIT toward Redis stays near zero.

    Why *blocking*: redis-py caps a plain ``ConnectionPool`` (100 by default)
    and raises ``ConnectionError`` as soon as the cap is hit. Under the
    eventlet/gevent workers hundreds of greenlets share one process, so a
    burst would turn into errors. A ``BlockingConnectionPool`` makes a
    greenlet wait (up to ``REDIS_POOL_TIMEOUT`` s, then 503) for a free
    connection instead. ``REDIS_POOL_SIZE`` (default 50) bounds connections
    per worker: with 4 workers that is at most 200 on Redis, far under its
    10,000 client limit, and a Redis command takes well under a millisecond,
    so 50 in flight per process is more than one process can keep busy.

Both modes use short connect/read timeouts and a single retry: a dead Redis
gives a quick ``ConnectionError``/``TimeoutError`` (turned into 503 JSON by
``errors.py``, like every other "cannot serve now" answer of Redis), and a
connection killed by a Redis restart is dropped and reopened by redis-py on
the next command, so the service recovers by itself.
"""

from __future__ import annotations

import os
import threading

import redis
from flask import Flask, current_app, g
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

_pool_lock = threading.Lock()


def connection_options(config) -> dict:
    """Client options shared by both modes."""
    return {
        "decode_responses": True,
        "socket_connect_timeout": config["REDIS_CONNECT_TIMEOUT"],
        "socket_timeout": config["REDIS_SOCKET_TIMEOUT"],
        # One retry, no long back-off: enough to replace a pooled connection
        # that a Redis restart killed, short enough to fail fast when Redis
        # is really down (redis-py 8 otherwise retries 10 times, up to 1 s apart).
        # Only on ConnectionError: after a *timeout* the command (say, storing
        # a message) may have run, and running it again would store it twice.
        "retry": Retry(ExponentialBackoff(cap=0.05, base=0.01), retries=1,
                       supported_errors=(redis.exceptions.ConnectionError,)),
    }


def _process_client(app: Flask) -> redis.Redis:
    """The pool-backed client of this process (created on first use after fork)."""
    state = app.extensions.get("redis_pool")
    pid = os.getpid()
    if state is None or state[0] != pid:
        with _pool_lock:
            state = app.extensions.get("redis_pool")
            if state is None or state[0] != pid:
                config = app.config
                pool = redis.BlockingConnectionPool.from_url(
                    config["REDIS_URL"],
                    max_connections=config["REDIS_POOL_SIZE"],
                    timeout=config["REDIS_POOL_TIMEOUT"],
                    **connection_options(config),
                )
                state = (pid, redis.Redis(connection_pool=pool))
                app.extensions["redis_pool"] = state
    return state[1]


def get_redis() -> redis.Redis:
    """The Redis client for the current request, event or CLI command."""
    if "redis" not in g:
        app = current_app._get_current_object()
        if app.config["REDIS_MODE"] == "per-request":
            # Its own one-connection pool; closed (with the socket) in close_redis.
            g.redis = redis.Redis.from_url(app.config["REDIS_URL"],
                                           **connection_options(app.config))
        else:
            g.redis = _process_client(app)
    return g.redis


def close_redis(exc: BaseException | None = None) -> None:
    """Teardown: in per-request mode, close the request's connection.

    Closing here makes the app the active closer, which is what puts the
    TIME_WAIT sockets on the app's side in the lab. Pooled clients stay open.
    """
    client = g.pop("redis", None)
    if client is not None and current_app.config["REDIS_MODE"] == "per-request":
        client.close()


def close_pool(app: Flask) -> None:
    """Close this process's pooled connections (shutdown, tests); reopened on next use."""
    state = app.extensions.get("redis_pool")
    app.extensions["redis_pool"] = None
    if state is not None and state[0] == os.getpid():
        state[1].connection_pool.disconnect()


def init_app(app: Flask) -> None:
    app.extensions["redis_pool"] = None
    app.teardown_appcontext(close_redis)
