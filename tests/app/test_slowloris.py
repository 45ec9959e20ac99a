"""Slowloris against real gunicorn async workers, and against the proxy stages' Nginx in
front of one: /healthz keeps answering, 95% of probes within half a second.

Many connections each send a request header a byte at a time, and the ones the
server closes are opened again, as the attack does. An async worker holds a
waiting connection as a cheap greenlet and gives up on a header that is not
complete within `--keep-alive` seconds (gunicorn's timeout around reading each
request), so none holds more than its share. (A sync worker is held whole by
one such connection until `--timeout`: the stages without a proxy in front of
sync workers are open to it, which is why Nginx, which buffers the header, goes
in front; docs/chat-service.md, "What a stranger can do".) Nginx cuts a header not complete
within `client_header_timeout` (10 s in nginx/*.conf).
"""

from __future__ import annotations

import select
import socket
import statistics
import threading
import time
from contextlib import contextmanager

import pytest
import requests
from conftest import gunicorn_process, nginx_in_front

CONNECTIONS = 600  # below 4 workers x gunicorn's 1,000 worker_connections
SECONDS = 12  # /healthz probed while the attack holds the connections
P95_UNDER = 0.5  # seconds; unprotected, a probe is not answered at all
# A probe opens a new connection: if its SYN meets a full accept queue (the attack
# reopening hundreds of cut connections at once, on a busy box) the kernel resends it
# after 1 s. One such wait is the network's, not a held worker: 2.5 s allows it once.
MAX_UNDER = 2.5
CUT_WITHIN = 20  # then at most this long for the server to cut the last of them
HEAD = b"GET /healthz HTTP/1.1\r\nHost: lab\r\nX-Slow: "


def slow_connection(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.sendall(HEAD[:1])
    return sock


def slowloris(port: int, stop: threading.Event, cut: list[int],
              opened: threading.Event) -> None:
    """Keep CONNECTIONS half-sent headers open, a byte each per second, until stop; a
    connection the server closed (readable: its EOF) is counted and opened again.
    cut: [closed by the server, of them the first CONNECTIONS opened]; `opened` is set
    once all are open."""
    socks = [slow_connection(port) for _ in range(CONNECTIONS)]
    opened.set()
    sent, first = [1] * CONNECTIONS, [True] * CONNECTIONS
    try:
        while not stop.wait(1.0):
            closed = set(select.select(socks, [], [], 0)[0])
            for i, sock in enumerate(socks):
                byte = HEAD[sent[i]:sent[i] + 1] or b"x"
                try:
                    if sock in closed:
                        raise ConnectionResetError
                    sock.sendall(byte)
                    sent[i] += 1
                except OSError:  # the server closed it: open another
                    cut[0] += 1
                    cut[1] += first[i]
                    sock.close()
                    socks[i], sent[i], first[i] = slow_connection(port), 1, False
    finally:
        for sock in socks:
            sock.close()


@contextmanager
def target(kind: str, redis_url: str, tmp_path):
    """The URL of a gunicorn (eventlet), or of stage 5's Nginx in front of one (gevent's,
    or gthread's: `nginx-gthread`)."""
    worker = {"nginx": "gevent", "nginx-gthread": "gthread"}.get(kind, kind)
    args = ["-k", worker, "-w", "4", "--keep-alive", "10", "--no-control-socket",
            *(["--threads", "16"] if worker == "gthread" else [])]
    with gunicorn_process(redis_url, tmp_path, args) as (url, _):
        if not kind.startswith("nginx"):
            yield url
            return
        with nginx_in_front(url, tmp_path) as front:
            yield front


@pytest.mark.slow
# eventlet (stage 3) and stage 5's Nginx in front of gevent: the two ways the stages
# meet it (gevent alone behaves as eventlet: p99 11 ms, 600 cut, when last run). A bare
# gthread worker does not hold: a slow request holds a thread from its first byte, and
# /healthz timed out (5 s) within the first second; Nginx in front, which reads a whole
# request before it passes it on, keeps the slow clients away from the threads.
@pytest.mark.parametrize("kind", ["eventlet", "nginx", "nginx-gthread"])
def test_healthz_keeps_answering_during_slowloris(kind, redis_url, tmp_path):
    with target(kind, redis_url, tmp_path) as url:
        port = int(url.rsplit(":", 1)[1])
        stop, cut, opened = threading.Event(), [0, 0], threading.Event()
        attack = threading.Thread(target=slowloris, args=(port, stop, cut, opened))
        attack.start()
        try:
            # every connection open first: a probe in the middle of 600 connects (a busy
            # box opens them over seconds) meets a full accept queue, a network wait
            opened.wait(30)
            # one probe untimed: on a busy box the first one after the connects waited
            # 2.5-3.2 s (twice, only the first of ~100), the queue still draining
            assert requests.get(url + "/healthz", timeout=5).status_code == 200
            times, deadline = [], time.monotonic() + SECONDS
            while time.monotonic() < deadline:
                started = time.monotonic()
                assert requests.get(url + "/healthz", timeout=5).status_code == 200
                times.append(time.monotonic() - started)
                time.sleep(0.1)
            # the server's 10 s run from when it accepted each connection, which on a busy
            # box is seconds after the attack opened it: wait for the last first one
            deadline += CUT_WITHIN
            while cut[1] < CONNECTIONS and time.monotonic() < deadline:
                time.sleep(0.2)
        finally:
            stop.set()
            attack.join()
    p95 = statistics.quantiles(times, n=20, method="inclusive")[18]
    print(f"\nslowloris ({kind}): {CONNECTIONS} connections, /healthz p95 {p95 * 1000:.0f} ms,"
          f" max {max(times) * 1000:.0f} ms over {len(times)}, {sum(t >= 1 for t in times)}"
          f" of them 1 s or more; {cut[1]} of the first {CONNECTIONS} cut by the server"
          f" ({cut[0]} in all)")
    assert p95 < P95_UNDER, p95
    assert max(times) < MAX_UNDER, max(times)
    assert cut[1] == CONNECTIONS, "the server left slow headers open past its timeout"
