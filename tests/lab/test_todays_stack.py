"""Stage 8's server (gunicorn/today.conf.py) on a real gunicorn 27: each response goes
out in one send, headers and body together, where gunicorn's gevent worker as it comes
(gunicorn/gevent.conf.py) sends them apart; the answers are the same."""

from __future__ import annotations

import socket
import struct

import pytest
from conftest import gunicorn_process

REQUESTS = 40
# struct tcp_info (linux/tcp.h): tcpi_segs_in, the segments this socket received
SEGS_IN = 140


def segments_in(sock: socket.socket) -> int:
    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
    return struct.unpack_from("I", info, SEGS_IN)[0]


def read_response(sock: socket.socket) -> bytes:
    """One keep-alive response: its headers, then Content-Length bytes of body."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length")))
    while len(body) < length:
        body += sock.recv(65536)
    return head.split(b"\r\n", 1)[0] + b"\r\n\r\n" + body


def segments_per_response(url: str) -> tuple[float, set[bytes]]:
    """Segments the client received per response over one keep-alive connection, and
    the distinct answers (status line and body)."""
    host, port = url.removeprefix("http://").split(":")
    request = f"GET /healthz HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(request)
        answers = {read_response(sock)}  # the first, once the connection is set up
        before = segments_in(sock)
        for _ in range(REQUESTS):
            sock.sendall(request)
            answers.add(read_response(sock))
        return (segments_in(sock) - before) / REQUESTS, answers


@pytest.mark.parametrize("config, most, least", [
    ("gunicorn/today.conf.py", 1.2, 0.9),  # one segment: headers and body in one send
    ("gunicorn/gevent.conf.py", 2.2, 1.8),  # two: the headers, then the body
])
def test_stage_8_sends_each_response_in_one_piece(config, most, least, redis_url, tmp_path):
    args = ["-c", config, "-w", "1", "--no-control-socket", "--graceful-timeout", "3"]
    with gunicorn_process(redis_url, tmp_path, args) as (url, _):
        per_response, answers = segments_per_response(url)
    assert least <= per_response <= most, per_response
    assert len(answers) == 1 and next(iter(answers)).startswith(b"HTTP/1.1 200 OK")
    log = (tmp_path / "gunicorn.log").read_text()
    assert "one send per response: not on gunicorn" not in log
