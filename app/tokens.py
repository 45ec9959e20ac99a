"""Access tokens: signed and time-stamped with itsdangerous, checked against Redis.

A token carries ``{"uid": <user id>, "name": <username>, "key": <token key>}``.
The signature (keyed by SECRET_KEY) makes it tamper-proof and the timestamp
lets it expire after TOKEN_MAX_AGE seconds. The token key is a random value
stored in the user's hash (``user:<id>`` field ``token_key``): a token is
only accepted while its key is the user's current one, so it dies with its
user, with the data (after a FLUSHALL the next user with that id has another
key), and on ``POST /auth/logout`` (which draws a new key). The check costs one
HGET per request (measured in the README's "Hardening" notes).

Stage 7 (app/fast_path.py): with FUSED_ROUND_TRIPS a view declared with
``@login_required(in_view=True)`` gets the signed claims only, and checks the key
(``confirm``) with what its own first round trip fetched; with TOKEN_CACHE_SIZE
the signature of a token seen before is not checked again (its age still is).
"""

from __future__ import annotations

import secrets
import time
from collections import OrderedDict
from functools import wraps
from urllib.parse import parse_qs

from flask import current_app, g, request
from itsdangerous import BadSignature, URLSafeTimedSerializer
from werkzeug.datastructures import WWWAuthenticate
from werkzeug.exceptions import HTTPException, Unauthorized

from . import chat_store
from .redis_store import get_redis

# Separates these signatures from any other use of SECRET_KEY.
TOKEN_SALT = "chat-access-token"


class TokenError(Exception):
    """A token is missing, malformed, tampered with, expired or revoked (-> 401)."""


def new_token_key() -> str:
    return secrets.token_hex(8)


def serializer() -> URLSafeTimedSerializer:
    return URLSafeTimedSerializer(current_app.config["SECRET_KEY"], salt=TOKEN_SALT)


def issue_token(user: dict, token_key: str) -> str:
    return serializer().dumps({"uid": int(user["id"]), "name": user["username"],
                               "key": token_key})


def read_token(token) -> dict:
    """The token's claims ``{"uid", "name", "key"}``; TokenError unless well-formed and signed."""
    if not isinstance(token, str) or not token:
        raise TokenError("missing access token")
    cache = current_app.extensions.get("token_cache")
    claims, signed_at = cache.get(token, (None, None)) if cache is not None else (None, None)
    try:
        if claims is None:
            claims, signed_at = serializer().loads(token, return_timestamp=True)
            if cache is not None and isinstance(claims, dict):
                remember(cache, token, claims, signed_at)
    except BadSignature:
        raise TokenError("invalid access token") from None
    if time.time() - signed_at.timestamp() > current_app.config["TOKEN_MAX_AGE"]:
        raise TokenError("access token expired; log in again")
    # A signed token with claims of the wrong type (an old format, a bug): 401, never 500.
    if (not isinstance(claims, dict) or type(claims.get("uid")) is not int
            or not isinstance(claims.get("name"), str)
            or not isinstance(claims.get("key"), str)):
        raise TokenError("invalid access token")
    return claims


def remember(cache: OrderedDict, token: str, claims: dict, signed_at) -> None:
    """Keep a checked token's claims, the least recently added one leaving when full."""
    cache[token] = (claims, signed_at)
    if len(cache) > current_app.config["TOKEN_CACHE_SIZE"]:
        cache.popitem(last=False)


def live_claims(token) -> dict:
    """Claims of a token whose user still exists and has not revoked it (one HGET)."""
    claims = read_token(token)
    if chat_store.token_key(get_redis(), claims["uid"]) != claims["key"]:
        raise TokenError("access token revoked or its user is gone; log in again")
    return claims


def bearer_of(header: str) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header's value, if any."""
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer":
        return None
    return token.strip() or None


def bearer_token() -> str | None:
    """The token of this request's ``Authorization: Bearer <token>`` header, if any."""
    return bearer_of(request.headers.get("Authorization", ""))


def socket_token(auth, environ) -> str | None:
    """Socket.IO: the ``auth`` dict's token, else the header, else ``?token=``. From the
    connection's WSGI-style environ, which Flask-SocketIO and python-socketio's ASGI
    server (app/realtime/server_asgi.py) both give, so one rule serves both."""
    if isinstance(auth, dict) and isinstance(auth.get("token"), str):
        return auth["token"]
    query = parse_qs(environ.get("QUERY_STRING", "")).get("token")
    return bearer_of(environ.get("HTTP_AUTHORIZATION", "")) or (query[0] if query else None)


def unauthorized(e: TokenError) -> Unauthorized:
    return Unauthorized(str(e), www_authenticate=WWWAuthenticate("bearer"))


def confirm(stored_key: str | None) -> None:
    """The view's check of the token key its own round trip fetched (401 if not current)."""
    if stored_key != g.pop("token_key"):
        raise unauthorized(TokenError("access token revoked or its user is gone; log in again"))


def pending() -> bool:
    """Whether this request's view is to check the token key itself (FUSED_ROUND_TRIPS)."""
    return "token_key" in g


def check_now() -> None:
    """For a view declared `in_view` that takes a path with no round trip to fuse into."""
    if pending():
        confirm(chat_store.token_key(get_redis(), g.user_id))


def login_required(view=None, *, in_view: bool = False):
    """Require a live bearer token; the caller's id lands in ``g.user_id``. With
    `in_view` and FUSED_ROUND_TRIPS the view checks the key itself (``confirm``):
    that it did is checked when it returns."""
    if view is None:
        return lambda v: login_required(v, in_view=in_view)

    @wraps(view)
    def wrapped(*args, **kwargs):
        fused = in_view and current_app.config["FUSED_ROUND_TRIPS"]
        try:
            claims = read_token(bearer_token()) if fused else live_claims(bearer_token())
        except TokenError as e:
            raise unauthorized(e) from None
        g.user_id = claims["uid"]
        g.username = claims["name"]
        if fused:
            g.token_key = claims["key"]
        try:
            answer = view(*args, **kwargs)
        except HTTPException:
            check_now()  # refused before its round trip: a dead token still answers 401
            raise
        if pending():
            raise RuntimeError(f"{view.__name__} answered without checking the token")
        return answer
    return wrapped
