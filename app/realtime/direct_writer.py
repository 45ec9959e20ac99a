"""Engine.IO's packets written by whoever sends them: ``FLASK_ENGINEIO_WRITER=direct``.

A work-around for the library's design. python-engineio 4.15.1 serves a websocket with a
writer of its own for every connection (``Socket._websocket_handler`` starts ``writer()``,
a greenlet in gevent mode): ``Socket.send`` puts a packet on the socket's queue, and the
writer, waiting on it (``poll``: ``queue.get(timeout=ping_interval + ping_timeout)``),
writes it. So every connected user holds a waiting greenlet (its stack copy, a page of
Python frames: about 8 KiB here; lab 16) whose only work is a queue's.

Here the socket's queue, once its websocket is served, is a ``DirectQueue``: ``put``
writes the packet at once, in the sender's greenlet, and never waits, since the
websocket's writes never do (app/realtime/inline_websocket.py's ``QueuedWrites``: what a slow
client does not take waits, in order, for a greenlet that lives only while some waits).
So this needs ``WEBSOCKET_READER=handler``. Engine.IO's semantics stay: packets leave in
the order they were sent; the queue's None (``close``, the handler's end) closes the
websocket, after which nothing is written; ``close(wait=True)``'s ``queue.join`` has
nothing left to wait for; a failed write stops every later one, as engineio's writer
stops at one. A connection that starts with polling and upgrades keeps engineio's own
handler and writer (the stages' clients connect over websocket only).
"""

from __future__ import annotations

from engineio.exceptions import SocketIsClosedError, UnknownPacketError
from engineio.packet import Packet

from . import engineio_socket


class DirectQueue:
    """A websocket's packet queue that nobody waits on: ``put`` writes."""

    __slots__ = ("ws",)

    def __init__(self, ws, queued):
        self.ws = ws
        while not queued.empty():  # what was sent before the websocket was served
            self.put(queued.get_nowait())  # (the OPEN packet), in its order
            queued.task_done()

    def put(self, pkt) -> None:
        ws = self.ws
        if ws is None:
            return  # closed, or a write failed: nothing more is written
        try:
            if pkt is None:
                self.ws = None
                ws.close()
            else:
                ws.send(pkt.encode())
        except Exception:  # noqa: BLE001 (engineio's writer stops at any failure)
            self.ws = None

    def join(self) -> None:
        """Every packet put is written, or waiting in its websocket's order."""

    def empty(self) -> bool:
        return True


class DirectWriter:
    """engineio Socket's websocket served with no writer greenlet (a mixin:
    app/realtime/engineio_socket.py)."""

    def _websocket_handler(self, ws):
        # engineio's Socket._websocket_handler for a connection made over websocket, with
        # the queue a DirectQueue in place of the writer task
        if self.connected:
            return super()._websocket_handler(ws)  # an upgrade from polling: engineio's
        self.connected = self.upgraded = True
        self.queue = DirectQueue(ws, self.queue)
        self.server.logger.info("%s: Upgrade to websocket successful", self.sid)
        while True:
            try:
                data = ws.wait()
                if data and len(data) > self.server.max_http_buffer_size:
                    raise ValueError("packet is too large")
            except Exception as e:
                if not self.closed:
                    self.server.logger.info('%s: Unexpected error "%s", closing connection',
                                            self.sid, e)
                break
            if data is None:
                break  # closed by the client
            try:
                self.receive(Packet(encoded_packet=data))
            except UnknownPacketError:
                pass
            except SocketIsClosedError:
                self.server.logger.info("Receive error -- socket is closed")
                break
            except Exception:
                self.server.logger.exception("Unknown receive error")
                break
        self.queue.put(None)
        self.close(wait=False, abort=True, reason=self.server.reason.TRANSPORT_CLOSE)
        return []


def install(eio) -> None:
    """Every websocket of this Engine.IO server is written by its senders."""
    engineio_socket.extend(eio, DirectWriter)
