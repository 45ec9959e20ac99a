"""``/users``: the caller, lookup by email, and friends."""

from __future__ import annotations

from flask import Blueprint, abort, g, jsonify

from . import chat_store
from .redis_store import get_redis
from .tokens import login_required
from .validation import json_body, normalize_email, require_id

bp = Blueprint("users", __name__, url_prefix="/users")


@bp.get("/me")
@login_required
def me():
    user = chat_store.get_user(get_redis(), g.user_id)
    if user is None:  # a valid token for a user that no longer exists
        abort(401, "user no longer exists; log in again")
    return jsonify(user)


@bp.get("/getUserSecure/<path:email>")
@login_required
def get_user_secure(email):
    normalized = normalize_email(email)
    user = chat_store.get_user_by_email(get_redis(), normalized) if normalized else None
    if user is None:
        abort(404, "unknown user")
    return jsonify(user)


@bp.get("/friends")
@login_required
def friends():
    return jsonify({"friends": chat_store.list_friends(get_redis(), g.user_id)})


@bp.post("/friends")
@login_required
def add_friend():
    """Befriend ``friendId`` (mutual). 201 when new, 200 when already friends."""
    friend_id = require_id(json_body(), "friendId")
    if friend_id == g.user_id:
        abort(400, "you cannot befriend yourself")
    r = get_redis()
    friend = chat_store.get_user(r, friend_id)
    if friend is None:
        abort(404, "unknown user")
    added = chat_store.add_friend(r, g.user_id, friend_id)
    return jsonify({"friend": friend}), 201 if added else 200
