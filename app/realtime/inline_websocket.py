"""A websocket read in its handler's own greenlet: ``FLASK_WEBSOCKET_READER=handler``.

A work-around for the libraries' design, not a fix of them. python-engineio 4.15.1 in
gevent mode serves a websocket with simple-websocket 1.1.0, which starts a reader of its
own for every connection (``simple_websocket.ws.Base._thread``: a gevent Greenlet made by
engineio/async_drivers/gevent.py's ``Thread``). The reader does the ``recv`` and hands
each message over through an Event to the connection's handler, which does nothing but
wait for it (engineio's ``Socket._websocket_handler`` in ``ws.wait()``). So a connected
user holds two greenlets where one reads, each with its copy of its C stack and a page
of Python frames (about 8 KiB a waiting greenlet here; lab 16), plus the Event.

Here the handler reads: ``wait()`` receives from the socket and parses with wsproto
in the handler's greenlet, with simple-websocket's own event handling (the handshake,
permessage-deflate as it negotiates it, close frames, answering the client's pings, the
size check), so nothing a client sees changes. No reader greenlet, no Event, no selector.

Its writes never wait (``QueuedWrites``): every frame, the handler's pongs and close
replies as well as Engine.IO's packets, goes to the kernel at once when nothing is
waiting before it; what the kernel does not take (a client that reads slowly or not at
all) waits, in order, for a greenlet that writes it while there is some. So neither a
sender (a room's broadcast, gevent's loop running a ping timer) nor anyone else waits for
a slow client. simple-websocket 1.1.0 writes a frame with one ``sock.send``, whose
remainder gevent drops when the kernel takes part of it (``gevent._socketcommon.send``):
under back-pressure its stream can lose bytes mid-frame; here none is lost.

Installed per server (``install``), only in gevent mode: engineio picks its websocket
class from ``server._async['websocket']``, and that module dict is every server's.
"""

from __future__ import annotations

import simple_websocket
from engineio.async_drivers._websocket_wsgi import SimpleWebSocketWSGI
from wsproto.utilities import LocalProtocolError


class _NoReader:
    """simple-websocket starts ``thread_class(target=reader).start()`` for every
    connection and renames it: here nothing starts (one shared object, no greenlet)."""

    name = ""

    def start(self) -> None:
        pass


class _NoSignal:
    """The Event simple-websocket's reader sets for a waiting handler: with no reader,
    no one waits for it (one shared object)."""

    def set(self) -> None:
        pass


NO_READER, NO_SIGNAL = _NoReader(), _NoSignal()


LINGER_S = 5.0  # what a closing websocket's last frames get to reach a slow client


class QueuedWrites:
    """A gevent socket whose ``send`` never waits: the bytes go to the kernel now when
    none wait before them, else after them, written by a greenlet that lives while some
    wait. A write's failure is raised by the next ``send``. ``recv``, ``close``: the
    socket's."""

    __slots__ = ("sock", "waiting", "writer", "failed")

    def __init__(self, sock):
        self.sock, self.waiting, self.writer, self.failed = sock, [], None, None

    def send(self, data) -> int:
        if self.failed is not None:
            raise self.failed
        size = len(data)
        if self.writer is None:
            try:
                sent = self.sock.send(data, 0, timeout=0.0)  # gevent's: 0 waits for nothing
            except BlockingIOError:
                sent = 0
            if sent == size:
                return size
            data = data[sent:]
            from gevent import spawn  # here: the module loads where gevent is not installed
            self.writer = spawn(self._write_waiting)
        self.waiting.append(data)
        return size

    def _write_waiting(self) -> None:
        try:
            while self.waiting:
                data = b"".join(self.waiting)
                self.waiting.clear()
                self.sock.sendall(data)  # this greenlet waits for the client, no one else
        except OSError as e:
            self.failed = e
            self.waiting.clear()
        finally:
            self.writer = None

    def recv(self, size: int) -> bytes:
        return self.sock.recv(size)

    def close(self) -> None:
        """The socket closed once what waits is written, or LINGER_S later at most (a
        client that stopped reading)."""
        writer = self.writer
        if writer is not None:
            writer.join(timeout=LINGER_S)
        self.sock.close()  # ends a writer still waiting (its sendall fails)


class InlineServer(simple_websocket.Server):
    """simple-websocket's server side, its reader's loop run by ``receive`` itself, its
    writes never waiting (``QueuedWrites``, from the handshake's answer on)."""

    def __init__(self, environ, **kwargs):
        super().__init__(environ, **kwargs)
        self.sock = QueuedWrites(self.sock)

    def receive(self, timeout=None):
        # simple_websocket.ws.Base._thread's loop without the ping (engineio passes no
        # ping_interval), one recv at a time, until a whole message is in
        while self.connected and not self.input_buffer:
            try:
                data = self.sock.recv(self.receive_bytes)
                if not data:
                    raise OSError("the peer closed the connection")
                self.ws.receive_data(data)
                self.connected = self._handle_events()
            except (OSError, LocalProtocolError):
                self.connected = False
        if self.input_buffer:
            return self.input_buffer.pop(0)
        raise simple_websocket.ConnectionClosed(self.close_reason, self.close_message)


class InlineWebSocket(SimpleWebSocketWSGI):
    """engineio's websocket (``SimpleWebSocketWSGI``: close, send, wait), on InlineServer."""

    def __call__(self, environ, start_response):
        # SimpleWebSocketWSGI.__call__ with InlineServer for simple_websocket.Server
        self.ws = InlineServer(environ, thread_class=lambda target: NO_READER,
                               event_class=lambda: NO_SIGNAL)
        try:
            ret = self.app(self)
        finally:
            self.ws.sock.close()  # as simple-websocket's reader does when it ends
        if self.ws.mode == "gunicorn":
            raise StopIteration()  # gunicorn writes no response of its own (as engineio)
        if self.ws.mode == "werkzeug":
            raise ConnectionError()
        return ret


def install(eio) -> None:
    """This Engine.IO server's websockets read in their handlers (its own copy of the
    async dict: engineio's module dict stays the library's for every other server)."""
    eio._async = {**eio._async, "websocket": InlineWebSocket}
