"""``/rooms``: the one room of a pair of friends, and its messages."""

from __future__ import annotations

from flask import Blueprint, abort, current_app, g, jsonify

from . import chat_store
from .realtime import broadcast_message
from .redis_store import get_redis
from .tokens import login_required
from .validation import check_content, json_body, parse_id, parse_limit, require_id

bp = Blueprint("rooms", __name__, url_prefix="/rooms")

MEMBERSHIP_ERRORS = {"unknown": (404, "unknown room"),
                     "forbidden": (403, "you are not a member of this room")}


def room_id_from_path(raw: str) -> int:
    room_id = parse_id(raw)
    if room_id is None:  # not an id we could have issued
        abort(404, "unknown room")
    return room_id


@bp.post("/find-or-create")
@login_required
def find_or_create():
    """``{friendId}`` -> ``{roomId}``. Rooms are for friends only: 403 otherwise."""
    friend_id = require_id(json_body(), "friendId")
    if friend_id == g.user_id:
        abort(400, "a room needs two different users")
    r = get_redis()
    if not chat_store.are_friends(r, g.user_id, friend_id):
        if not chat_store.user_exists(r, friend_id):
            abort(404, "unknown user")
        abort(403, "you can only open a room with a friend")
    return jsonify({"roomId": chat_store.find_or_create_room(r, g.user_id, friend_id)})


@bp.get("/<room_id>/messages")
@login_required
def list_messages(room_id):
    """The last ``limit`` messages (default 50, 1..200), oldest first (newest last)."""
    room = room_id_from_path(room_id)
    limit = parse_limit()
    verdict, messages = chat_store.recent_messages(get_redis(), room, g.user_id, limit)
    if verdict in MEMBERSHIP_ERRORS:
        abort(*MEMBERSHIP_ERRORS[verdict])
    return jsonify({"roomId": room, "messages": messages})


@bp.post("/<room_id>/messages")
@login_required
def post_message(room_id):
    """``{content}`` -> 201 ``{id, ts}``, then ``newMessage`` to the room's sockets."""
    room = room_id_from_path(room_id)
    content = check_content(json_body())
    verdict, message = chat_store.post_message(
        get_redis(), room, g.user_id, g.username, content,
        current_app.config["ROOM_HISTORY_MAX"])
    if verdict in MEMBERSHIP_ERRORS:
        abort(*MEMBERSHIP_ERRORS[verdict])
    broadcast_message(message)
    return jsonify({"id": message["id"], "ts": message["ts"]}), 201
