"""Configuration: the defaults, and the checks that run once at start-up.

Every setting can be given in the environment with the ``FLASK_`` prefix
(``FLASK_REDIS_URL``, ``FLASK_REDIS_MODE``, ...); Flask parses the values as
JSON when it can, so ``FLASK_REDIS_POOL_SIZE=80`` arrives as an int.
"""

from __future__ import annotations

import logging
import os

import limits

from . import gc_policy

REDIS_MODES = ("per-request", "pool")

# Fixed and public on purpose: it only exists so that a laptop demo starts
# without ceremony, and its name says what it is wherever it shows up.
INSECURE_DEV_SECRET_KEY = "insecure-dev-key-DO-NOT-USE-IN-PRODUCTION"

DEFAULTS = {
    "SECRET_KEY": None,
    "DEV_MODE": False,
    "REDIS_URL": "redis://127.0.0.1:6379/0",
    # "per-request" reproduces the book's anti-pattern (a new TCP connection
    # to Redis for every request); "pool" is the fix (see redis_store.py).
    "REDIS_MODE": "pool",
    # Connections per worker process in "pool" mode (see redis_store.py for
    # why a *blocking* pool and why 50).
    "REDIS_POOL_SIZE": 50,
    # Seconds a request waits for a free pooled connection before it gets 503.
    "REDIS_POOL_TIMEOUT": 5.0,
    # Short on purpose: a dead Redis must give a quick 503, never a hang.
    "REDIS_CONNECT_TIMEOUT": 1.0,
    "REDIS_SOCKET_TIMEOUT": 2.0,
    "TOKEN_MAX_AGE": 24 * 3600,  # seconds an access token stays valid
    # Seconds a message's Idempotency-Key (HTTP) or clientId (Socket.IO) is
    # remembered: a retry within this window stores nothing new.
    "IDEMPOTENCY_TTL": 3600,
    "PASSWORD_MIN_LENGTH": 8,
    # A file for the app's own timed access log (watchers/access_log.py), for a server that
    # logs no times (`flask run`); empty: none.
    "ACCESS_LOG": "",
    # werkzeug.security method. scrypt is deliberately slow (tens of ms of
    # CPU per hash). The test suite lowers it to a cheap pbkdf2 to stay fast;
    # leave it alone anywhere else.
    "PASSWORD_HASH_METHOD": "scrypt",
    "MESSAGE_MAX_LENGTH": 2000,  # characters; longer content gets 413
    "ROOM_HISTORY_MAX": 1000,  # messages kept per room (older ones trimmed)
    "KV_KEY_MAX_LENGTH": 128,
    "MAX_CONTENT_LENGTH": 64 * 1024,  # bytes of request body; larger gets 413
    # Attempt limits (app/attempts.py, counted in the same Redis), in the
    # `limits` notation. Only FAILED attempts count, and the account-wide one
    # only for addresses that have failed for that account: the lab logs a few
    # hundred seeded users in from one address in seconds, and none of that may
    # meet a limit; a stranger cannot lock an owner out. Sign-ups count per
    # address, sized for a Locust run that registers a user and a friend per
    # simulated user (no CHAT_USERS_FILE).
    "FAILED_ATTEMPTS_PER_ADDRESS": "100 per 15 minutes",
    "LOGIN_FAILURES_PER_ACCOUNT_AND_ADDRESS": "10 per 15 minutes",
    "LOGIN_FAILURES_PER_ACCOUNT": "50 per 15 minutes",
    "REGISTER_LIMIT_PER_ADDRESS": "2000 per hour",
    # Socket.IO: the Redis message queue lets a broadcast reach members on
    # every worker process. Only Flask-SocketIO's in-process test client needs
    # it off (it refuses to run with a queue).
    "SOCKETIO_MESSAGE_QUEUE": True,
    "SOCKETIO_CHANNEL": "flask-socketio",
    # Origins whose pages may open a Socket.IO connection: None is the same
    # origin only (an Origin header must match the Host the request came in
    # on; behind a proxy, pass the client's Host on); a comma-separated list
    # (FLASK_CORS_ALLOWED_ORIGINS="https://a.example,https://b.example") or "*"
    # to allow others. Non-browser clients that send no Origin (websocket-client,
    # used by Locust's Socket.IO user and the tests) are not checked.
    "CORS_ALLOWED_ORIGINS": None,
    # Engine.IO transports the server accepts: the stages' clients use the
    # websocket only; "polling,websocket" for a stage that teaches polling.
    "SOCKETIO_TRANSPORTS": "websocket",
    # Flask-SocketIO's async mode: "auto" asks what the server runs (app/realtime/server.py:
    # eventlet or gevent when that library patched the standard library, else
    # threading); a stage states its own (FLASK_SOCKETIO_ASYNC_MODE=threading under
    # gunicorn's gthread worker); a mode that does not match what runs is logged as a
    # warning and the mode that runs is served (app/realtime/server.py).
    "SOCKETIO_ASYNC_MODE": "auto",
    # Seconds a client has, after the Engine.IO handshake, to connect to
    # Socket.IO with a valid token; then its session is closed (realtime/socket_guard.py).
    "SOCKETIO_AUTH_TIMEOUT": 5.0,
    # Engine.IO pings every interval; a client that has not answered within
    # the timeout is gone, and its connection is closed (Engine.IO's defaults).
    "SOCKETIO_PING_INTERVAL": 25.0,
    "SOCKETIO_PING_TIMEOUT": 20.0,
    # Log each garbage collection that pauses the process this many ms or more
    # (app/watchers/gc_log.py); 0: none.
    "GC_LOG_MS": 0.0,
    # The collector set for a long-lived server (app/gc_policy.py): every object alive
    # moved out of every collection this often (seconds; 0: never), and
    # gc.set_threshold's three numbers ("": the running Python's own).
    "GC_FREEZE_EVERY": 0.0,
    "GC_THRESHOLDS": "",
    # A directory (absolute path; made if missing) where a gevent worker writes a census of
    # its objects by type each time it receives SIGUSR2 (app/watchers/gc_census.py; the capacity
    # study's --census); "": none. Off by default: a census walks every object, a pause.
    "GC_CENSUS_DIR": "",
    # Greenlets a connected user holds in gevent mode (lab 16): "thread" is simple-websocket's
    # reader greenlet beside the handler, "handler" the handler reading itself
    # (app/realtime/inline_websocket.py); "task" is engineio's greenlet a ping, "timer" a timer of
    # gevent's loop (app/realtime/ping_timer.py); "task" is engineio's writer greenlet a websocket,
    # "direct" its packets written by their senders (app/realtime/direct_writer.py; needs
    # WEBSOCKET_READER=handler). Other modes keep the libraries' own.
    "WEBSOCKET_READER": "thread",
    "ENGINEIO_PING": "task",
    "ENGINEIO_WRITER": "task",
    # Stage 7 ("the code itself", app/fast_path.py): each one of the profile's hot costs,
    # off by default so that every earlier stage keeps its behaviour.
    # The token check rides in each chat view's first (and mostly only) round trip to Redis.
    "FUSED_ROUND_TRIPS": False,
    # Claims of tokens whose signature was checked, kept per process (this many): a
    # token's signature is the same on every request; its expiry and key still checked.
    "TOKEN_CACHE_SIZE": 0,
    # "stdlib" (Flask's json) or "orjson".
    "JSON_PROVIDER": "stdlib",
    # Flask's signed-cookie session on every HTTP request; the HTTP API never uses it
    # (Socket.IO events keep their own): False skips opening it.
    "COOKIE_SESSION": True,
    # Engine.IO's WSGI middleware (and the app's guard in front of it) on every path;
    # False: only on /socket.io/, the rest goes straight to Flask.
    "ENGINEIO_EVERY_PATH": True,
    # Prometheus's instruments and GET /metrics (app/watchers/metrics.py): off by default, so that
    # every stage without `--metrics` keeps its code and its cost.
    "METRICS": False,
    # OpenTelemetry traces (app/watchers/tracing.py): off unless FLASK_TRACING=1; the share of
    # traces kept (0..1); where they go: the standard OTEL_EXPORTER_OTLP_* variables.
    "TRACING": False,
    "TRACE_SAMPLE": 1.0,
}
JSON_PROVIDERS = ("stdlib", "orjson")

TRANSPORTS = ("polling", "websocket")
ASYNC_MODES = ("auto", "threading", "eventlet", "gevent")
# what each choice is, for its error
WEBSOCKET_READERS = {"thread": "simple-websocket's reader greenlet",
                     "handler": "the connection's handler reads"}
ENGINEIO_PINGS = {"task": "engineio's greenlet a ping", "timer": "a timer of gevent's loop"}
ENGINEIO_WRITERS = {"task": "engineio's writer greenlet a websocket",
                    "direct": "written by the senders; needs WEBSOCKET_READER=handler"}

_INTS = ("REDIS_POOL_SIZE", "TOKEN_MAX_AGE", "IDEMPOTENCY_TTL", "PASSWORD_MIN_LENGTH",
         "MESSAGE_MAX_LENGTH", "ROOM_HISTORY_MAX", "KV_KEY_MAX_LENGTH", "MAX_CONTENT_LENGTH")
_FLOATS = ("REDIS_POOL_TIMEOUT", "REDIS_CONNECT_TIMEOUT", "REDIS_SOCKET_TIMEOUT",
           "SOCKETIO_AUTH_TIMEOUT", "SOCKETIO_PING_INTERVAL", "SOCKETIO_PING_TIMEOUT")
ATTEMPT_LIMITS = ("FAILED_ATTEMPTS_PER_ADDRESS", "LOGIN_FAILURES_PER_ACCOUNT_AND_ADDRESS",
                  "LOGIN_FAILURES_PER_ACCOUNT", "REGISTER_LIMIT_PER_ADDRESS")


class ConfigError(RuntimeError):
    """A setting is missing or wrong; the message says which and how to fix it."""


def as_bool(value) -> bool:
    """Environment-friendly truth: 1/true/yes/on (any case) are true."""
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


def cors_origins(value) -> str | list[str] | None:
    """None (same origin), "*", or a list of origins from a list or a comma-separated string."""
    if value is None or value == "" or value == []:
        return None
    if value == "*":
        return "*"
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
        raise ConfigError("CORS_ALLOWED_ORIGINS (FLASK_CORS_ALLOWED_ORIGINS) must be '*' or "
                          f"comma-separated origins, not {value!r}")
    return [i.strip().rstrip("/") for i in items if i.strip()] or None


def transports(value) -> list[str]:
    """The accepted Engine.IO transports, from a list or a comma-separated string."""
    items = value.split(",") if isinstance(value, str) else value
    if isinstance(items, list) and all(isinstance(i, str) for i in items):
        chosen = [i.strip() for i in items if i.strip()]
        if chosen and set(chosen) <= set(TRANSPORTS):
            return chosen
    raise ConfigError("SOCKETIO_TRANSPORTS (FLASK_SOCKETIO_TRANSPORTS) must be a comma-separated "
                      f"list of {', '.join(TRANSPORTS)}, not {value!r}")


def check_async_mode(value) -> None:
    """SOCKETIO_ASYNC_MODE is one of ASYNC_MODES (app/realtime/server.py checks it against what
    the process runs)."""
    check_choice("SOCKETIO_ASYNC_MODE", value, ASYNC_MODES)


def check_choice(name: str, value, choices) -> None:
    """A setting that is one of `choices` (a dict: each with what it is, for the error)."""
    if value not in choices:
        listed = (", ".join(f"{c} ({what})" for c, what in choices.items())
                  if isinstance(choices, dict) else ", ".join(choices))
        raise ConfigError(f"{name} (FLASK_{name}) must be one of {listed}, not {value!r}")


def off_or_number(name: str, value, unit: str) -> float:
    """A setting that is 0 (off) or a number of `unit`: GC_LOG_MS (app/watchers/gc_log.py),
    GC_FREEZE_EVERY (app/gc_policy.py)."""
    try:
        number = float(value)
        if isinstance(value, bool) or not number >= 0:
            raise ValueError
    except (TypeError, ValueError):
        raise ConfigError(f"{name} (FLASK_{name}) must be 0 (off) or a number of {unit}, "
                          f"not {value!r}") from None
    return number


def census_dir(value) -> str:
    """GC_CENSUS_DIR: "" (off) or, as an absolute path, a directory this process can
    write, or one to make in such a directory (app/watchers/gc_census.py makes it)."""
    if value in ("", None):
        return ""
    made = isinstance(value, str) and os.path.isabs(value) and os.path.isdir(value)
    where = value if made else os.path.dirname(str(value))
    if not (isinstance(value, str) and os.path.isabs(value)
            and (made or not os.path.exists(value)) and os.path.isdir(where)
            and os.access(where, os.W_OK | os.X_OK)):
        raise ConfigError(f"GC_CENSUS_DIR (FLASK_GC_CENSUS_DIR) must be empty (off) or the "
                          f"absolute path of a directory this process can write (or make), "
                          f"not {value!r}")
    return value


def trace_sample(value) -> float:
    """TRACE_SAMPLE: the share of traces kept, a number from 0 to 1 (app/watchers/tracing.py)."""
    try:
        number = float(value)
        if isinstance(value, bool) or not 0 <= number <= 1:
            raise ValueError
    except (TypeError, ValueError):
        raise ConfigError(f"TRACE_SAMPLE (FLASK_TRACE_SAMPLE) must be a ratio from 0 to 1 "
                          f"(0.1 keeps a tenth of the traces), not {value!r}") from None
    return number


def secret_key(secret, dev_mode: bool, logger: logging.Logger) -> str:
    """SECRET_KEY as a string; the labelled insecure one in DEV_MODE when none is set."""
    if secret is None or secret == "":
        if not dev_mode:
            raise ConfigError(
                "SECRET_KEY is not set. Set FLASK_SECRET_KEY to a long random string, e.g. "
                "FLASK_SECRET_KEY=$(python -c 'import secrets; print(secrets.token_hex(32))'), "
                "or set FLASK_DEV_MODE=1 to run with an insecure development key.")
        logger.warning("DEV_MODE: using the fixed INSECURE development SECRET_KEY; "
                       "tokens can be forged by anyone. Set FLASK_SECRET_KEY outside a lab.")
        return INSECURE_DEV_SECRET_KEY
    # FLASK_SECRET_KEY=12345 is parsed as JSON (an int): keep it a string.
    return str(secret)


def validate_realtime(config: dict) -> None:
    """The real-time server's settings: async mode, and how a websocket is read, pinged
    and written."""
    check_async_mode(config.get("SOCKETIO_ASYNC_MODE"))
    check_choice("WEBSOCKET_READER", config.get("WEBSOCKET_READER"), WEBSOCKET_READERS)
    check_choice("ENGINEIO_PING", config.get("ENGINEIO_PING"), ENGINEIO_PINGS)
    check_choice("ENGINEIO_WRITER", config.get("ENGINEIO_WRITER"), ENGINEIO_WRITERS)
    if config["ENGINEIO_WRITER"] == "direct" and config["WEBSOCKET_READER"] != "handler":
        raise ConfigError("ENGINEIO_WRITER=direct needs WEBSOCKET_READER=handler (its "
                          "websocket's writes never wait: app/realtime/inline_websocket.py)")


def validate_collector(config: dict) -> None:
    """The collector's settings: its log, freeze, census and thresholds."""
    config["GC_LOG_MS"] = off_or_number("GC_LOG_MS", config.get("GC_LOG_MS"), "ms")
    config["GC_FREEZE_EVERY"] = off_or_number("GC_FREEZE_EVERY", config.get("GC_FREEZE_EVERY"),
                                              "seconds")
    config["GC_CENSUS_DIR"] = census_dir(config.get("GC_CENSUS_DIR"))
    try:
        config["GC_THRESHOLDS"] = gc_policy.thresholds(config.get("GC_THRESHOLDS"))
    except ValueError as e:
        raise ConfigError(str(e)) from None


def validate(config: dict, logger: logging.Logger) -> None:
    """Check and normalise `config` in place; raise ConfigError when it is unusable."""
    for name in ("DEV_MODE", "SOCKETIO_MESSAGE_QUEUE", "FUSED_ROUND_TRIPS", "COOKIE_SESSION",
                 "ENGINEIO_EVERY_PATH", "METRICS", "TRACING"):
        config[name] = as_bool(config.get(name))
    config["TRACE_SAMPLE"] = trace_sample(config.get("TRACE_SAMPLE"))
    if config.get("JSON_PROVIDER") not in JSON_PROVIDERS:
        raise ConfigError(f"JSON_PROVIDER (FLASK_JSON_PROVIDER) must be one of "
                          f"{', '.join(JSON_PROVIDERS)}, not {config.get('JSON_PROVIDER')!r}")
    size = config.get("TOKEN_CACHE_SIZE")
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise ConfigError(f"TOKEN_CACHE_SIZE (FLASK_TOKEN_CACHE_SIZE) must be a whole number "
                          f">= 0, not {size!r}")

    config["SECRET_KEY"] = secret_key(config.get("SECRET_KEY"), config["DEV_MODE"], logger)
    mode = config.get("REDIS_MODE")
    if mode not in REDIS_MODES:
        raise ConfigError(f"REDIS_MODE must be one of {', '.join(REDIS_MODES)} "
                          f"(FLASK_REDIS_MODE), not {mode!r}")
    method = config.get("PASSWORD_HASH_METHOD")
    if not isinstance(method, str) or not method.startswith(("scrypt", "pbkdf2")):
        raise ConfigError("PASSWORD_HASH_METHOD must be a werkzeug.security method "
                          f"(scrypt or pbkdf2:...), not {method!r}")
    if not isinstance(config.get("REDIS_URL"), str) or not config["REDIS_URL"]:
        raise ConfigError("REDIS_URL (FLASK_REDIS_URL) must be a redis:// URL")

    config["CORS_ALLOWED_ORIGINS"] = cors_origins(config.get("CORS_ALLOWED_ORIGINS"))
    config["SOCKETIO_TRANSPORTS"] = transports(config.get("SOCKETIO_TRANSPORTS"))
    validate_realtime(config)
    for name in ATTEMPT_LIMITS:
        try:
            limits.parse_many(str(config.get(name)))
        except ValueError:
            raise ConfigError(f"{name} (FLASK_{name}) must be a limit like '10 per minute', "
                              f"not {config.get(name)!r}") from None

    validate_collector(config)
    for name, kind in [(n, int) for n in _INTS] + [(n, float) for n in _FLOATS]:
        value = config.get(name)
        try:
            if isinstance(value, bool):
                raise ValueError
            number = kind(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{name} (FLASK_{name}) must be a positive number, "
                              f"not {value!r}") from None
        if number <= 0:
            raise ConfigError(f"{name} (FLASK_{name}) must be positive, not {value!r}")
        config[name] = number
