"""``/auth``: register, log in (the only user routes without a token), log out."""

from __future__ import annotations

from functools import lru_cache

from flask import Blueprint, abort, current_app, g, jsonify
from werkzeug.security import check_password_hash, generate_password_hash

from . import attempts, chat_store
from .redis_store import get_redis
from .tokens import issue_token, login_required, new_token_key
from .validation import USERNAME_MAX_LENGTH, json_body, require_email, require_password, require_str

bp = Blueprint("auth", __name__, url_prefix="/auth")


@lru_cache(maxsize=4)
def dummy_hash(method: str) -> str:
    """A hash made with the method in force, checked against when the email is
    unknown, so that "no such user" costs as long as "wrong password" and
    response times do not reveal who is registered."""
    return generate_password_hash("not-a-real-password", method=method)


@bp.post("/register")
def register():
    attempts.check_register()
    data = json_body()
    email = require_email(data)
    password = require_password(data)
    username = require_str(data, "username", max_length=USERNAME_MAX_LENGTH).strip()
    # Hashing is deliberately slow (scrypt): tens of ms of CPU per call.
    password_hash = generate_password_hash(password,
                                           method=current_app.config["PASSWORD_HASH_METHOD"])
    user = chat_store.create_user(get_redis(), email, username, password_hash, new_token_key())
    if user is None:
        attempts.failed()  # it told a stranger that this email has an account
        abort(409, "email already registered")
    return jsonify(user), 201


@bp.post("/login")
def login():
    data = json_body()
    email = require_email(data)
    attempts.check_login(email)
    password = require_str(data, "password", allowed_controls=None)
    r = get_redis()
    user = chat_store.get_user_by_email(r, email, with_secrets=True)
    stored_hash = (user.pop("password", None) if user else None) or dummy_hash(
        current_app.config["PASSWORD_HASH_METHOD"])
    if not check_password_hash(stored_hash, password) or user is None:
        attempts.login_failed(email)
        abort(401, "invalid email or password")
    token_key = user.pop("token_key")
    if token_key is None:  # stored before token keys existed
        chat_store.set_token_key(r, user["id"], new_token_key(), only_if_missing=True)
        token_key = chat_store.token_key(r, user["id"])
    return jsonify({"access_token": issue_token(user, token_key), "user": user})


@bp.post("/logout")
@login_required
def logout():
    """Revoke every token of the caller (all devices): a new token key."""
    chat_store.set_token_key(get_redis(), g.user_id, new_token_key())
    return jsonify({"status": "logged out"})
