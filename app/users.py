"""``/users``: the caller, lookup by email, friends and friend requests.

Friendship is by consent: ``POST /users/friends`` only asks; the two users
become friends when the other one asks too. Emails and rooms are for
yourself and your friends only, and everything else answers 404, so a
stranger cannot tell a registered email from an unknown one.
"""

from __future__ import annotations

from flask import Blueprint, abort, g, jsonify

from . import attempts, chat_store, tokens
from .redis_store import get_redis
from .tokens import login_required
from .validation import json_body, normalize_email, require_id

bp = Blueprint("users", __name__, url_prefix="/users")


@bp.get("/me")
@login_required(in_view=True)
def me():
    if tokens.pending():  # the user and the token's key: one HMGET
        user, stored = chat_store.user_and_token_key(get_redis(), g.user_id)
        tokens.confirm(stored)
    else:
        user = chat_store.get_user(get_redis(), g.user_id)
    if user is None:  # deleted between the token check and now
        abort(401, "user no longer exists; log in again")
    return jsonify(user)


@bp.get("/getUserSecure/<path:email>")
@login_required(in_view=True)
def get_user_secure(email):
    """Yourself or a friend by email; 404 for anyone else (registered or not)."""
    r = get_redis()
    normalized = normalize_email(email)
    user = None
    if normalized and tokens.pending():  # the token and the email's user id: one round trip
        stored, (user_id,) = chat_store.with_token_key(
            r, g.user_id, lambda pipe: pipe.get(chat_store.email_key(normalized)))
        tokens.confirm(stored)
        user = chat_store.get_user(r, int(user_id)) if user_id is not None else None
    elif normalized:
        user = chat_store.get_user_by_email(r, normalized)
    if user is None or (user["id"] != g.user_id
                        and not chat_store.are_friends(r, g.user_id, user["id"])):
        abort(404, "unknown user")
    return jsonify(user)


@bp.get("/friends")
@login_required(in_view=True)
def friends():
    if not tokens.pending():
        return jsonify({"friends": chat_store.list_friends(get_redis(), g.user_id)})
    found = chat_store.friends_checked(get_redis(), g.user_id, g.token_key)  # one round trip
    tokens.confirm(None if found is None else g.token_key)
    return jsonify({"friends": found})


@bp.get("/friends/requests")
@login_required
def friend_requests():
    """Requests waiting for an answer: ``{incoming, outgoing}``, ids and usernames."""
    return jsonify(chat_store.friend_requests(get_redis(), g.user_id))


@bp.post("/friends")
@login_required
def add_friend():
    """Ask to befriend ``friendId``: 202 until they ask too, then 201 and the friends list
    (200 when already friends)."""
    friend_id = require_id(json_body(), "friendId")
    if friend_id == g.user_id:
        abort(400, "you cannot befriend yourself")
    attempts.check_address()
    r = get_redis()
    outcome = chat_store.request_friend(r, g.user_id, friend_id)
    if outcome == "unknown":
        attempts.failed()  # it told the caller that no user has this id
        abort(404, "unknown user")
    if outcome == "requested":
        return jsonify({"status": "requested"}), 202
    status = 201 if outcome == "friends" else 200
    return jsonify({"friends": chat_store.list_friends(r, g.user_id)}), status
