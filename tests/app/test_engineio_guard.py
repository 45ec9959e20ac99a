"""The Engine.IO guard (app/socket_guard.py) on real gunicorn, eventlet and gevent.

The issue's reproduction first: a polling session, a POST of packet type 9
(python-engineio 4.15.1 never answered it), then a POST for the session it
closed (500 there). Then the deadline for sessions that never connect, and a
flood of such sessions while /healthz is timed and the worker's descriptors
are counted (the worker is this test's own process, never the machine's).
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor

import psutil
import pytest
import requests

# Sessions in the flood; the figure is 2,000 (FTL_FLOOD_SESSIONS=2000).
FLOOD = int(os.environ.get("FTL_FLOOD_SESSIONS", "300"))


def json_error(response, status: int) -> dict:
    assert response.status_code == status, (response.status_code, response.text)
    assert response.headers["Content-Type"] == "application/json", response.text
    body = response.json()
    assert set(body) == {"error", "message"}, body
    return body


def test_unknown_packet_answers_400_at_once_and_closes_the_session(eio_server):
    with requests.Session() as http:
        sid = eio_server.handshake(http)
        started = time.monotonic()
        bad = http.post(f"{eio_server.polling}&sid={sid}", data=b"9", timeout=5)
        assert time.monotonic() - started < 2
        assert "packet type 9" in json_error(bad, 400)["message"]
        for method in ("POST", "GET"):
            again = http.request(method, f"{eio_server.polling}&sid={sid}", data=b"",
                                 timeout=5)
            assert "closed" in json_error(again, 400)["message"]


@pytest.mark.parametrize("body", [b"x", b"4{", b"40{", b"\xff\xfe", b"2probe", b"6",
                                  b"0", b"4\x1e9"])
def test_malformed_payloads_answer_400(eio_server, body):
    with requests.Session() as http:
        sid = eio_server.handshake(http)
        response = http.post(f"{eio_server.polling}&sid={sid}", data=body, timeout=5)
        json_error(response, 400)


def test_oversize_payload_answers_413(eio_server):
    with requests.Session() as http:
        sid = eio_server.handshake(http)
        response = http.post(f"{eio_server.polling}&sid={sid}", data=b"4" + b"x" * 70_000,
                             timeout=5)
        json_error(response, 413)


def test_a_session_that_never_connects_is_closed(eio_server):
    """FLASK_SOCKETIO_AUTH_TIMEOUT=1 here: gone within 1 s and a sweep (0.5 s)."""
    with requests.Session() as http:
        sid = eio_server.handshake(http)
        refused = http.post(f"{eio_server.polling}&sid={sid}", data=b'40{"token":"forged"}',
                            timeout=5)
        assert refused.status_code == 200  # the refusal comes as a CONNECT_ERROR packet
        time.sleep(2)
        # a new connection: gunicorn closes an idle one after its 2 s keep-alive
        json_error(requests.get(f"{eio_server.polling}&sid={sid}", timeout=5), 400)


def test_a_session_connected_with_a_token_stays(eio_server):
    with requests.Session() as http:
        sid = eio_server.handshake(http)
        connect = f'40{{"token":"{eio_server.token}"}}'.encode()
        assert http.post(f"{eio_server.polling}&sid={sid}", data=connect,
                         timeout=5).status_code == 200
        time.sleep(2)
        answer = requests.get(f"{eio_server.polling}&sid={sid}", timeout=5)
        assert answer.status_code == 200 and answer.text.startswith("40"), answer.text


def worker_fds(proc) -> int:
    """Descriptors held by this test's gunicorn worker(s)."""
    return sum(child.num_fds() for child in psutil.Process(proc.pid).children())


def attack(polling: str) -> list[int]:
    """The issue's pattern once: handshake, a POST of packet 9, an empty POST."""
    with requests.Session() as http:
        first = http.get(polling, timeout=5)
        sid = first.text[1:].split('"sid":"')[1].split('"')[0]
        return [first.status_code,
                http.post(f"{polling}&sid={sid}", data=b"9", timeout=5).status_code,
                http.post(f"{polling}&sid={sid}", data=b"", timeout=5).status_code]


@pytest.mark.slow
def test_a_flood_of_bad_sessions_leaves_the_worker_answering(eio_server):
    idle = worker_fds(eio_server.proc)
    health, stop = [], time.monotonic() + 600

    def watch():
        while time.monotonic() < stop:
            started = time.monotonic()
            assert requests.get(eio_server.url + "/healthz", timeout=5).status_code == 200
            health.append(time.monotonic() - started)
            time.sleep(0.1)

    with ThreadPoolExecutor(51) as pool:
        watcher = pool.submit(watch)
        answers = list(pool.map(lambda _: attack(eio_server.polling), range(FLOOD)))
        stop = 0
        watcher.result()
    assert all(a == [200, 400, 400] for a in answers), {tuple(a) for a in answers}
    assert health and max(health) < 1.0, f"/healthz max {max(health):.2f} s"
    deadline = time.monotonic() + 10
    while worker_fds(eio_server.proc) > idle + 5 and time.monotonic() < deadline:
        time.sleep(0.5)
    after = worker_fds(eio_server.proc)
    print(f"\nflood ({eio_server.worker}): {FLOOD} sessions, /healthz max "
          f"{max(health) * 1000:.0f} ms over {len(health)}; worker descriptors {idle} idle, "
          f"{after} after")
    assert after <= idle + 5, (idle, after)


def test_polling_is_refused_where_the_setting_leaves_it_out(redis_url, tmp_path):
    """The default (the stages' clients): websocket only."""
    from conftest import gunicorn

    with gunicorn(redis_url, tmp_path, ["-k", "gevent", "-w", "1", "--no-control-socket"]) \
            as url:
        response = requests.get(f"{url}/socket.io/?EIO=4&transport=polling", timeout=5)
        assert response.status_code == 400 and "transport" in response.text
