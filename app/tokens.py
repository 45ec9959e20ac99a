"""Access tokens: signed and time-stamped with itsdangerous, checked statelessly.

A token carries ``{"uid": <user id>, "name": <username>}``; the signature
(keyed by SECRET_KEY) makes it tamper-proof and the timestamp lets it expire
after TOKEN_MAX_AGE seconds. Checking one costs no Redis round trip.
"""

from __future__ import annotations

from functools import wraps

from flask import current_app, g, request
from itsdangerous import BadSignature, SignatureExpired, URLSafeTimedSerializer
from werkzeug.datastructures import WWWAuthenticate
from werkzeug.exceptions import Unauthorized

# Separates these signatures from any other use of SECRET_KEY.
TOKEN_SALT = "chat-access-token"


class TokenError(Exception):
    """A token is missing, malformed, tampered with or expired (-> 401)."""


def serializer() -> URLSafeTimedSerializer:
    return URLSafeTimedSerializer(current_app.config["SECRET_KEY"], salt=TOKEN_SALT)


def issue_token(user: dict) -> str:
    return serializer().dumps({"uid": int(user["id"]), "name": user["username"]})


def read_token(token) -> dict:
    """The token's claims ``{"uid", "name"}``; TokenError when it is not valid."""
    if not isinstance(token, str) or not token:
        raise TokenError("missing access token")
    try:
        claims = serializer().loads(token, max_age=current_app.config["TOKEN_MAX_AGE"])
    except SignatureExpired:
        raise TokenError("access token expired; log in again") from None
    except BadSignature:
        raise TokenError("invalid access token") from None
    if not isinstance(claims, dict) or not isinstance(claims.get("uid"), int):
        raise TokenError("invalid access token")
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
    """Require a valid bearer token; the caller's id lands in ``g.user_id``."""
    @wraps(view)
    def wrapped(*args, **kwargs):
        try:
            claims = read_token(bearer_token())
        except TokenError as e:
            raise Unauthorized(str(e), www_authenticate=WWWAuthenticate("bearer")) from None
        g.user_id = claims["uid"]
        g.username = claims.get("name")
        return view(*args, **kwargs)
    return wrapped
