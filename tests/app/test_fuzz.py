"""A fuzzer over every endpoint and Socket.IO event: whatever a client sends, no 5xx.

Hypothesis generates bodies (any JSON, the route's own fields with any values,
raw bytes), path parts, tokens and Idempotency-Keys; every answer must be below
500 and, when it is an error, JSON ``{error, message}``. Bounded: a fixed
number of examples per test, no example database, so it runs in seconds and
the same way every time (``derandomize``).
"""

from __future__ import annotations

import json
from collections import Counter
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

FUZZ = settings(max_examples=500, deadline=None, database=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])

# What the module saw, for the closing line (run with -s to read it).
SEEN: Counter = Counter()

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=8)
FIELDS = ["email", "password", "username", "friendId", "content", "roomId", "after",
          "clientId"]
ids = st.integers(min_value=-2, max_value=12) | st.integers().map(str)
# Bodies close to valid ones, so the fuzzer also gets past the first checks.
plausible = st.fixed_dictionaries({}, optional={
    "email": st.emails() | st.text(max_size=30), "password": st.text(max_size=20),
    "username": st.text(max_size=20), "friendId": ids, "content": st.text(max_size=60),
})
bodies = st.one_of(
    json_values.map(lambda v: json.dumps(v).encode()),
    st.dictionaries(st.sampled_from(FIELDS), json_values, max_size=4).map(
        lambda v: json.dumps(v).encode()),
    plausible.map(lambda v: json.dumps(v).encode()),
    st.binary(max_size=200),
)
path_parts = st.text(max_size=30).map(lambda t: quote(t, safe=""))
header_text = st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=255),
                      max_size=140)

ROUTES = [
    ("POST", "/auth/register"), ("POST", "/auth/login"), ("POST", "/auth/logout"),
    ("GET", "/users/me"), ("GET", "/users/getUserSecure/{part}"), ("GET", "/users/friends"),
    ("POST", "/users/friends"), ("GET", "/users/friends/requests"),
    ("POST", "/rooms/find-or-create"), ("GET", "/rooms/{part}/messages"),
    ("GET", "/rooms/{room}/messages?limit={part}&after={part}"),
    ("POST", "/rooms/{part}/messages"), ("POST", "/rooms/{room}/messages"),
    ("GET", "/healthz"), ("GET", "/kv/{part}"),
]


@pytest.fixture
def world(app, auth):
    """A user with a friend and their room, and a client for them."""
    a, b = auth.user("fuzzer"), auth.user("friend")
    return app, a, auth.friends(a, b)


@pytest.fixture(scope="module", autouse=True)
def report():
    yield
    print(f"\nfuzz: {sum(SEEN.values())} requests and events, by status: "
          f"{dict(sorted(SEEN.items(), key=str))}")


def check_error(status: int, body) -> None:
    SEEN[status] += 1
    assert status < 500, body
    if status >= 400:
        assert isinstance(body, dict) and set(body) >= {"error", "message"}, body


@given(route=st.sampled_from(ROUTES), part=path_parts, body=bodies,
       token=st.sampled_from(["mine", "none", "garbage"]),
       key=st.none() | header_text)
@FUZZ
def test_no_endpoint_answers_5xx(world, route, part, body, token, key):
    app, user, room = world
    method, template = route
    path = template.format(part=part, room=room)
    headers = {"Content-Type": "application/json"}
    if token == "mine":
        headers["Authorization"] = f"Bearer {user.token}"
    elif token == "garbage":
        headers["Authorization"] = "Bearer " + part
    if key is not None:
        headers["Idempotency-Key"] = key
    client = app.test_client()
    if route == ("POST", "/auth/logout"):  # keep the token alive for later examples
        headers.pop("Authorization", None)
    response = client.open(path, method=method, data=body if method == "POST" else None,
                           headers=headers)
    check_error(response.status_code,
                response.get_json(silent=True) if response.is_json else response.data)


EVENT_INPUT = {
    "event": st.sampled_from(["joinRoom", "sendMessage"]),
    "payload": st.one_of(json_values,
                         st.dictionaries(st.sampled_from(FIELDS), json_values, max_size=4),
                         st.fixed_dictionaries({}, optional={
                             "roomId": ids, "after": ids, "content": st.text(max_size=60),
                             "clientId": st.text(max_size=20)})),
    "use_room": st.booleans(),
}


@pytest.fixture(scope="module")
def asgi_url(redis_url, tmp_path_factory):
    """The asyncio server, with the SECRET of the apps here (they make the tokens)."""
    from conftest import SECRET, asgi_process

    with asgi_process(redis_url, tmp_path_factory.mktemp("asgi"),
                      env={"FLASK_SECRET_KEY": SECRET}) as (url, _):
        yield url


@pytest.fixture
def asgi_socket(world, asgi_url):
    """One connection of the world's user to the asyncio server, for every example of a
    test (a connection per example would cost more than the example)."""
    from conftest import RealClient

    socket = RealClient(asgi_url, auth={"token": world[1].token})
    yield socket
    socket.disconnect()


@given(**EVENT_INPUT)
@FUZZ
def test_no_socket_event_answers_5xx(world, event, payload, use_room):
    app, user, _ = world
    socket = app.extensions["socketio"].test_client(app, auth={"token": user.token})
    try:
        check_event(socket, world, event, payload, use_room)
    finally:
        socket.disconnect()


@given(**EVENT_INPUT)
@FUZZ
def test_no_socket_event_answers_5xx_on_asyncio(world, asgi_socket, event, payload, use_room):
    assert asgi_socket.is_connected()  # still: no example closed it
    check_event(asgi_socket, world, event, payload, use_room)


def check_event(socket, world, event: str, payload, use_room: bool) -> None:
    """The event's ack: an answer below 500, an error as {error, message}."""
    if use_room and isinstance(payload, dict):
        payload = {**payload, "roomId": world[2]}
    ack = socket.emit(event, payload, callback=True)
    if isinstance(ack, dict) and "error" in ack:
        check_error({"bad_request": 400, "unauthorized": 401, "not_found": 404,
                     "conflict": 409, "payload_too_large": 413}.get(ack["error"], 500), ack)
    else:
        check_error(200, ack)
        assert isinstance(ack, dict) and ("id" in ack or ack.get("ok") is True), ack


# Socket.IO requires the connect payload to be an object (or absent); a bare number
# does not survive python-socketio's own packet encoding, so it is not sent.
connect_auth = st.one_of(
    st.none(), st.dictionaries(st.sampled_from(["token", "auth", ""]), json_values, max_size=3),
    st.fixed_dictionaries({"token": st.one_of(header_text, json_values)}))


@given(auth_value=connect_auth)
@FUZZ
def test_no_socket_connect_crashes(world, auth_value):
    """Any connect `auth` but the user's token is refused, without an exception."""
    app, _, _ = world
    check_refused(app.extensions["socketio"].test_client(app, auth=auth_value))


@given(auth_value=connect_auth)
@FUZZ
def test_no_socket_connect_crashes_on_asyncio(world, asgi_url, auth_value):
    """The same on the asyncio server: refused by Socket.IO, the server still answering
    (RealClient raises for a connection that fails otherwise)."""
    from conftest import RealClient

    check_refused(RealClient(asgi_url, auth=auth_value))


def check_refused(socket) -> None:
    try:
        SEEN["connect refused" if not socket.is_connected() else "connect ok"] += 1
        assert not socket.is_connected()
    finally:
        if socket.is_connected():
            socket.disconnect()


# --- the Engine.IO layer, on a real gunicorn (the `eio_server` fixture) ---------------
# Every packet type and some garbage, on both transports, for open, closed and unknown
# sessions, with and without a Socket.IO connection made with a token: no answer of 5xx,
# none later than 5 s, and a websocket either answers the next frame or is closed.
EIO_FRAMES = [str(i) for i in range(10)] + [
    "", "x", "4{", "40{", '42["sendMessage"', "451-[", "b!!!", "4\x1e9", "99", "-1",
    "2probe", "5", '40{"token":"forged"}']
EIO_CASES = [(s, t) for s in ("open", "closed", "unknown") for t in (True, False)]


def polling_case(server, http, session: str, token: bool, frame: str) -> int:
    """The fuzz frame POSTed to a polling session in the given state; the status."""
    url = server.polling
    if session == "unknown":
        sid = "unknown-session-id"
    else:
        sid = server.handshake(http)
        if token:
            connect = f'40{{"token":"{server.token}"}}'
            assert http.post(f"{url}&sid={sid}", data=connect, timeout=5).status_code == 200
            assert http.get(f"{url}&sid={sid}", timeout=5).text.startswith("40")
        if session == "closed":
            assert http.post(f"{url}&sid={sid}", data=b"1", timeout=5).status_code == 200
    return http.post(f"{url}&sid={sid}", data=frame.encode(), timeout=5).status_code


def websocket_case(server, session: str, token: bool, frame: str) -> str:
    """The fuzz frame on a websocket; what became of it ('answered', 'closed', a status)."""
    import websocket

    url = server.url.replace("http", "ws", 1) + "/socket.io/?EIO=4&transport=websocket"
    if session != "open":  # a websocket for a polling session that is not (any more)
        with requests_session() as http:
            sid = server.handshake(http) if session == "closed" else "unknown-session-id"
            if session == "closed":
                http.post(f"{server.polling}&sid={sid}", data=b"1", timeout=5)
            upgrade = {"Upgrade": "websocket", "Connection": "Upgrade",
                       "Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": "dGhlIHNhbXBsZQ=="}
            url = server.url + f"/socket.io/?EIO=4&transport=websocket&sid={sid}"
            return str(http.get(url, headers=upgrade, timeout=5).status_code)
    ws = websocket.create_connection(url, timeout=5)
    try:
        assert ws.recv().startswith("0")
        if token:
            ws.send(f'40{{"token":"{server.token}"}}')
            assert ws.recv().startswith("40")
        ws.send(frame)
        # A frame that must be answered: an event with an ack id (connected), or a
        # connect with a forged token (not connected).
        ws.send('421["joinRoom",{}]' if token else '40{"token":"forged"}')
        while True:
            reply = ws.recv()
            if not reply:
                return "closed"
            if reply.startswith(("431", "44")):
                return "answered"
    except (websocket.WebSocketConnectionClosedException, ConnectionError):
        return "closed"
    finally:
        ws.shutdown()  # close() skips the socket of a connection the server ended


def requests_session():
    import requests

    return requests.Session()


@pytest.mark.slow
def test_no_engineio_request_answers_5xx_or_hangs(eio_server):
    failures = []
    with requests_session() as http:
        for (session, token), frame in [(c, f) for c in EIO_CASES for f in EIO_FRAMES]:
            status = polling_case(eio_server, http, session, token, frame)
            SEEN[f"engine.io polling {status}"] += 1
            if status >= 500:
                failures.append(("polling", session, token, frame, status))
            outcome = websocket_case(eio_server, session, token, frame)
            SEEN[f"engine.io websocket {outcome}"] += 1
            if outcome not in ("answered", "closed", "400"):
                failures.append(("websocket", session, token, frame, outcome))
    assert not failures, failures
    import requests

    assert requests.get(eio_server.url + "/healthz", timeout=1).status_code == 200
    # No traceback in the server's log but python-socketio's own race: a CONNECT that
    # arrives right after a CLOSE is handled after the session's environ is gone.
    tracebacks = eio_server.log.read_text().split("Traceback")[1:]
    unknown = [t for t in tracebacks if "self.environ[eio_sid]" not in t]
    assert not unknown, unknown[0]
