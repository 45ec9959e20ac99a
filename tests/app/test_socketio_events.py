"""Socket.IO events through Flask-SocketIO's in-process test client, and the same on
the asyncio server (app/asgi.py) over real websockets.

(The test client refuses a message queue, so these apps run without one;
test_socketio_gunicorn.py covers the queue across real worker processes. The
asyncio cases run with it: the HTTP API of the app in this process broadcasts
through Redis to the asyncio server.)
"""

from __future__ import annotations

import gc
import json
import time
from contextlib import contextmanager

import pytest
from conftest import SECRET, RealClient, asgi_process, stage_config
from itsdangerous import TimestampSigner, URLSafeTimedSerializer
from werkzeug.exceptions import HTTPException

from app.tokens import TOKEN_SALT


@pytest.fixture(params=["default", "stage 7", "asyncio"])
def side(request) -> str:
    """Flask-SocketIO on both code paths (the default one and stage 7's), and the
    asyncio server."""
    return request.param


@pytest.fixture
def app(side, make_app):
    app = make_app(**({"SOCKETIO_MESSAGE_QUEUE": True} if side == "asyncio" else
                      stage_config("7") if side == "stage 7" else {}))
    yield app
    queue = app.extensions["socketio"].server.manager
    if getattr(queue, "redis", None) is not None:  # the queue's client (once it published)
        queue.redis.close()


@pytest.fixture(scope="module")
def asgi_url(redis_url, tmp_path_factory):
    """The asyncio server, with this module's SECRET (the apps here make the tokens)."""
    with asgi_process(redis_url, tmp_path_factory.mktemp("asgi"),
                      env={"FLASK_SECRET_KEY": SECRET}) as (url, _):
        yield url


def clients_of(app, side: str, request, url: str | None = None):
    """``make(**kwargs)``: the test client of `app`, or a RealClient of the asyncio
    server (at `url`, else this module's)."""
    if side != "asyncio":
        return lambda **kwargs: app.extensions["socketio"].test_client(app, **kwargs)
    url = url or request.getfixturevalue("asgi_url")
    return lambda **kwargs: RealClient(url, **kwargs)


@pytest.fixture
def connect(app, side, request):
    """``connect(**kwargs)``: a Socket.IO client, disconnected afterwards."""
    clients, new = [], clients_of(app, side, request)

    def make(**kwargs):
        client = new(**kwargs)
        clients.append(client)
        return client

    yield make
    for client in clients:
        if client.is_connected():
            client.disconnect()


@pytest.fixture
def pair(auth):
    """Two friends and their room: (a, b, room_id)."""
    a, b = auth.user("ann"), auth.user("bob")
    return a, b, auth.friends(a, b)


def received(client, name="newMessage", timeout=2.0) -> list:
    """Events of `name` received by `client` (waits a little for late ones)."""
    deadline = time.monotonic() + timeout
    while True:
        events = [e for e in client.get_received() if e["name"] == name]
        if events or time.monotonic() > deadline:
            return [e["args"][0] for e in events]
        time.sleep(0.02)


def test_connect_with_token_in_auth_header_or_query(connect, auth):
    user = auth.user()
    assert connect(auth={"token": user.token}).is_connected()
    assert connect(headers=user.headers).is_connected()
    assert connect(query_string=f"token={user.token}").is_connected()


def _stale_token(app, user_id):
    class TwoDaysAgo(TimestampSigner):
        def get_timestamp(self):
            return int(time.time()) - 2 * 24 * 3600
    return URLSafeTimedSerializer(app.config["SECRET_KEY"], salt=TOKEN_SALT,
                                  signer=TwoDaysAgo).dumps({"uid": user_id, "name": "x",
                                                            "key": "k"})


@pytest.mark.parametrize("how", ["none", "empty-auth", "garbage", "tampered", "expired",
                                 "basic-header"])
def test_connect_without_valid_token_is_refused(app, connect, auth, how):
    user = auth.user()
    kwargs = {
        "none": {},
        "empty-auth": {"auth": {}},
        "garbage": {"auth": {"token": "nope"}},
        "tampered": {"auth": {"token": user.token[:-2] + ("AA" if user.token[-2:] != "AA"
                                                             else "BB")}},
        "expired": {"auth": {"token": _stale_token(app, user.id)}},
        "basic-header": {"headers": {"Authorization": f"Basic {user.token}"}},
    }[how]
    assert not connect(**kwargs).is_connected()


def test_join_room_member(connect, pair):
    a, _, room = pair
    client = connect(auth={"token": a.token})
    ack = client.emit("joinRoom", {"roomId": room}, callback=True)
    assert ack["ok"] is True and ack["roomId"] == room and isinstance(ack["pid"], int)
    # A room id given as a string is accepted too.
    assert client.emit("joinRoom", {"roomId": str(room)}, callback=True)["ok"] is True


def test_join_room_refused(connect, pair, auth):
    _, _, room = pair
    outsider = connect(auth={"token": auth.user("eve").token})
    # Somebody else's room answers like a room that does not exist.
    assert outsider.emit("joinRoom", {"roomId": room}, callback=True) == \
        outsider.emit("joinRoom", {"roomId": 4242}, callback=True)
    assert outsider.emit("joinRoom", {"roomId": 4242}, callback=True)["error"] == "not_found"
    for bad in (None, {}, {"roomId": "x"}, {"roomId": -1}, "text", [room]):
        args = () if bad is None else (bad,)
        ack = outsider.emit("joinRoom", *args, callback=True)
        assert ack["error"] == "bad_request" and ack["message"], (bad, ack)


def test_send_message_is_stored_acked_and_broadcast(connect, pair, auth, redis_client):
    a, b, room = pair
    sender, member = connect(auth={"token": a.token}), connect(auth={"token": b.token})
    outsider = connect(auth={"token": auth.user("eve").token})
    assert sender.emit("joinRoom", {"roomId": room}, callback=True)["ok"]
    assert member.emit("joinRoom", {"roomId": room}, callback=True)["ok"]
    member.get_received()  # start clean

    ack = sender.emit("sendMessage", {"roomId": room, "content": "hello ✓"}, callback=True)
    assert set(ack) == {"id", "ts"} and isinstance(ack["id"], int) and isinstance(ack["ts"], int)
    stored = [json.loads(m) for m in redis_client.lrange(f"room:{room}:messages", 0, -1)]
    assert [m["id"] for m in stored] == [ack["id"]]

    expected = {"id": ack["id"], "roomId": room, "seq": 1, "userId": a.id, "username": "ann",
                "content": "hello ✓", "ts": ack["ts"]}
    assert received(member) == [expected]
    assert received(sender) == [expected]  # the sender's other tabs see it too
    assert received(outsider, timeout=0.3) == []


def test_send_message_defaults_to_last_joined_room(connect, pair, redis_client):
    a, _, room = pair
    client = connect(auth={"token": a.token})
    assert client.emit("sendMessage", {"content": "where?"}, callback=True)["error"] == \
        "bad_request"
    client.emit("joinRoom", {"roomId": room}, callback=True)
    ack = client.emit("sendMessage", {"content": "here"}, callback=True)
    assert "id" in ack
    assert json.loads(redis_client.lindex(f"room:{room}:messages", -1))["content"] == "here"


def test_send_message_errors(app, connect, pair, auth, redis_client):
    a, _, room = pair
    client = connect(auth={"token": a.token})
    outsider = connect(auth={"token": auth.user("eve").token})
    limit = app.config["MESSAGE_MAX_LENGTH"]
    cases = [
        (outsider, {"roomId": room, "content": "hi"}, "not_found"),
        (client, {"roomId": 9999, "content": "hi"}, "not_found"),
        (client, {"roomId": room, "content": ""}, "bad_request"),
        (client, {"roomId": room, "content": "   "}, "bad_request"),
        (client, {"roomId": room, "content": 5}, "bad_request"),
        (client, {"roomId": room}, "bad_request"),
        (client, {"roomId": "abc", "content": "hi"}, "bad_request"),
        (client, {"roomId": room, "content": "x" * (limit + 1)}, "payload_too_large"),
        (client, "just text", "bad_request"),
    ]
    for who, payload, code in cases:
        ack = who.emit("sendMessage", payload, callback=True)
        assert ack.get("error") == code and ack.get("message"), (payload, ack)
    assert redis_client.llen(f"room:{room}:messages") == 0  # nothing acked, nothing stored


def test_http_post_reaches_sockets_in_the_room(client, connect, pair):
    a, b, room = pair
    listener = connect(auth={"token": b.token})
    listener.emit("joinRoom", {"roomId": room}, callback=True)
    response = client.post(f"/rooms/{room}/messages", json={"content": "via http"},
                           headers=a.headers)
    assert response.status_code == 201
    assert [m["content"] for m in received(listener)] == ["via http"]


@contextmanager
def server_for(side, app, request, tmp_path, redis_url: str, **settings):
    """``make(**kwargs)`` for clients of a server with these settings (app's own, or an
    asyncio server started with them)."""
    if side != "asyncio":
        yield clients_of(app, side, request)
        return
    env = {"FLASK_SECRET_KEY": SECRET, **{f"FLASK_{k}": v for k, v in settings.items()}}
    with asgi_process(redis_url, tmp_path, env=env) as (url, _):
        yield clients_of(app, side, request, url)


def test_per_request_mode_works_for_socket_events(make_app, auth, side, request, tmp_path,
                                                  redis_url):
    app = make_app(REDIS_MODE="per-request")
    a, b = auth.user(), auth.user()
    room = auth.friends(a, b)
    with server_for(side, app, request, tmp_path, redis_url, REDIS_MODE="per-request") as new:
        client = new(auth={"token": a.token})
        joined_and_sent(client, room)


def joined_and_sent(client, room: int) -> None:
    try:
        assert client.emit("joinRoom", {"roomId": room}, callback=True)["ok"]
        assert "id" in client.emit("sendMessage", {"content": "hi"}, callback=True)
    finally:
        client.disconnect()


def test_redis_outage_is_an_error_ack_then_recovers(make_app, private_redis, side, request,
                                                    tmp_path):
    app = make_app(redis_url=private_redis.url, SOCKETIO_MESSAGE_QUEUE=False)
    http = app.test_client()
    assert http.post("/auth/register", json={"email": "s@example.test", "username": "s",
                                             "password": "long-enough-pw"}).status_code == 201
    token = http.post("/auth/login", json={"email": "s@example.test",
                                           "password": "long-enough-pw"}).get_json()
    with server_for(side, app, request, tmp_path, private_redis.url) as new:
        client = new(auth={"token": token["access_token"]})
        try:
            private_redis.stop()
            for event, payload in (("joinRoom", {"roomId": 1}),
                                   ("sendMessage", {"roomId": 1, "content": "lost?"})):
                ack = client.emit(event, payload, callback=True)
                assert ack["error"] == "service_unavailable", ack
            assert client.is_connected()
            private_redis.start()
            # Empty Redis after the restart: the room is unknown, but Redis answers.
            assert client.emit("joinRoom", {"roomId": 1}, callback=True)["error"] == "not_found"
        finally:
            client.disconnect()


@pytest.mark.parametrize("headers", [{}, {"Upgrade": "websocket", "Connection": "Upgrade"}],
                         ids=["polling", "websocket"])
def test_an_event_leaves_no_routing_exception_behind(app, side, auth, headers):
    """Flask-SocketIO pushes a request context for /socket.io/ on every event: a rule for the
    path (app/realtime/server.py, route_for_events) leaves no NotFound in it, whose traceback would
    make every event a garbage cycle (one a freeze could keep: app/gc_policy.py)."""
    if side == "asyncio":
        pytest.skip("Flask-SocketIO's request contexts only (the asyncio server pushes none)")
    a, b = auth.user("ann"), auth.user("bob")
    room = auth.friends(a, b)
    client = app.extensions["socketio"].test_client(app, auth={"token": a.token},
                                                    headers=headers)
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        for n in range(20):
            assert "id" in client.emit("sendMessage", {"roomId": room, "content": f"m{n}"},
                                       callback=True)
        gc.collect()
        left = [o for o in gc.garbage if isinstance(o, HTTPException)]
    finally:
        gc.garbage.clear()
        gc.set_debug(0)
        gc.enable()
        client.disconnect()
    assert left == [], left[:3]
