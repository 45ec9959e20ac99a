"""``/auth``: register and log in (the only user routes without a token)."""

from __future__ import annotations

from flask import Blueprint, abort, current_app, jsonify
from werkzeug.security import check_password_hash, generate_password_hash

from . import chat_store
from .redis_store import get_redis
from .tokens import issue_token
from .validation import USERNAME_MAX_LENGTH, json_body, require_email, require_password, require_str

bp = Blueprint("auth", __name__, url_prefix="/auth")

# Checked against when the email is unknown, so that "no such user" takes as
# long as "wrong password" and response times do not reveal who is registered.
_DUMMY_HASH = generate_password_hash("not-a-real-password")


@bp.post("/register")
def register():
    data = json_body()
    email = require_email(data)
    password = require_password(data)
    username = require_str(data, "username", max_length=USERNAME_MAX_LENGTH).strip()
    # Hashing is deliberately slow (scrypt): tens of ms of CPU per call.
    password_hash = generate_password_hash(password,
                                           method=current_app.config["PASSWORD_HASH_METHOD"])
    user = chat_store.create_user(get_redis(), email, username, password_hash)
    if user is None:
        abort(409, "email already registered")
    return jsonify(user), 201


@bp.post("/login")
def login():
    data = json_body()
    email = require_email(data)
    password = require_str(data, "password")
    user = chat_store.get_user_by_email(get_redis(), email, with_password=True)
    stored_hash = (user.pop("password", None) if user else None) or _DUMMY_HASH
    if not check_password_hash(stored_hash, password) or user is None:
        abort(401, "invalid email or password")
    return jsonify({"access_token": issue_token(user), "user": user})
