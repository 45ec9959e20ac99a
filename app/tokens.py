"""Access tokens: signed and time-stamped with itsdangerous, checked against Redis.

A token carries ``{"uid": <user id>, "name": <username>, "key": <token key>}``.
The signature (keyed by SECRET_KEY) makes it tamper-proof and the timestamp
lets it expire after TOKEN_MAX_AGE seconds. The token key is a random value
stored in the user's hash (``user:<id>`` field ``token_key``): a token is
only accepted while its key is the user's current one, so it dies with its
user, with the data (after a FLUSHALL the next user with that id has another
key), and on ``POST /auth/logout`` (which draws a new key). The check costs one
HGET per request (measured in the README's "Hardening" notes).
"""

from __future__ import annotations

import secrets
from functools import wraps

from flask import current_app, g, request
from itsdangerous import BadSignature, SignatureExpired, URLSafeTimedSerializer
from werkzeug.datastructures import WWWAuthenticate
from werkzeug.exceptions import Unauthorized

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
    try:
        claims = serializer().loads(token, max_age=current_app.config["TOKEN_MAX_AGE"])
    except SignatureExpired:
        raise TokenError("access token expired; log in again") from None
    except BadSignature:
        raise TokenError("invalid access token") from None
    # A signed token with claims of the wrong type (an old format, a bug): 401, never 500.
    if (not isinstance(claims, dict) or type(claims.get("uid")) is not int
            or not isinstance(claims.get("name"), str)
            or not isinstance(claims.get("key"), str)):
        raise TokenError("invalid access token")
    return claims


def live_claims(token) -> dict:
    """Claims of a token whose user still exists and has not revoked it (one HGET)."""
    claims = read_token(token)
    if chat_store.token_key(get_redis(), claims["uid"]) != claims["key"]:
        raise TokenError("access token revoked or its user is gone; log in again")
    return claims


def bearer_token() -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, if any."""
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer":
        return None
    return token.strip() or None


def socket_token(auth) -> str | None:
    """Socket.IO: the ``auth`` dict's token, else the header, else ``?token=``."""
    if isinstance(auth, dict) and isinstance(auth.get("token"), str):
        return auth["token"]
    return bearer_token() or request.args.get("token")


def login_required(view):
    """Require a live bearer token; the caller's id lands in ``g.user_id``."""
    @wraps(view)
    def wrapped(*args, **kwargs):
        try:
            claims = live_claims(bearer_token())
        except TokenError as e:
            raise Unauthorized(str(e), www_authenticate=WWWAuthenticate("bearer")) from None
        g.user_id = claims["uid"]
        g.username = claims["name"]
        return view(*args, **kwargs)
    return wrapped
