"""Socket.IO: authenticated connections, ``joinRoom`` and ``sendMessage``.

Client -> server events (answers come back as the event's ack):

* ``joinRoom {roomId}`` -> ``{"ok": true, "roomId", "pid"}`` (``pid``: the
  worker process holding this socket, for the lab), or ``{error, message}``.
* ``sendMessage {roomId?, content}`` -> ``{"id", "ts"}`` once Redis has stored
  the message (without ``roomId``: the room this socket joined last), or
  ``{error, message}``.

Server -> client: ``newMessage {id, roomId, userId, username, content, ts}``
to every socket in the room, the sender's included, on every worker: the
Redis message queue carries the broadcast between worker processes.
"""

from __future__ import annotations

import os
import sys
from functools import wraps

from flask import Flask, abort, current_app, session
from flask_socketio import SocketIO, join_room
from werkzeug.exceptions import HTTPException

from . import chat_store
from .errors import REDIS_DOWN_MESSAGE, error_body
from .redis_store import UNAVAILABLE, get_redis
from .tokens import TokenError, read_token, socket_token
from .validation import check_content, parse_id


def detect_async_mode() -> str:
    """'eventlet' or 'gevent' when that library has patched ``socket``, else 'threading'.

    Flask-SocketIO's own detection picks eventlet whenever it is installed,
    even under gunicorn's gevent worker or the dev server, so the mode is
    chosen here from what is really running. Only a library that is already
    imported is asked: importing eventlet just to check would print its
    deprecation warning (and it cannot have patched anything if not imported).
    """
    if "eventlet" in sys.modules:
        from eventlet.patcher import is_monkey_patched
        if is_monkey_patched("socket"):
            return "eventlet"
    if "gevent" in sys.modules:
        from gevent.monkey import is_module_patched
        if is_module_patched("socket"):
            return "gevent"
    return "threading"


def room_name(room_id: int) -> str:
    return f"room:{room_id}"


def broadcast_message(message: dict) -> None:
    """Send ``newMessage`` to the room's sockets (through the queue: all workers)."""
    current_app.extensions["socketio"].emit("newMessage", message,
                                           to=room_name(message["roomId"]))


def ack_errors(handler):
    """Turn an event handler's failures into an ack ``{error, message}``."""
    @wraps(handler)
    def wrapped(*args):
        try:
            return handler(args[0] if args else None)
        except HTTPException as e:
            return error_body(e.code, e.description)
        except UNAVAILABLE as e:
            current_app.logger.warning("Redis unavailable: %s: %s", type(e).__name__, e)
            return error_body(503, REDIS_DOWN_MESSAGE)
        except Exception:
            current_app.logger.exception("unhandled error in Socket.IO event")
            return error_body(500, "internal server error")
    return wrapped


def on_connect(auth=None):
    """Accept only a valid token (auth dict, Authorization header or ?token=)."""
    try:
        claims = read_token(socket_token(auth))
    except TokenError as e:
        # The client receives this as connect_error data.
        raise ConnectionRefusedError(error_body(401, str(e))) from None
    # Flask-SocketIO keeps a private session per socket for its events.
    session["uid"] = claims["uid"]
    session["name"] = claims.get("name")
    session["room"] = None


def _membership_or_abort(room_id) -> int:
    room = parse_id(room_id)
    if room is None:
        abort(400, "'roomId' must be a positive integer id")
    verdict = chat_store.membership(get_redis(), room, session["uid"])
    if verdict == "unknown":
        abort(404, "unknown room")
    if verdict == "forbidden":
        abort(403, "you are not a member of this room")
    return room


@ack_errors
def on_join_room(data):
    if not isinstance(data, dict) or data.get("roomId") is None:
        abort(400, "payload must be {roomId}")
    room = _membership_or_abort(data["roomId"])
    join_room(room_name(room))
    session["room"] = room
    return {"ok": True, "roomId": room, "pid": os.getpid()}


@ack_errors
def on_send_message(data):
    content = check_content(data)
    room = data.get("roomId")
    if room is None:
        room = session.get("room")
        if room is None:
            abort(400, "no roomId given and no room joined yet")
    room = parse_id(room)
    if room is None:
        abort(400, "'roomId' must be a positive integer id")
    # Membership is checked inside the same atomic script that stores.
    verdict, message = chat_store.post_message(
        get_redis(), room, session["uid"], session.get("name"), content,
        current_app.config["ROOM_HISTORY_MAX"])
    if verdict == "unknown":
        abort(404, "unknown room")
    if verdict == "forbidden":
        abort(403, "you are not a member of this room")
    broadcast_message(message)
    return {"id": message["id"], "ts": message["ts"]}


def init_app(app: Flask) -> SocketIO:
    """Create this app's SocketIO server and register the events."""
    config = app.config
    options = {
        "async_mode": detect_async_mode(),
        "cors_allowed_origins": config["CORS_ALLOWED_ORIGINS"],
        "max_http_buffer_size": config["MAX_CONTENT_LENGTH"],
    }
    if config["SOCKETIO_MESSAGE_QUEUE"]:
        options["message_queue"] = config["REDIS_URL"]
        options["channel"] = config["SOCKETIO_CHANNEL"]
    socketio = SocketIO(app, **options)  # also sets app.extensions["socketio"]
    socketio.on_event("connect", on_connect)
    socketio.on_event("joinRoom", on_join_room)
    socketio.on_event("sendMessage", on_send_message)
    return socketio
