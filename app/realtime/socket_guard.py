"""A guard in front of the Engine.IO endpoint: every request gets a prompt answer.

python-engineio 4.15.1 lets a client with no account hang or break a worker
(upstream: miguelgrinberg/python-engineio #391, python-socketio #302):

* A long-polling POST carrying a packet type a client may not send (``9``,
  ``0``, ``2``, ``6``) makes Engine.IO close the session *and wait* for a GET
  that will never come to drain it: the POST never gets an answer and its
  connection sits in CLOSE-WAIT, holding a descriptor and a greenlet for good.
* The next request for that session raises ``KeyError('Session is
  disconnected')`` in Engine.IO's POST branch: a 500 HTML page.
* A session that never connects to Socket.IO lives until the ping timeout,
  and one that answers pings lives for ever.

* A websocket frame that does not decode (empty, ``x``) raises out of
  Engine.IO's reading loop: the session stays until the ping timeout.

So the guard checks, before Engine.IO sees a request: that a ``sid`` names a
live session (400 otherwise), and that a POST's body is a payload of packets
a client may send, each a Socket.IO packet that decodes (400, and the
session closed without waiting, otherwise; 413 over the size limit); a
websocket frame that does not decode closes that websocket. A
session whose client has not connected to Socket.IO with a valid token within
``SOCKETIO_AUTH_TIMEOUT`` seconds is closed (``AuthDeadline``). Anything
Engine.IO still raises becomes a logged 400, never a 500.

Only what a client may send gets through, at both layers: Engine.IO CLOSE, PONG,
MESSAGE, UPGRADE (and the upgrade's ``2probe``); Socket.IO CONNECT, DISCONNECT,
EVENT, ACK as text. python-socketio raises on the rest (``49``, ``44``,
``461-[]``), a traceback per frame: a stranger could fill a disk in minutes. A
refusal is logged once per client address and interval with a count
(``ClientErrors``), never once per frame.
"""

from __future__ import annotations

import json
import threading
import time
from io import BytesIO
from urllib.parse import parse_qs

from engineio import packet as eio_packet
from engineio import payload as eio_payload
from socketio import packet as sio_packet

from ..errors import error_body

# What Engine.IO's Socket.receive() takes from a client; anything else makes it
# close a polling session and wait (the hang above). On a websocket the upgrade
# starts with a PING ("2probe"), which the websocket handler reads itself.
CLIENT_PACKETS = {eio_packet.CLOSE, eio_packet.PONG, eio_packet.MESSAGE, eio_packet.UPGRADE}
# The Socket.IO packets a client sends to this API: no CONNECT_ERROR (the server's),
# no binary events or acks (the chat has none), nothing past BINARY_ACK.
CLIENT_SIO_PACKETS = {sio_packet.CONNECT, sio_packet.DISCONNECT, sio_packet.EVENT,
                      sio_packet.ACK}


class ClientErrors:
    """What clients sent wrong, logged once per client address and interval with a
    count: a line per bad frame would let one client fill the disk."""

    INTERVAL = 60.0  # seconds
    MAX_CLIENTS = 4096  # addresses remembered; past that, expired ones are forgotten

    def __init__(self, logger, interval: float = INTERVAL):
        self.logger, self.interval = logger, interval
        self.windows: dict[str, list] = {}  # address -> [window start, refusals since]
        self.lock = threading.Lock()  # green under eventlet/gevent

    def report(self, client: str, why: str) -> None:
        now = time.monotonic()
        with self.lock:
            window = self.windows.get(client)
            if window is not None and now - window[0] < self.interval:
                window[1] += 1
                return
            if len(self.windows) >= self.MAX_CLIENTS:
                self.windows = {c: w for c, w in self.windows.items()
                                if now - w[0] < self.interval}
            self.windows[client] = [now, 0]
        more = (f" ({window[1]} more refused in the {self.interval:.0f} s before)"
                if window and window[1] else "")
        self.logger.warning("refused from %s: %s%s; the next %.0f s of refusals from it "
                            "are counted, not logged", client, why, more, self.interval)


def client_address(environ) -> str:
    """The peer's address (behind a proxy, the proxy's: a header can be forged). Under
    ASGI, the scope's: python-engineio's ASGI environ says 127.0.0.1 for everyone."""
    scope = environ.get("asgi.scope")
    if scope is not None:
        return (scope.get("client") or ("unknown",))[0]
    return environ.get("REMOTE_ADDR") or "unknown"


def answer(start_response, status: int, message: str) -> list[bytes]:
    """A JSON ``{error, message}`` answer, as the rest of the app gives."""
    reason = {400: "BAD REQUEST", 413: "REQUEST ENTITY TOO LARGE"}[status]
    body = json.dumps(error_body(status, message)).encode()
    start_response(f"{status} {reason}", [("Content-Type", "application/json"),
                                          ("Content-Length", str(len(body)))])
    return [body]


def close_session(eio, sid: str) -> None:
    """Close an Engine.IO session now, without waiting for a GET to drain it (the
    asyncio server's twin, which awaits the close: socket_guard_asgi.close_session)."""
    socket = eio.sockets.get(sid)
    if socket is not None and not socket.closed:
        socket.close(wait=False, abort=True, reason=eio.reason.TRANSPORT_ERROR)
    eio.sockets.pop(sid, None)


# --- the checks, shared with the asyncio server's guard (app/realtime/socket_guard_asgi.py) ---

UNKNOWN_SESSION = "unknown or closed Engine.IO session"


def live_socket(eio, sid: str):
    """The Engine.IO socket of a session that is open, or None (a closed one forgotten)."""
    socket = eio.sockets.get(sid)
    if socket is None or socket.closed:
        eio.sockets.pop(sid, None)
        return None
    return socket


def length_problem(raw, limit: int) -> tuple[int, tuple[int, str] | None]:
    """A polling POST's Content-Length, and (status, why) when it cannot be taken."""
    try:
        length = int(raw or 0)
    except ValueError:
        length = -1
    if length < 0 or length > limit:
        return length, ((413, "Engine.IO payload too large") if length > 0 else
                        (400, "bad Content-Length"))
    return length, None


def frame_refusal(frame, socket) -> str | None:
    """Why a websocket frame of this Engine.IO socket is refused, or None (None: the
    connection ended)."""
    if frame is None:
        return None
    return frame_problem(frame, socket is not None and not socket.upgraded)


def message_refusal(e: Exception) -> str:
    return f"Socket.IO message refused: {type(e).__name__}: {e}"[:200]


def message_problem(pkt) -> str | None:
    """Why an Engine.IO MESSAGE does not hold a Socket.IO packet the server can take,
    or None. (python-socketio's handlers raise in the background on an event without
    a name, filling the log with tracebacks.)"""
    if pkt.packet_type != eio_packet.MESSAGE:
        return None
    if isinstance(pkt.data, bytes):
        # python-socketio decodes one as a text packet unless it is an attachment
        # of a binary event; the chat's API has no binary events.
        return "binary messages are not part of this API"
    try:
        sio = sio_packet.Packet(encoded_packet=pkt.data or "")
    except Exception:  # ValueError, IndexError, JSON errors...
        return "malformed Socket.IO packet"
    if sio.packet_type not in CLIENT_SIO_PACKETS:
        return f"Socket.IO packet type {sio.packet_type} is not one a client sends"
    named = isinstance(sio.data, list) and sio.data and isinstance(sio.data[0], str)
    if sio.packet_type in (sio_packet.EVENT, sio_packet.BINARY_EVENT) and not named:
        return "a Socket.IO event needs a name"
    return None


def payload_problem(body: bytes) -> str | None:
    """Why a polling POST's body is not something a client may send, or None."""
    try:
        packets = eio_payload.Payload(encoded_payload=body.decode("utf-8")).packets
    except Exception:
        return "malformed Engine.IO payload"
    for pkt in packets:
        if pkt.packet_type not in CLIENT_PACKETS:
            return f"Engine.IO packet type {pkt.packet_type} is not one a client sends"
        problem = message_problem(pkt)
        if problem:
            return problem
    return None


def frame_problem(frame, upgrading: bool = False) -> str | None:
    """Why a websocket frame is not something a client may send, or None (while a
    polling session upgrades, its first frame is the PING "2probe")."""
    try:
        pkt = eio_packet.Packet(encoded_packet=frame)
    except Exception:
        return "malformed Engine.IO packet"
    probe = upgrading and pkt.packet_type == eio_packet.PING and pkt.data == "probe"
    if pkt.packet_type not in CLIENT_PACKETS and not probe:
        return f"Engine.IO packet type {pkt.packet_type} is not one a client sends"
    return message_problem(pkt)


def guard_websockets(eio, errors: ClientErrors) -> None:
    """Wrap Engine.IO's websocket class so that a frame a client may not send ends the
    connection as a client's close would (Engine.IO's reading loop raises on one that
    does not decode, and python-socketio logs a traceback for each packet it refuses)."""
    websocket_class = eio._async["websocket"]
    if websocket_class is None:  # an async mode without websockets
        return

    def guarded(handler, server):
        def serve(environ, start_response):
            client = client_address(environ)
            socket = getattr(handler, "__self__", None)  # Engine.IO's Socket

            def checked_handler(ws):
                wait = ws.wait

                def checked_wait():
                    frame = wait()
                    problem = frame_refusal(frame, socket)
                    if problem:
                        errors.report(client, f"{problem} (websocket closed)")
                        return None
                    return frame

                ws.wait = checked_wait
                return handler(ws)

            return websocket_class(checked_handler, server)(environ, start_response)

        return serve

    eio._async = {**eio._async, "websocket": guarded}


def guard_messages(server, errors: ClientErrors, deadline: AuthDeadline) -> None:
    """Whatever python-socketio still raises on a client's message closes that session
    and is counted, not logged as a traceback per message (Engine.IO's default). A
    message that connected the session takes it off the deadline's list."""
    on_message = server.eio.handlers["message"]

    def checked(eio_sid, data):
        try:
            answer = on_message(eio_sid, data)
            deadline.settle(eio_sid)
            return answer
        except Exception as e:
            environ = server.environ.get(eio_sid) or {}
            errors.report(client_address(environ), message_refusal(e))
            close_session(server.eio, eio_sid)

    server.eio.on("message", checked)


class EngineIOGuard:
    """WSGI middleware around Flask-SocketIO's: checks /socket.io/ requests first."""

    def __init__(self, wsgi_app, eio, errors: ClientErrors, path: str = "/socket.io/"):
        self.wsgi_app, self.eio, self.errors, self.path = wsgi_app, eio, errors, path

    def __call__(self, environ, start_response):
        if not (environ.get("PATH_INFO") or "").startswith(self.path):
            return self.wsgi_app(environ, start_response)
        if (environ.get("HTTP_UPGRADE") or "").lower() == "websocket":
            # Past the upgrade nothing can be answered in HTTP; frames are
            # checked by guard_websockets.
            return self.checked(environ, start_response)
        try:
            return self.checked(environ, start_response)
        except Exception as e:
            self.errors.report(client_address(environ),
                               f"Engine.IO request failed: {type(e).__name__}: {e}"[:200])
            return answer(start_response, 400, "bad Engine.IO request")

    def checked(self, environ, start_response):
        sid = parse_qs(environ.get("QUERY_STRING", "")).get("sid", [None])[0]
        if sid is None:
            return self.wsgi_app(environ, start_response)  # a handshake
        socket = live_socket(self.eio, sid)
        if socket is None:
            return answer(start_response, 400, UNKNOWN_SESSION)
        if environ.get("REQUEST_METHOD") == "POST" and not socket.upgraded:
            body = self.read_body(environ, sid)
            if isinstance(body, tuple):
                self.errors.report(client_address(environ), f"{body[1]} (answered {body[0]})")
                return answer(start_response, *body)
        return self.wsgi_app(environ, start_response)

    def read_body(self, environ, sid: str) -> bytes | tuple[int, str]:
        """The POST body, put back for Engine.IO; or (status, why) with the session closed."""
        length, problem = length_problem(environ.get("CONTENT_LENGTH"),
                                         self.eio.max_http_buffer_size)
        if problem:
            close_session(self.eio, sid)
            return problem
        body = environ["wsgi.input"].read(length)
        problem = payload_problem(body)
        if problem:
            close_session(self.eio, sid)
            return 400, problem
        environ["wsgi.input"], environ["CONTENT_LENGTH"] = BytesIO(body), str(len(body))
        return body


class AuthDeadline:
    """Close Engine.IO sessions that have not connected to Socket.IO in time.

    One background task per server sweeps the pending sessions twice a second
    while there are any, so a flood of handshakes costs one task, not one each.
    """

    TICK = 0.5

    def __init__(self, server, seconds: float, namespace: str = "/"):
        self.server, self.seconds, self.namespace = server, seconds, namespace
        self.pending: dict[str, float] = {}  # eio sid -> deadline (monotonic)
        self.lock = threading.Lock()  # green under eventlet/gevent
        self.running = False

    def opened(self, eio_sid: str) -> None:
        with self.lock:
            self.pending[eio_sid] = time.monotonic() + self.seconds
            if self.running:
                return
            self.running = True
        self.server.start_background_task(self.sweep)

    def settle(self, eio_sid: str) -> None:
        """Off the list once connected, not only when a sweep finds it so: a session that
        connected and then left its namespace (`41`) before the next sweep did connect in
        time (on a half-speed box such a session was closed)."""
        if eio_sid in self.pending and self.connected(eio_sid):
            with self.lock:
                self.pending.pop(eio_sid, None)

    def connected(self, eio_sid: str) -> bool:
        manager = self.server.manager
        sid = manager.sid_from_eio_sid(eio_sid, self.namespace)
        return sid is not None and manager.is_connected(sid, self.namespace)

    def expire(self) -> tuple[list[str], bool]:
        """One sweep's sessions to close, and whether the sweeping goes on (the asyncio
        server's deadline sweeps with the same step: socket_guard_asgi.py)."""
        now, expired = time.monotonic(), []
        with self.lock:
            for eio_sid, deadline in list(self.pending.items()):
                if eio_sid not in self.server.eio.sockets or self.connected(eio_sid):
                    del self.pending[eio_sid]
                elif now >= deadline:
                    del self.pending[eio_sid]
                    expired.append(eio_sid)
            if not self.pending:
                self.running = False
            return expired, self.running

    def sweep(self) -> None:
        while True:
            self.server.sleep(self.TICK)
            expired, running = self.expire()
            for eio_sid in expired:
                close_session(self.server.eio, eio_sid)
            if not running:
                return


def init_app(app, socketio) -> None:
    """Put the guard in front of Flask-SocketIO's middleware; start the deadline."""
    server = socketio.server
    errors = ClientErrors(app.logger)
    app.wsgi_app = EngineIOGuard(app.wsgi_app, server.eio, errors)
    guard_websockets(server.eio, errors)
    deadline = AuthDeadline(server, app.config["SOCKETIO_AUTH_TIMEOUT"])
    guard_messages(server, errors, deadline)
    on_eio_connect = server.eio.handlers["connect"]

    def opened(eio_sid, environ):
        result = on_eio_connect(eio_sid, environ)
        deadline.opened(eio_sid)
        return result

    server.eio.on("connect", opened)
