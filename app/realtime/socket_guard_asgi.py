"""The Engine.IO guard of app/realtime/socket_guard.py, for the asyncio server
(app/realtime/server_asgi.py).

The same checks, the same answers, the same counted log lines: what a request,
a polling payload or a websocket frame may hold is decided by socket_guard's
functions (``live_socket``, ``length_problem``, ``payload_problem``,
``frame_refusal``, ``message_refusal``, ``AuthDeadline.expire``); this module only
speaks ASGI and awaits where python-engineio's asyncio server is a coroutine
(closing a socket, reading a body, handling a message).

One difference of python-engineio 4.15.1's asyncio socket is made up for here: its
``close`` does not end the socket's writer (the threaded one does), so a websocket
whose session was closed (by the guard, or by the client's CLOSE packet) stayed
open, unanswered, until the ping timeout. Here the guard's close ends the writer,
and a closed session's websocket reads no further frame: both close it at once.
"""

from __future__ import annotations

import json
from urllib.parse import parse_qs

from ..errors import error_body
from . import socket_guard
from .socket_guard import AuthDeadline, ClientErrors, client_address


async def close_session(eio, sid: str) -> None:
    """socket_guard.close_session, for python-engineio's AsyncServer."""
    socket = eio.sockets.get(sid)
    if socket is not None and not socket.closed:
        await socket.close(wait=False, abort=True, reason=eio.reason.TRANSPORT_ERROR)
        socket.queue.put_nowait(None)  # ends its writer, which closes a websocket
    eio.sockets.pop(sid, None)


async def answer(send, status: int, message: str, kind: str = "http") -> None:
    """A JSON ``{error, message}`` answer, as socket_guard.answer gives (`kind`
    "websocket": the HTTP answer to a websocket handshake, refused)."""
    await respond(send, status, json.dumps(error_body(status, message)).encode(),
                  b"application/json", kind)


async def respond(send, status: int, body: bytes, content_type: bytes, kind: str) -> None:
    prefix = "websocket.http" if kind == "websocket" else "http"
    await send({"type": f"{prefix}.response.start", "status": status,
                "headers": [(b"content-type", content_type),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": f"{prefix}.response.body", "body": body})


# ASGI's extension for an HTTP answer to a websocket handshake (granian has it): without
# it an ASGI server answers a refused handshake with 403 and no body, where the WSGI
# servers give Engine.IO's 400 and its reason.
DENIAL = "websocket.http.response"


def can_deny(scope) -> bool:
    return DENIAL in (scope.get("extensions") or {})


def denying(send):
    """A `send` that turns Engine.IO's refusal of a websocket handshake (a close before
    the accept) into the 400 with its reason that the WSGI servers give."""
    accepted = False

    async def deny(message):
        nonlocal accepted
        if message["type"] == "websocket.accept":
            accepted = True
        elif message["type"] == "websocket.close" and not accepted:
            reason = (message.get("reason") or "Bad Request").encode()
            return await respond(send, 400, reason, b"text/plain", "websocket")
        await send(message)

    return deny


async def read_body(receive, length: int) -> bytes:
    """Up to `length` bytes of a request's body (Engine.IO reads no more either)."""
    body, more = b"", True
    while more and len(body) < length:
        event = await receive()
        if event["type"] != "http.request":
            break
        body += event.get("body") or b""
        more = event.get("more_body", False)
    return body[:length]


def replay(body: bytes, receive):
    """A `receive` that gives the body read already, then the connection's own events."""
    sent = False

    async def again():
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return again


class EngineIOGuard:
    """ASGI middleware around python-socketio's ASGIApp: checks /socket.io/ requests
    first, as socket_guard.EngineIOGuard does for WSGI."""

    def __init__(self, asgi_app, eio, errors: ClientErrors, path: str = "/socket.io/"):
        self.asgi_app, self.eio, self.errors, self.path = asgi_app, eio, errors, path

    async def __call__(self, scope, receive, send):
        if scope["type"] not in ("http", "websocket") or not scope["path"].startswith(self.path):
            return await self.asgi_app(scope, receive, send)
        if scope["type"] == "websocket":
            # past the handshake nothing can be answered in HTTP; frames are checked
            # by guard_websockets
            return await self.websocket(scope, receive, send)
        started = False

        async def tracked(message):
            nonlocal started
            started = True
            await send(message)

        try:
            await self.checked(scope, receive, tracked)
        except Exception as e:
            self.errors.report(client_address({"asgi.scope": scope}),
                               f"Engine.IO request failed: {type(e).__name__}: {e}"[:200])
            if not started:
                await answer(send, 400, "bad Engine.IO request")

    async def websocket(self, scope, receive, send):
        """A websocket for a session that is not open is refused, as the WSGI guard
        refuses it (400 where the ASGI server can answer so)."""
        if not can_deny(scope):
            return await self.asgi_app(scope, receive, send)
        sid = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("sid", [None])[0]
        if sid is not None and socket_guard.live_socket(self.eio, sid) is None:
            await receive()  # the handshake's websocket.connect
            return await answer(send, 400, socket_guard.UNKNOWN_SESSION, "websocket")
        return await self.asgi_app(scope, receive, denying(send))

    async def checked(self, scope, receive, send):
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        sid = query.get("sid", [None])[0]
        if sid is None:
            return await self.asgi_app(scope, receive, send)  # a handshake
        socket = socket_guard.live_socket(self.eio, sid)
        if socket is None:
            return await answer(send, 400, socket_guard.UNKNOWN_SESSION)
        if scope.get("method") == "POST" and not socket.upgraded:
            body = await self.post_body(scope, receive, sid)
            if isinstance(body, tuple):
                self.errors.report(client_address({"asgi.scope": scope}),
                                   f"{body[1]} (answered {body[0]})")
                return await answer(send, *body)
            scope, receive = with_body(scope, body), replay(body, receive)
        return await self.asgi_app(scope, receive, send)

    async def post_body(self, scope, receive, sid: str) -> bytes | tuple[int, str]:
        """The POST body; or (status, why) with the session closed."""
        headers = dict(scope.get("headers") or [])
        raw = headers.get(b"content-length", b"").decode("latin-1")
        length, problem = socket_guard.length_problem(raw, self.eio.max_http_buffer_size)
        if problem:
            await close_session(self.eio, sid)
            return problem
        body = await read_body(receive, length)
        problem = socket_guard.payload_problem(body)
        if problem:
            await close_session(self.eio, sid)
            return 400, problem
        return body


def with_body(scope: dict, body: bytes) -> dict:
    """The scope with a Content-Length that says what was read (Engine.IO reads that)."""
    headers = [(k, v) for k, v in scope.get("headers") or [] if k.lower() != b"content-length"]
    return {**scope, "headers": [*headers, (b"content-length", str(len(body)).encode())]}


def guard_websockets(eio, errors: ClientErrors) -> None:
    """socket_guard.guard_websockets for the ASGI driver's websocket class, whose
    ``wait`` is a coroutine."""
    websocket_class = eio._async["websocket"]

    def guarded(handler, server):
        async def serve(environ):
            client = client_address(environ)
            socket = getattr(handler, "__self__", None)  # Engine.IO's AsyncSocket

            async def checked_handler(ws):
                wait = ws.wait

                async def checked_wait():
                    if socket is not None and socket.closed:
                        return None  # a closed session's websocket ends
                    frame = await wait()
                    problem = socket_guard.frame_refusal(frame, socket)
                    if problem:
                        errors.report(client, f"{problem} (websocket closed)")
                        return None
                    return frame

                ws.wait = checked_wait
                return await handler(ws)

            return await websocket_class(checked_handler, server)(environ)

        return serve

    eio._async = {**eio._async, "websocket": guarded}


def guard_messages(server, errors: ClientErrors, deadline: AuthDeadline) -> None:
    """socket_guard.guard_messages for the AsyncServer: counted, the session closed."""
    on_message = server.eio.handlers["message"]

    async def checked(eio_sid, data):
        try:
            answer = await on_message(eio_sid, data)
            deadline.settle(eio_sid)
            return answer
        except Exception as e:
            environ = server.environ.get(eio_sid) or {}
            errors.report(client_address(environ), socket_guard.message_refusal(e))
            await close_session(server.eio, eio_sid)

    server.eio.on("message", checked)


class AsyncAuthDeadline(AuthDeadline):
    """AuthDeadline whose sweep is a task of the server's event loop."""

    async def sweep(self) -> None:
        while True:
            await self.server.sleep(self.TICK)
            expired, running = self.expire()
            for eio_sid in expired:
                await close_session(self.server.eio, eio_sid)
            if not running:
                return


def wrap(asgi_app, server, logger, auth_timeout: float):
    """The guard around python-socketio's ASGI app, as socket_guard.init_app puts it
    around Flask-SocketIO's WSGI middleware; the deadline started on each handshake."""
    errors = ClientErrors(logger)
    guard_websockets(server.eio, errors)
    deadline = AsyncAuthDeadline(server, auth_timeout)
    guard_messages(server, errors, deadline)
    on_eio_connect = server.eio.handlers["connect"]

    async def opened(eio_sid, environ):
        result = await on_eio_connect(eio_sid, environ)
        deadline.opened(eio_sid)
        return result

    server.eio.on("connect", opened)
    return EngineIOGuard(asgi_app, server.eio, errors)
