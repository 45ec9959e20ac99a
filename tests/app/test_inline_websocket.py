"""Stage 10's websocket with fewer greenlets a user (app/inline_websocket.py,
app/ping_timer.py) on a real gunicorn with gunicorn/realtime.conf.py, spoken to frame by
frame (wsproto): what simple-websocket's reader greenlet did for a client and Engine.IO's
ping task did, still done. The Socket.IO tests on this server: stage 10 in
tests/lab/test_realtime_stages.py, and test_engineio_guard.py's and test_fuzz.py's
gevent server (FLASK_WEBSOCKET_READER=handler FLASK_ENGINEIO_PING=timer in the
environment of `pytest -k gevent`, which gunicorn_process passes on).
"""

from __future__ import annotations

import socket
import time
from contextlib import closing
from urllib.parse import urlsplit

import pytest
from conftest import gunicorn_process
from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    CloseConnection,
    Ping,
    Pong,
    Request,
    TextMessage,
)
from wsproto.extensions import PerMessageDeflate

from benchmarks import stages

PATH = "/socket.io/?EIO=4&transport=websocket"


@pytest.fixture(scope="module")
def url(redis_url, tmp_path_factory):
    """Stage 10's server, Engine.IO pinging every second and waiting a second for the pong."""
    env = {"FLASK_SOCKETIO_PING_INTERVAL": "1", "FLASK_SOCKETIO_PING_TIMEOUT": "1",
           "FLASK_SOCKETIO_AUTH_TIMEOUT": "30"}
    with gunicorn_process(redis_url, tmp_path_factory.mktemp("stage-10"),
                          ["-c", stages.get("10").gunicorn_config], env=env) as (u, _):
        yield u


class Client:
    """One websocket to the server, offering permessage-deflate as a browser does."""

    def __init__(self, url: str):
        address = urlsplit(url)
        self.sock = socket.create_connection((address.hostname, address.port), timeout=5)
        self.ws = WSConnection(ConnectionType.CLIENT)
        self.send(Request(host=address.netloc, target=PATH, extensions=[PerMessageDeflate()]))
        self.accepted = self.next(AcceptConnection)
        self.opened = self.next(TextMessage).data  # Engine.IO's OPEN packet

    def close(self) -> None:
        self.sock.close()

    def send(self, event) -> None:
        self.sock.sendall(self.ws.send(event))

    def next(self, kind=object, seconds: float = 5):
        """The next event of `kind` (others are skipped), or None once the peer closed."""
        deadline = time.monotonic() + seconds
        while True:
            for event in self.ws.events():
                if isinstance(event, kind):
                    return event
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            data = self.sock.recv(65536)
            if not data:
                return None
            self.ws.receive_data(data)


@pytest.fixture
def client(url):
    with closing(Client(url)) as c:
        yield c


def test_deflate_pings_and_a_close_handshake(client):
    assert client.opened.startswith("0{")
    assert any(isinstance(e, PerMessageDeflate) for e in client.accepted.extensions)
    client.send(Ping(payload=b"are you there"))
    assert client.next(Pong).payload == b"are you there"  # the websocket layer's answer
    for _ in range(2):  # Engine.IO's ping, again after each pong, a second apart
        started = time.monotonic()
        assert client.next(TextMessage, seconds=3).data == "2"
        assert 0.5 < time.monotonic() - started < 2.5
        client.send(TextMessage(data="3"))
    client.send(CloseConnection(code=1000))
    assert client.next(CloseConnection).code == 1000  # the server's answer
    assert client.sock.recv(1) == b""  # then it closes


def test_a_client_that_does_not_answer_pings_is_closed(client):
    assert client.next(TextMessage, seconds=3).data == "2"
    pinged = time.monotonic()
    # Engine.IO's service task closes it once the pong is a timeout late (1 s here): a
    # close frame (engineio 4.15.1 queues no CLOSE packet there: its send checks the
    # timeout again and finds the socket closing)
    assert client.next(CloseConnection, seconds=5) is not None
    assert time.monotonic() - pinged > 1


def test_a_message_over_the_size_limit_ends_the_websocket(client):
    client.send(TextMessage(data="4" + "x" * 70_000))  # MAX_CONTENT_LENGTH is 64 KiB
    assert client.next(CloseConnection, seconds=5) is not None
