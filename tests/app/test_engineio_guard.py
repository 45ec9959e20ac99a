"""The Engine.IO guard (app/realtime/socket_guard.py) on real gunicorn, eventlet and gevent.

The issue's reproduction first: a polling session, a POST of packet type 9
(python-engineio 4.15.1 never answered it), then a POST for the session it
closed (500 there). Then the deadline for sessions that never connect, and a
flood of such sessions while /healthz is timed and the worker's descriptors
are counted (the worker is this test's own process, never the machine's).

Then every Socket.IO packet type (0-9) and binary frames, in bursts, on both
transports: what a client may send is taken, the rest answers 400 or closes the
websocket, and the server's log grows by a line or two at most, never by a
traceback per frame (python-socketio's answer to `49`, `44`, `461-[]`).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import psutil
import pytest
import requests
import websocket

from app.realtime.socket_guard import ClientErrors

# Sessions in the flood; the issue's figure is 2,000 (FTL_FLOOD_SESSIONS=2000).
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


def test_a_session_that_connected_and_left_its_namespace_stays(eio_server):
    """It connected in time: the deadline leaves it, even when it left its namespace
    (`41`) before a sweep saw it connected (twice a second: on a half-speed box the
    packet-type test's `41` burst met that)."""
    port = eio_server.url.rsplit(":", 1)[1]
    ws = websocket.create_connection(
        f"ws://127.0.0.1:{port}/socket.io/?EIO=4&transport=websocket", timeout=5)
    try:
        assert ws.recv().startswith("0")
        ws.send(f'40{{"token":"{eio_server.token}"}}')
        ws.send("41")  # at once: no sweep between the two
        assert ws.recv().startswith('40{"sid"')
        time.sleep(2)  # past the 1 s deadline and two sweeps
        assert still_open(ws)
    finally:
        close(ws)


def worker_fds(proc) -> int:
    """Descriptors held by this test's gunicorn worker(s)."""
    return sum(child.num_fds() for child in psutil.Process(proc.pid).children())


def attack(polling: str) -> tuple[list[int], float]:
    """The issue's pattern once: handshake, a POST of packet 9, an empty POST. Their
    statuses, and the seconds the slowest of the three took."""
    times = []

    def timed(send, *args, **kwargs):
        started = time.monotonic()
        response = send(*args, timeout=5, **kwargs)
        times.append(time.monotonic() - started)
        return response

    with requests.Session() as http:
        first = timed(http.get, polling)
        sid = first.text[1:].split('"sid":"')[1].split('"')[0]
        return [first.status_code,
                timed(http.post, f"{polling}&sid={sid}", data=b"9").status_code,
                timed(http.post, f"{polling}&sid={sid}", data=b"").status_code], max(times)


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
        attacks = list(pool.map(lambda _: attack(eio_server.polling), range(FLOOD)))
        stop = 0
        watcher.result()
    answers, flood_slowest = [a for a, _ in attacks], max(t for _, t in attacks)
    assert all(a == [200, 400, 400] for a in answers), {tuple(a) for a in answers}
    # /healthz waits behind the flood's requests for the worker like any request (gthread:
    # 50 at once for 16 threads), as long as they wait, a time that follows the box's
    # speed (1.1-1.3 s on a half-speed box beside the suite); what a stuck worker would
    # show is /healthz slower than the flood itself. Under 1 s is fine whatever the flood.
    assert health and max(health) < max(1.0, 1.5 * flood_slowest), (
        f"/healthz max {max(health):.2f} s, the flood's slowest request {flood_slowest:.2f} s")
    deadline = time.monotonic() + 10
    while worker_fds(eio_server.proc) > idle + 5 and time.monotonic() < deadline:
        time.sleep(0.5)
    after = worker_fds(eio_server.proc)
    print(f"\nflood ({eio_server.worker}): {FLOOD} sessions, its slowest request "
          f"{flood_slowest * 1000:.0f} ms, /healthz max {max(health) * 1000:.0f} ms over "
          f"{len(health)}; worker descriptors {idle} idle, {after} after")
    assert after <= idle + 5, (idle, after)


def test_polling_is_refused_where_the_setting_leaves_it_out(redis_url, tmp_path):
    """The default (the stages' clients): websocket only."""
    from conftest import gunicorn

    with gunicorn(redis_url, tmp_path, ["-k", "gevent", "-w", "1", "--no-control-socket"]) \
            as url:
        response = requests.get(f"{url}/socket.io/?EIO=4&transport=polling", timeout=5)
        assert response.status_code == 400 and "transport" in response.text


# A packet of each Socket.IO type as a client would frame it; 0-3 are a client's,
# 4 (CONNECT_ERROR) the server's, 5-6 binary (the chat has none), 7-9 none at all.
FRAMES = {0: "40", 1: "41", 2: '42["noSuchEvent"]', 3: "431[]", 4: '44{"message":"x"}',
          5: '451-["sendMessage",{"_placeholder":true,"num":0}]',
          6: '461-1[{"_placeholder":true,"num":0}]', 7: "47", 8: "48", 9: "49"}
CLIENT_TYPES = {0, 1, 2, 3}
BURST = 200  # frames per case: a traceback each would be thousands of lines
PAYLOAD_MOST = 16  # packets Engine.IO decodes from one polling POST


def log_mark(server) -> int:
    return server.log.stat().st_size


def log_since(server, mark: int) -> list[str]:
    """The lines the server logged since `mark` (a case's answer is its sync point; a
    line written later still meets test_the_log_holds_no_traceback)."""
    with server.log.open("rb") as log:
        log.seek(mark)
        return log.read().decode(errors="replace").splitlines()


def assert_quiet(server, mark: int, most: int = 2) -> None:
    lines = log_since(server, mark)
    assert not any("Traceback" in line for line in lines), "\n".join(lines[:40])
    assert len(lines) <= most, "\n".join(lines[:40])


def connected_websocket(server) -> websocket.WebSocket:
    """A websocket session connected to Socket.IO with the user's token (so no
    deadline closes it: only the guard can)."""
    port = server.url.rsplit(":", 1)[1]
    ws = websocket.create_connection(
        f"ws://127.0.0.1:{port}/socket.io/?EIO=4&transport=websocket", timeout=5)
    assert ws.recv().startswith("0")
    ws.send(f'40{{"token":"{server.token}"}}')
    assert ws.recv().startswith('40{"sid"')
    return ws


def close(ws: websocket.WebSocket) -> None:
    """Close a websocket, its socket too (websocket-client leaves that open when the
    server closed first)."""
    try:
        ws.close(timeout=1)
    except (websocket.WebSocketException, OSError):
        pass
    finally:
        ws.shutdown()


def still_open(ws: websocket.WebSocket) -> bool:
    """Engine.IO answers an UPGRADE on an open websocket with a NOOP (6); a closed one
    ends (frames already queued, such as CONNECT_ERRORs, are skipped)."""
    deadline = time.monotonic() + 10
    try:
        ws.send("5")
        while time.monotonic() < deadline:
            frame = ws.recv()
            if frame == "6":
                return True
            if not frame:
                return False
    except (websocket.WebSocketException, OSError):
        return False
    raise AssertionError("the server kept sending frames, never the NOOP")


@pytest.mark.parametrize("kind", [*FRAMES, "binary"])
def test_every_socketio_packet_type_over_a_websocket(eio_server, kind):
    mark = log_mark(eio_server)
    ws = connected_websocket(eio_server)
    try:
        for _ in range(BURST):
            if kind == "binary":
                ws.send_binary(b"\x04binary")
            else:
                ws.send(FRAMES[kind])
    except (websocket.WebSocketException, OSError):
        pass  # closed under the burst
    try:
        assert still_open(ws) == (kind in CLIENT_TYPES)
    finally:
        close(ws)
    assert_quiet(eio_server, mark)


@pytest.mark.parametrize("kind", [*FRAMES, "binary"])
def test_every_socketio_packet_type_over_polling(eio_server, kind):
    mark = log_mark(eio_server)
    frame = "bBGJpbmFyeQ==" if kind == "binary" else FRAMES[kind]  # base64 of b"\x04binary"
    with requests.Session() as http:
        sid = eio_server.handshake(http)
        url = f"{eio_server.polling}&sid={sid}"
        connect = f'40{{"token":"{eio_server.token}"}}'.encode()
        assert http.post(url, data=connect, timeout=5).status_code == 200
        burst = "\x1e".join([frame] * PAYLOAD_MOST).encode()
        response = http.post(url, data=burst, timeout=5)
        if kind in CLIENT_TYPES:
            assert response.status_code == 200, response.text
        else:
            json_error(response, 400)
            json_error(http.get(url, timeout=5), 400)  # the session is gone
    assert_quiet(eio_server, mark)


def flood_49(port: str, eio_server) -> None:
    ws = websocket.create_connection(
        f"ws://127.0.0.1:{port}/socket.io/?EIO=4&transport=websocket", timeout=5)
    ws.recv()
    try:
        for _ in range(5000):
            ws.send("49")
    except (websocket.WebSocketException, OSError):
        pass  # the guard closed it at the first
    close(ws)
    with requests.Session() as http:
        for _ in range(100):
            sid = eio_server.handshake(http)
            posted = http.post(f"{eio_server.polling}&sid={sid}", timeout=5,
                               data="\x1e".join(["49"] * PAYLOAD_MOST).encode())
            json_error(posted, 400)


def test_the_issues_reproduction_adds_few_lines_and_health_answers(eio_server):
    """5,000 frames of `49` on a websocket with no token (once a traceback each), and
    100 polling sessions POSTing 16 each, while /healthz is timed."""
    mark, health, done = log_mark(eio_server), [], threading.Event()

    def watch():
        while not done.is_set() or len(health) < 5:
            started = time.monotonic()
            assert requests.get(eio_server.url + "/healthz", timeout=5).status_code == 200
            health.append(time.monotonic() - started)
            time.sleep(0.05)

    port = eio_server.url.rsplit(":", 1)[1]
    with ThreadPoolExecutor(1) as pool:
        watcher = pool.submit(watch)
        try:
            flood_49(port, eio_server)
        finally:
            done.set()  # a failed answer above must not leave the watcher polling for ever
        watcher.result()
    assert_quiet(eio_server, mark, most=10)
    assert max(health) < 1.0, f"/healthz max {max(health):.2f} s"


def test_a_polling_session_still_upgrades_to_a_websocket(eio_server):
    """The upgrade's first frame is a PING ("2probe"), which the guard lets through only
    then; a browser's client starts this way."""
    import socketio

    mark, sio = log_mark(eio_server), socketio.Client(reconnection=False)
    try:
        sio.connect(eio_server.url, auth={"token": eio_server.token},
                    transports=["polling", "websocket"], wait_timeout=5)
        deadline = time.monotonic() + 5
        while sio.transport() != "websocket" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sio.transport() == "websocket"
        assert sio.call("joinRoom", {"roomId": 999999}, timeout=5)["error"] == "not_found"
    finally:
        sio.disconnect()
    lines = log_since(eio_server, mark)  # eventlet's worker notes the closed socket
    assert not [line for line in lines if "refused" in line or "Traceback" in line], lines


def test_client_errors_are_logged_once_per_interval_with_a_count():
    """In-process: 5,000 refusals from one address are one line, the next interval's
    first line says how many were not logged; another address has its own line."""
    logger = logging.getLogger("test.client_errors")
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append
    logger.addHandler(handler)
    try:
        errors = ClientErrors(logger, interval=60)
        for _ in range(5000):
            errors.report("192.0.2.1", "Socket.IO packet type 9 is not one a client sends")
        errors.report("192.0.2.2", "malformed Engine.IO packet")
        assert len(records) == 2
        errors.windows["192.0.2.1"][0] -= 61  # the interval has passed
        errors.report("192.0.2.1", "malformed Engine.IO packet")
        assert len(records) == 3 and "4999 more refused" in records[-1].getMessage()
    finally:
        logger.removeHandler(handler)


def test_the_log_holds_no_traceback(eio_server):
    """After every case above, on this server: nothing a client sent left a traceback."""
    time.sleep(0.5)  # handlers that ran in the background
    lines = log_since(eio_server, 0)
    assert not [line for line in lines if "Traceback" in line], "\n".join(lines[-40:])
