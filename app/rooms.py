"""``/rooms``: the one room of a pair of friends, and its messages.

``room_or_abort`` is the one membership check, for these views and the
Socket.IO events alike: a room you are not in answers 404 like a room that
does not exist, so room ids cannot be probed.
"""

from __future__ import annotations

from flask import Blueprint, abort, current_app, g, jsonify, request

from . import chat_store, tokens
from .redis_store import get_redis
from .tokens import login_required
from .validation import (
    check_content,
    check_message_key,
    json_body,
    parse_id,
    parse_limit,
    require_id,
)

bp = Blueprint("rooms", __name__, url_prefix="/rooms")

UNKNOWN_ROOM = "unknown room"


def room_name(room_id: int) -> str:
    """The Socket.IO room of a chat room."""
    return f"room:{room_id}"


def room_or_abort(raw, user_id: int, check_member: bool = True) -> int:
    """The room id in `raw` (an int or a string of digits) if `user_id` is a
    member; 404 otherwise, whether the room exists or not.

    `check_member=False` only parses the id, for the calls that fetch or store
    with the membership check in the same round trip (reading, posting).
    """
    room_id = parse_id(raw)
    if room_id is None or (check_member and not chat_store.is_member(get_redis(), room_id,
                                                                     user_id)):
        abort(404, UNKNOWN_ROOM)
    return room_id


def store_message(room_id: int, user_id: int, username: str, content: str,
                  key: str | None) -> dict:
    """Store (at most once per `key`) and broadcast a message; HTTP and Socket.IO share it."""
    message = save_message(room_id, user_id, username, content, key)
    # A retry broadcasts again (same id): the first try may have failed before
    # its broadcast, and clients drop a message id they already have.
    broadcast_message(message)
    return message


def save_message(room_id: int, user_id: int, username: str, content: str,
                 key: str | None) -> dict:
    """Store a message (at most once per `key`), not broadcast: the asyncio server
    (app/realtime/server_asgi.py) broadcasts with its own emit, a coroutine."""
    token_key = g.get("token_key")  # checked by the script (FUSED_ROUND_TRIPS)
    verdict, message = chat_store.post_message(
        get_redis(), room_id, user_id, username, content,
        current_app.config["ROOM_HISTORY_MAX"], key=key,
        key_ttl=current_app.config["IDEMPOTENCY_TTL"], token_key=token_key)
    if token_key is not None:
        tokens.confirm(None if verdict == "revoked" else token_key)
    if verdict == "not_member":
        abort(404, UNKNOWN_ROOM)
    if verdict == "key_reused":
        abort(409, "this idempotency key was used for another message")
    return message


def broadcast_message(message: dict) -> None:
    """Send ``newMessage`` to the room's sockets (through the queue: all workers)."""
    current_app.extensions["socketio"].emit("newMessage", message,
                                           to=room_name(message["roomId"]))


@bp.post("/find-or-create")
@login_required(in_view=True)
def find_or_create():
    """``{friendId}`` -> ``{roomId}``. Rooms are for friends only: 404 otherwise."""
    friend_id = require_id(json_body(), "friendId")
    if friend_id == g.user_id:
        abort(400, "a room needs two different users")
    r = get_redis()
    if tokens.pending():  # the token, the friendship and the pair's room: one round trip
        stored, (friends, room) = chat_store.with_token_key(
            r, g.user_id, lambda pipe: (pipe.sismember(chat_store.friends_key(g.user_id),
                                                       friend_id),
                                        pipe.get(chat_store.pair_key(g.user_id, friend_id))))
        tokens.confirm(stored)
        if friends and room is not None:
            return jsonify({"roomId": int(room)})
    if not chat_store.are_friends(r, g.user_id, friend_id):
        abort(404, "unknown user (or not your friend)")
    return jsonify({"roomId": chat_store.find_or_create_room(r, g.user_id, friend_id)})


@bp.get("/<room_id>/messages")
@login_required(in_view=True)
def list_messages(room_id):
    """The last ``limit`` messages (default 50, 1..200), oldest first (newest last);
    with ``after=<message id>``, the first ``limit`` messages after that one (catch-up)."""
    room = room_or_abort(room_id, g.user_id, check_member=False)
    limit = parse_limit()
    after = request.args.get("after")
    r = get_redis()
    if after is None and tokens.pending():  # the token and the messages: one round trip
        stored, found = chat_store.with_token_key(
            r, g.user_id, lambda pipe: chat_store.queue_recent(pipe, room, g.user_id, limit))
        tokens.confirm(stored)
        messages = chat_store.parse_recent(*found)
    elif after is None:
        messages = chat_store.recent_messages(r, room, g.user_id, limit)
    else:
        tokens.check_now()
        after_id = parse_id(after) if after != "0" else 0
        if after_id is None:
            abort(400, "'after' must be a message id (0 for the oldest kept)")
        messages = chat_store.messages_after(r, room, g.user_id, after_id, limit)
    if messages is None:
        abort(404, UNKNOWN_ROOM)
    return jsonify({"roomId": room, "messages": messages})


@bp.post("/<room_id>/messages")
@login_required(in_view=True)
def post_message(room_id):
    """``{content}`` -> 201 ``{id, ts}``, then ``newMessage`` to the room's sockets.

    An ``Idempotency-Key`` header makes a retry (after a 503 or a timeout)
    store nothing new: it answers with the message stored the first time.
    """
    room = room_or_abort(room_id, g.user_id, check_member=False)
    content = check_content(json_body())
    key = check_message_key(request.headers.get("Idempotency-Key"), "Idempotency-Key")
    message = store_message(room, g.user_id, g.username, content, key)
    return jsonify({"id": message["id"], "ts": message["ts"]}), 201
