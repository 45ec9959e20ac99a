"""Socket.IO on asyncio: python-socketio's AsyncServer as an ASGI app (app/asgi.py).

The same events, acks, error bodies and guards as the Flask-SocketIO side
(app/realtime/server.py), from the same functions: ``connect_state``, ``join_checked``,
``missed_since`` and ``send_checked`` decide every answer; this module only
awaits them and python-socketio's own calls (``enter_room``, ``emit``). Every
event re-checks the connection's token, as there.

The shared rules are synchronous (redis-py, in the Flask app's context), so each
event runs them on a worker thread (``asyncio.to_thread``) rather than on a second,
``redis.asyncio`` copy of the store: one set of rules, at the cost of a thread
hand-off per event (the capacity study measures it against the other servers).
The threads are the event loop's default pool, a few per core, which Redis's
sub-millisecond answers keep free; a connection holds no thread while idle, so
the connected users a process can hold are not capped by threads.

The broadcast goes through ``AsyncRedisManager`` on the channel Flask-SocketIO uses
(SOCKETIO_CHANNEL): a message sent here reaches members connected to a gevent,
eventlet or threading server, and theirs reach members here.
"""

from __future__ import annotations

import asyncio
import json
from functools import wraps

import socketio
from flask import Flask

from .. import health
from ..errors import error_body
from ..rooms import room_name
from . import server, socket_guard_asgi


class Refused(Exception):
    """An event's rules refused it; `ack` is the ``{error, message}`` to answer."""

    def __init__(self, ack: dict):
        super().__init__(ack)
        self.ack = ack


def acked(handler):
    """An event handler whose refusal, or any failure, becomes its ack (as
    server.ack_errors does on the Flask side)."""
    @wraps(handler)
    async def wrapped(self, sid, *args):
        try:
            return await handler(self, sid, args[0] if args else None)
        except Refused as e:
            return e.ack
        except Exception:
            self.flask_app.logger.exception("unhandled error in Socket.IO event")
            return error_body(500, "internal server error")
    return wrapped


class Events:
    """The chat's Socket.IO events on an AsyncServer, with the Flask app whose
    settings and Redis the shared rules use."""

    def __init__(self, sio: socketio.AsyncServer, flask_app: Flask):
        self.sio, self.flask_app = sio, flask_app

    def in_context(self, rule, *args):
        with self.flask_app.app_context():
            return rule(*args)

    async def blocking(self, rule, *args):
        """`rule(*args)` on a worker thread, in the app's context; its failure comes back
        as Refused, with the ack the Flask side answers (server.event_error)."""
        def run():
            with self.flask_app.app_context():
                try:
                    return rule(*args), None
                except Exception as e:
                    return None, server.event_error(e)

        value, refusal = await asyncio.to_thread(run)
        if refusal is not None:
            raise Refused(refusal)
        return value

    async def connect(self, sid, environ, auth=None):
        # ConnectionRefusedError passes through to python-socketio, as on the Flask side.
        state = await asyncio.to_thread(self.in_context, server.connect_state, auth,
                                        environ)
        await self.sio.save_session(sid, state)

    @acked
    async def join_room(self, sid, data):
        state = await self.sio.get_session(sid)
        room, after = await self.blocking(server.join_checked, state, data)
        # Join first, then read (server.missed_since).
        await self.sio.enter_room(sid, room_name(room))
        state["room"] = room
        ack = server.joined_ack(room)
        if after is not None:
            ack["missed"] = await self.blocking(server.missed_since, state, room, after)
        return ack

    @acked
    async def send_message(self, sid, data):
        state = await self.sio.get_session(sid)
        message = await self.blocking(server.send_checked, state, data)
        # A retry broadcasts again, as on the Flask side (server.on_send_message).
        await self.sio.emit("newMessage", message, to=room_name(message["roomId"]))
        return server.sent_ack(message)

    async def healthz(self, scope, receive, send):
        """/healthz as the Flask app answers it (health.report), asyncMode "asgi";
        every other path outside /socket.io/ is a JSON 404."""
        if scope["type"] != "http":
            return
        if scope["path"] == "/healthz":
            try:
                body, status = await asyncio.to_thread(self.in_context, health.report,
                                                       self.sio.async_mode)
            except Exception:
                self.flask_app.logger.exception("unhandled error in /healthz")
                body, status = error_body(500, "internal server error"), 500
        else:
            body, status = error_body(404, "not found: this server serves Socket.IO"), 404
        payload = json.dumps(body).encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(payload)).encode())]})
        await send({"type": "http.response.body", "body": payload})


def create_server(flask_app: Flask) -> socketio.AsyncServer:
    """The AsyncServer, with the options Flask-SocketIO gets (server.server_options)
    and the same Redis message queue and channel."""
    config = flask_app.config
    options = server.server_options(config)
    if config["SOCKETIO_MESSAGE_QUEUE"]:
        options["client_manager"] = socketio.AsyncRedisManager(
            config["REDIS_URL"], channel=config["SOCKETIO_CHANNEL"])
    return socketio.AsyncServer(async_mode="asgi", **options)


def create_asgi_app(flask_app: Flask):
    """The ASGI app: the guard (socket_guard_asgi) in front of python-socketio's ASGIApp,
    whose other paths get /healthz."""
    sio = create_server(flask_app)
    events = Events(sio, flask_app)
    sio.on("connect", events.connect)
    sio.on("joinRoom", events.join_room)
    sio.on("sendMessage", events.send_message)
    asgi_app = socketio.ASGIApp(sio, other_asgi_app=events.healthz,
                                on_shutdown=sio.shutdown)
    return socket_guard_asgi.wrap(asgi_app, sio, flask_app.logger,
                                  flask_app.config["SOCKETIO_AUTH_TIMEOUT"])
