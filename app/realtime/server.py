"""Socket.IO: authenticated connections, ``joinRoom`` and ``sendMessage``.

Client -> server events (answers come back as the event's ack):

* ``joinRoom {roomId, after?}`` -> ``{"ok": true, "roomId", "pid"}`` (``pid``:
  the worker process holding this socket, for the lab), or ``{error, message}``.
  With ``after`` (the id of the last message the client has), the ack also
  carries ``missed``: the messages stored since (up to 200, oldest first;
  join again with the last one's id for more). This is how a member catches
  up after a gap in the feed, e.g. while the queue listener reconnects after
  a Redis restart: a ``seq`` that jumps by more than one tells it a gap
  happened.
* ``sendMessage {roomId?, content, clientId?}`` -> ``{"id", "ts"}`` once Redis
  has stored the message (without ``roomId``: the room this socket joined
  last), or ``{error, message}``. A repeated ``clientId`` stores nothing new
  and acks the message stored the first time.

Server -> client: ``newMessage {id, roomId, seq, userId, username, content, ts}``
to every socket in the room, the sender's included, on every worker: the
Redis message queue carries the broadcast between worker processes. ``seq``
counts the room's messages (1, 2, 3, ...).

Every event re-checks the connection's token (one HGET): a socket dies with
its user's tokens (logout, deleted user, lost data).
"""

from __future__ import annotations

import os
import sys
from functools import wraps

from flask import Flask, abort, current_app, request, session
from flask_socketio import SocketIO, join_room
from redis.exceptions import RedisError
from werkzeug.exceptions import HTTPException

from .. import chat_store
from ..errors import error_body, redis_unavailable
from ..redis_store import get_redis
from ..rooms import broadcast_message, room_name, room_or_abort, save_message
from ..settings import DEFAULTS
from ..tokens import TokenError, live_claims, socket_token
from ..validation import check_content, check_message_key, parse_id
from . import direct_writer, inline_websocket, ping_timer, socket_guard

CATCH_UP_MAX = 200  # messages per joinRoom ack


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


def async_mode(app: Flask) -> str:
    """The Socket.IO async mode: what the process runs (`detect_async_mode`), checked
    against the one the configuration states (SOCKETIO_ASYNC_MODE; "auto" takes it).
    A mismatch is said once in the log: a stage's server that runs another worker than
    its settings say (a command such as `flask seed-users` runs no worker at all)."""
    running, stated = detect_async_mode(), app.config["SOCKETIO_ASYNC_MODE"]
    if stated not in ("auto", running):
        app.logger.warning("SOCKETIO_ASYNC_MODE is %r but this process runs %r: serving "
                           "Socket.IO in %r mode (gunicorn -k gthread runs threading, "
                           "-k gevent gevent)", stated, running, running)
    return running


def redis_error_body(e: RedisError) -> dict:
    """503 for a Redis that cannot serve now, 500 (logged) for anything else."""
    message = redis_unavailable(e)
    if message is None:
        current_app.logger.error("unhandled Redis error in Socket.IO event", exc_info=e)
        return error_body(500, "internal server error")
    current_app.logger.warning("Redis unavailable: %s: %s", type(e).__name__, e)
    return error_body(503, message)


# --- the rules of every event, shared by Flask-SocketIO's handlers below and the
# asyncio server's (app/realtime/server_asgi.py). Each takes the connection's state (the
# dict `connect_state` made: Flask-SocketIO's session here, python-socketio's there)
# and needs the Flask app's context (settings, Redis); each fails with an
# HTTPException or a RedisError, which `event_error` turns into the ack.

def event_error(e: Exception) -> dict:
    """An event's failure as its ack ``{error, message}``."""
    if isinstance(e, HTTPException):
        return error_body(e.code, e.description)
    if isinstance(e, RedisError):
        return redis_error_body(e)
    current_app.logger.error("unhandled error in Socket.IO event", exc_info=e)
    return error_body(500, "internal server error")


def caller(state) -> int:
    """The connection's user id, while its token is still live (401 otherwise)."""
    try:
        return live_claims(state.get("token"))["uid"]
    except TokenError as e:
        abort(401, str(e))


def connect_state(auth, environ) -> dict:
    """A connection's state, for a live token only (auth dict, Authorization header or
    ?token=); refused otherwise."""
    token = socket_token(auth, environ)
    try:
        claims = live_claims(token)
    except TokenError as e:
        # A refusal on every server; the client's connect_error data is python-socketio's
        # generic {"message": "Connection refused by server"}, not this body (checked on
        # gevent and asyncio: socketio.exceptions.ConnectionRefusedError would carry it).
        raise ConnectionRefusedError(error_body(401, str(e))) from None
    except RedisError as e:
        raise ConnectionRefusedError(redis_error_body(e)) from None
    return {"token": token, "uid": claims["uid"], "name": claims["name"], "room": None}


def id_field(data: dict, name: str, zero_ok: bool = False) -> int:
    """A positive integer id field of an event payload (400 otherwise)."""
    value = data.get(name)
    if zero_ok and value == 0 and not isinstance(value, bool):
        return 0
    number = parse_id(value)
    if number is None:
        abort(400, f"'{name}' must be a positive integer id")
    return number


def join_checked(state, data) -> tuple[int, int | None]:
    """joinRoom's checks: a live token, the payload, membership; (room, after)."""
    caller(state)
    if not isinstance(data, dict) or data.get("roomId") is None:
        abort(400, "payload must be {roomId, after?}")
    after = None if data.get("after") is None else id_field(data, "after", zero_ok=True)
    return room_or_abort(id_field(data, "roomId"), state["uid"]), after


def joined_ack(room: int) -> dict:
    return {"ok": True, "roomId": room, "pid": os.getpid()}


def missed_since(state, room: int, after: int) -> list:
    """What the member missed since message `after` (read once it has joined: a message
    stored in between arrives both ways, and clients drop an id they already have)."""
    return chat_store.messages_after(get_redis(), room, state["uid"], after,
                                     CATCH_UP_MAX) or []


def send_checked(state, data) -> dict:
    """sendMessage's checks and store: a live token, the payload, then the message stored
    (membership is checked inside the same atomic script). Not broadcast yet."""
    caller(state)
    content = check_content(data)
    key = check_message_key(data.get("clientId"), "clientId")
    if data.get("roomId") is not None:
        room = id_field(data, "roomId")
    elif state.get("room") is not None:
        room = state["room"]
    else:
        abort(400, "no roomId given and no room joined yet")
    return save_message(room, state["uid"], state.get("name"), content, key)


def sent_ack(message: dict) -> dict:
    return {"id": message["id"], "ts": message["ts"]}


def server_options(config) -> dict:
    """The Engine.IO/Socket.IO options both servers take from the settings."""
    return {
        "cors_allowed_origins": config["CORS_ALLOWED_ORIGINS"],
        "max_http_buffer_size": config["MAX_CONTENT_LENGTH"],
        "transports": config["SOCKETIO_TRANSPORTS"],
        "ping_interval": config["SOCKETIO_PING_INTERVAL"],
        "ping_timeout": config["SOCKETIO_PING_TIMEOUT"],
    }


# --- Flask-SocketIO's handlers ---------------------------------------------------

def ack_errors(handler):
    """Turn an event handler's failures into an ack ``{error, message}``."""
    @wraps(handler)
    def wrapped(*args):
        try:
            return handler(args[0] if args else None)
        except Exception as e:
            return event_error(e)
    return wrapped


def on_connect(auth=None):
    # Flask-SocketIO keeps a private session per socket for its events.
    session.update(connect_state(auth, request.environ))


@ack_errors
def on_join_room(data):
    room, after = join_checked(session, data)
    # Join first, then read (missed_since).
    join_room(room_name(room))
    session["room"] = room
    ack = joined_ack(room)
    if after is not None:
        ack["missed"] = missed_since(session, room, after)
    return ack


@ack_errors
def on_send_message(data):
    message = send_checked(session, data)
    # A retry broadcasts again (same id): the first try may have failed before
    # its broadcast, and clients drop a message id they already have.
    broadcast_message(message)
    return sent_ack(message)


def init_app(app: Flask) -> SocketIO:
    """Create this app's SocketIO server and register the events."""
    config = app.config
    options = {"async_mode": async_mode(app), **server_options(config)}
    if config["SOCKETIO_MESSAGE_QUEUE"]:
        options["message_queue"] = config["REDIS_URL"]
        options["channel"] = config["SOCKETIO_CHANNEL"]
    socketio = SocketIO(app, **options)  # also sets app.extensions["socketio"]
    socketio.on_event("connect", on_connect)
    socketio.on_event("joinRoom", on_join_room)
    socketio.on_event("sendMessage", on_send_message)
    route_for_events(app)
    fewer_greenlets(app, socketio)  # before the guard, which wraps the websocket class
    socket_guard.init_app(app, socketio)
    return socketio


def route_for_events(app: Flask) -> None:
    """Rules for Socket.IO's path, so that an event's request context matches one.

    Flask-SocketIO runs every event in a request context made from the connection's own
    request (/socket.io/), and Flask matches its path against the URL map as the context
    is pushed. With no rule for it, werkzeug raises NotFound (WebsocketMismatch for a
    websocket, where only a rule for plain requests matches) and the context keeps it
    (``request.routing_exception``), its traceback's frames holding the context: a
    garbage cycle of about 30 objects for every event, left for the collector (which,
    under GC_FREEZE_EVERY, could find it frozen with the live ones: app/gc_policy.py).
    Engine.IO's middleware takes every /socket.io/ request before Flask's routing, so the
    view is reached only without it, and answers 404 as before."""
    for websocket in (False, True):  # Engine.IO's connect is a GET, either way
        app.add_url_rule("/socket.io/", "socketio_path", _not_found, strict_slashes=False,
                         websocket=websocket)


def _not_found():
    abort(404)


def fewer_greenlets(app: Flask, socketio: SocketIO) -> None:
    """WEBSOCKET_READER=handler, ENGINEIO_PING=timer and ENGINEIO_WRITER=direct, in gevent
    mode (the only one they were written and measured for; lab 16); in another, said once
    in the log."""
    asked = [f"{name}={app.config[name]}"
             for name in ("WEBSOCKET_READER", "ENGINEIO_PING", "ENGINEIO_WRITER")
             if app.config[name] != DEFAULTS[name]]
    if asked and socketio.async_mode != "gevent":
        app.logger.warning("%s: for gevent mode only; this process runs %r, so the "
                           "libraries' own are used", ", ".join(asked), socketio.async_mode)
        return
    eio = socketio.server.eio
    if app.config["WEBSOCKET_READER"] == "handler":
        inline_websocket.install(eio)
    if app.config["ENGINEIO_PING"] == "timer":
        ping_timer.install(eio)
    if app.config["ENGINEIO_WRITER"] == "direct":
        direct_writer.install(eio)
