"""Configuration: the defaults, and the checks that run once at start-up.

Every setting can be given in the environment with the ``FLASK_`` prefix
(``FLASK_REDIS_URL``, ``FLASK_REDIS_MODE``, ...); Flask parses the values as
JSON when it can, so ``FLASK_REDIS_POOL_SIZE=80`` arrives as an int.
"""

from __future__ import annotations

import logging

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
    "PASSWORD_MIN_LENGTH": 8,
    # werkzeug.security method. scrypt is deliberately slow (tens of ms of
    # CPU per hash). The test suite lowers it to a cheap pbkdf2 to stay fast;
    # leave it alone anywhere else.
    "PASSWORD_HASH_METHOD": "scrypt",
    "MESSAGE_MAX_LENGTH": 2000,  # characters; longer content gets 413
    "ROOM_HISTORY_MAX": 1000,  # messages kept per room (older ones trimmed)
    "KV_KEY_MAX_LENGTH": 128,
    "MAX_CONTENT_LENGTH": 64 * 1024,  # bytes of request body; larger gets 413
    # Socket.IO: the Redis message queue lets a broadcast reach members on
    # every worker process. Only Flask-SocketIO's in-process test client needs
    # it off (it refuses to run with a queue).
    "SOCKETIO_MESSAGE_QUEUE": True,
    "SOCKETIO_CHANNEL": "flask-socketio",
    # Tokens travel in a header or the auth payload, never in a cookie, so a
    # foreign page cannot act with a user's credentials; load generators send
    # arbitrary Origin headers, hence "*".
    "CORS_ALLOWED_ORIGINS": "*",
}

_INTS = ("REDIS_POOL_SIZE", "TOKEN_MAX_AGE", "PASSWORD_MIN_LENGTH", "MESSAGE_MAX_LENGTH",
         "ROOM_HISTORY_MAX", "KV_KEY_MAX_LENGTH", "MAX_CONTENT_LENGTH")
_FLOATS = ("REDIS_POOL_TIMEOUT", "REDIS_CONNECT_TIMEOUT", "REDIS_SOCKET_TIMEOUT")


class ConfigError(RuntimeError):
    """A setting is missing or wrong; the message says which and how to fix it."""


def as_bool(value) -> bool:
    """Environment-friendly truth: 1/true/yes/on (any case) are true."""
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


def validate(config: dict, logger: logging.Logger) -> None:
    """Check and normalise `config` in place; raise ConfigError when it is unusable."""
    config["DEV_MODE"] = as_bool(config.get("DEV_MODE"))
    config["SOCKETIO_MESSAGE_QUEUE"] = as_bool(config.get("SOCKETIO_MESSAGE_QUEUE"))

    secret = config.get("SECRET_KEY")
    if secret is None or secret == "":
        if not config["DEV_MODE"]:
            raise ConfigError(
                "SECRET_KEY is not set. Set FLASK_SECRET_KEY to a long random string, e.g. "
                "FLASK_SECRET_KEY=$(python -c 'import secrets; print(secrets.token_hex(32))'), "
                "or set FLASK_DEV_MODE=1 to run with an insecure development key.")
        config["SECRET_KEY"] = INSECURE_DEV_SECRET_KEY
        logger.warning("DEV_MODE: using the fixed INSECURE development SECRET_KEY; "
                       "tokens can be forged by anyone. Set FLASK_SECRET_KEY outside a lab.")
    else:
        # FLASK_SECRET_KEY=12345 is parsed as JSON (an int): keep it a string.
        config["SECRET_KEY"] = str(secret)

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
