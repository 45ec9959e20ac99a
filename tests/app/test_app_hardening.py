"""Issue 10's hardening, end to end through the app on a real Redis.

Tokens that die with what they name, a 503 for every "cannot serve now"
answer of Redis, retries that store once, catching up after a gap, attempt
limits, constant-time login, and input that is refused.
"""

from __future__ import annotations

import statistics
import time
from collections import Counter

import pytest
import redis

from app.health import KV_TTL


@pytest.fixture
def app(code_path_app):
    """Every test here on both code paths: the default one and stage 7's."""
    return code_path_app

PASSWORD = "correct-horse-battery"  # what conftest's AuthActions registers with


# --- tokens --------------------------------------------------------------------

def test_logout_revokes_every_token_of_the_user(client, auth, assert_error):
    user = auth.user()
    second = auth.login(user.email).get_json()["access_token"]  # another device
    assert client.post("/auth/logout", headers=user.headers).get_json() == {
        "status": "logged out"}
    for token in (user.token, second):
        message = assert_error(client.get("/users/me",
                                          headers={"Authorization": f"Bearer {token}"}),
                               401)["message"]
        assert "revoked" in message
    fresh = auth.login(user.email).get_json()["access_token"]
    assert client.get("/users/me", headers={"Authorization": f"Bearer {fresh}"}).status_code \
        == 200


def test_old_token_after_flushall_does_not_act_as_the_next_user(client, auth, redis_client,
                                                                 assert_error):
    x = auth.user("xavier")
    redis_client.flushall()
    y = auth.user("yvonne")
    assert y.id == x.id  # the same sequential id, another person
    assert_error(client.get("/users/me", headers=x.headers), 401)
    assert client.get("/users/me", headers=y.headers).get_json()["username"] == "yvonne"


def test_deleted_user_cannot_post(client, auth, redis_client, assert_error):
    a, b = auth.user(), auth.user()
    room = auth.friends(a, b)
    redis_client.delete(f"user:{a.id}")
    assert_error(client.post(f"/rooms/{room}/messages", json={"content": "ghost"},
                             headers=a.headers), 401)
    assert redis_client.llen(f"room:{room}:messages") == 0


def test_logout_also_stops_an_open_socket(app, auth, client):
    a, b = auth.user(), auth.user()
    room = auth.friends(a, b)
    socket = app.extensions["socketio"].test_client(app, auth={"token": a.token})
    try:
        assert socket.emit("joinRoom", {"roomId": room}, callback=True)["ok"]
        client.post("/auth/logout", headers=a.headers)
        for event, payload in (("joinRoom", {"roomId": room}),
                               ("sendMessage", {"roomId": room, "content": "after logout"})):
            assert socket.emit(event, payload, callback=True)["error"] == "unauthorized"
    finally:
        socket.disconnect()


# --- 503 that means it -------------------------------------------------------

@pytest.fixture
def full_redis(make_app, private_redis):
    """(app, client, user headers, room, direct client) on a Redis then filled up."""
    app = make_app(redis_url=private_redis.url)
    client = app.test_client()
    direct = redis.Redis.from_url(private_redis.url, decode_responses=True)
    from conftest import AuthActions
    auth = AuthActions(client)
    a, b = auth.user(), auth.user()
    room = auth.friends(a, b)
    direct.config_set("maxmemory-policy", "noeviction")
    direct.config_set("maxmemory", 1)  # any write that needs memory is refused (OOM)
    yield app, client, a, room, direct
    direct.config_set("maxmemory", 0)
    direct.close()


def test_out_of_memory_is_503_everywhere_and_healthz_says_so(full_redis, assert_error):
    app, client, a, room, direct = full_redis
    calls = [
        client.post("/auth/register", json={"email": "new@example.test", "username": "new",
                                            "password": PASSWORD}),
        client.post(f"/rooms/{room}/messages", json={"content": "no room"}, headers=a.headers),
        client.get("/kv/oom"),
        client.get("/healthz"),
    ]
    for response in calls:
        assert "out of memory" in assert_error(response, 503, "service_unavailable")["message"]
    assert client.get("/healthz").get_json()["status"] == "unavailable"
    # Reads still work: nothing else is refused.
    assert client.get(f"/rooms/{room}/messages", headers=a.headers).status_code == 200
    socket = app.extensions["socketio"].test_client(app, auth={"token": a.token})
    try:
        ack = socket.emit("sendMessage", {"roomId": room, "content": "oom"}, callback=True)
        assert ack["error"] == "service_unavailable" and "out of memory" in ack["message"]
    finally:
        socket.disconnect()
    direct.config_set("maxmemory", 0)
    assert client.get("/healthz").status_code == 200


def test_read_only_replica_is_503(make_app, private_redis, assert_error):
    client = make_app(redis_url=private_redis.url).test_client()
    direct = redis.Redis.from_url(private_redis.url, decode_responses=True)
    try:
        direct.replicaof("127.0.0.1", 9)  # a master that never answers: read-only meanwhile
        body = assert_error(client.get("/healthz"), 503, "service_unavailable")
        assert "read-only" in body["message"]
        assert "read-only" in assert_error(client.get("/kv/x"), 503)["message"]
    finally:
        direct.replicaof("NO", "ONE")
        direct.close()
    assert client.get("/healthz").status_code == 200


# --- retries store once --------------------------------------------------------

def test_idempotency_key_stores_once(client, auth, redis_client, assert_error):
    a, b = auth.user(), auth.user()
    room = auth.friends(a, b)
    url = f"/rooms/{room}/messages"
    headers = {**a.headers, "Idempotency-Key": "msg-1"}
    first = client.post(url, json={"content": "once"}, headers=headers)
    again = client.post(url, json={"content": "once"}, headers=headers)
    assert first.status_code == again.status_code == 201
    assert first.get_json() == again.get_json()
    assert redis_client.llen(f"room:{room}:messages") == 1
    # The same key for another message is a client bug: 409, nothing stored.
    assert_error(client.post(url, json={"content": "other"}, headers=headers), 409)
    # Keys are per user: b may use the same one.
    assert client.post(url, json={"content": "once"},
                       headers={**b.headers, "Idempotency-Key": "msg-1"}).status_code == 201
    assert redis_client.llen(f"room:{room}:messages") == 2
    assert 0 < redis_client.ttl(f"idem:{a.id}:msg-1") <= 3600
    for bad in ("", " spaced key", "x" * 129, "ünïcode"):
        response = client.post(url, json={"content": "k"},
                               headers={**a.headers, "Idempotency-Key": bad})
        assert_error(response, 400)


def test_client_id_stores_once_over_socketio(app, auth, redis_client):
    a, b = auth.user(), auth.user()
    room = auth.friends(a, b)
    socket = app.extensions["socketio"].test_client(app, auth={"token": a.token})
    try:
        payload = {"roomId": room, "content": "hi", "clientId": "c-1"}
        first = socket.emit("sendMessage", payload, callback=True)
        again = socket.emit("sendMessage", payload, callback=True)
        assert "id" in first and first == again
        assert socket.emit("sendMessage", {**payload, "clientId": 7},
                           callback=True)["error"] == "bad_request"
    finally:
        socket.disconnect()
    assert redis_client.llen(f"room:{room}:messages") == 1


def test_retry_after_a_timeout_stores_once(make_app, private_redis):
    """Writes paused past the read timeout: the post is answered 503; whether it ran
    or not (with CLIENT PAUSE, Redis drops the command of a client that hung up; with
    the issue's SIGSTOP it runs on resume: see test_durability.py), the retry with the
    same key leaves exactly one copy."""
    app = make_app(redis_url=private_redis.url, REDIS_SOCKET_TIMEOUT=0.5)
    client = app.test_client()
    from conftest import AuthActions
    auth = AuthActions(client)
    a, b = auth.user(), auth.user()
    room = auth.friends(a, b)
    url, headers = f"/rooms/{room}/messages", {**a.headers, "Idempotency-Key": "paused-1"}
    assert client.post(url, json={"content": "first"}, headers=a.headers).status_code == 201
    direct = redis.Redis.from_url(private_redis.url, decode_responses=True)
    # Reads (the token check) go on; the storing script waits 1.5 s, longer than the timeout.
    direct.execute_command("CLIENT", "PAUSE", 1500, "WRITE")
    response = client.post(url, json={"content": "maybe"}, headers=headers)
    assert response.status_code == 503
    assert "may or may not" in response.get_json()["message"]
    time.sleep(1.7)
    retry = client.post(url, json={"content": "maybe"}, headers=headers)
    assert retry.status_code == 201
    assert direct.llen(f"room:{room}:messages") == 2  # "first" and one "maybe"
    again = client.post(url, json={"content": "maybe"}, headers=headers)
    assert again.get_json() == retry.get_json()
    assert direct.llen(f"room:{room}:messages") == 2
    direct.close()


# --- catching up -----------------------------------------------------------------

def test_catch_up_after_a_message_id(client, auth, app):
    a, b = auth.user(), auth.user()
    room = auth.friends(a, b)
    url = f"/rooms/{room}/messages"
    ids = [client.post(url, json={"content": str(n)}, headers=a.headers).get_json()["id"]
           for n in range(250)]
    after = client.get(f"{url}?after={ids[9]}&limit=5", headers=b.headers).get_json()
    assert [m["id"] for m in after["messages"]] == ids[10:15]
    assert [m["seq"] for m in after["messages"]] == [11, 12, 13, 14, 15]
    assert client.get(f"{url}?after={ids[-1]}", headers=b.headers).get_json()["messages"] == []
    assert [m["id"] for m in client.get(f"{url}?after=0&limit=2", headers=b.headers)
            .get_json()["messages"]] == ids[:2]

    socket = app.extensions["socketio"].test_client(app, auth={"token": b.token})
    try:
        ack = socket.emit("joinRoom", {"roomId": room, "after": ids[20]}, callback=True)
        assert [m["id"] for m in ack["missed"]] == ids[21:221]  # up to 200 per ack
        ack = socket.emit("joinRoom", {"roomId": room, "after": ack["missed"][-1]["id"]},
                          callback=True)
        assert [m["id"] for m in ack["missed"]] == ids[221:]
        assert "missed" not in socket.emit("joinRoom", {"roomId": room}, callback=True)
        assert socket.emit("joinRoom", {"roomId": room, "after": "x"},
                           callback=True)["error"] == "bad_request"
    finally:
        socket.disconnect()


# --- log-in and sign-up --------------------------------------------------------------

def login_from(client, address: str, email: str, password: str = "wrong-password"):
    return client.post("/auth/login", json={"email": email, "password": password},
                       environ_base={"REMOTE_ADDR": address})


def test_failed_logins_slow_down_the_guessing_address_only(make_app, assert_error):
    client = make_app(LOGIN_FAILURES_PER_ACCOUNT_AND_ADDRESS="3 per minute").test_client()
    from conftest import AuthActions
    user = AuthActions(client).user()
    for _ in range(3):
        assert_error(login_from(client, "203.0.113.9", user.email), 401)
    blocked = login_from(client, "203.0.113.9", user.email, PASSWORD)  # even the right one
    body = assert_error(blocked, 429, "too_many_requests")
    assert "too many attempts" in body["message"] and int(blocked.headers["Retry-After"]) > 0
    assert login_from(client, "198.51.100.2", user.email, PASSWORD).status_code == 200


def test_the_account_wide_limit_spares_addresses_that_never_failed(make_app, assert_error):
    client = make_app(LOGIN_FAILURES_PER_ACCOUNT="3 per minute").test_client()
    from conftest import AuthActions
    user = AuthActions(client).user()
    for n in range(3):  # a guesser with three addresses spends the account's tries
        assert_error(login_from(client, f"203.0.113.{n}", user.email), 401)
    assert_error(login_from(client, "203.0.113.0", user.email), 429)
    assert_error(login_from(client, "203.0.113.7", user.email), 401)  # a fresh one: once
    assert_error(login_from(client, "203.0.113.7", user.email, PASSWORD), 429)
    assert login_from(client, "198.51.100.2", user.email, PASSWORD).status_code == 200


def test_the_owner_logs_in_while_a_stranger_hammers_the_account(app):
    """The issue's case with the default limits: 1,000 wrong logins for the owner's
    email from one address, the owner logging in from another every 100 of them."""
    client = app.test_client()
    from conftest import AuthActions
    user = AuthActions(client).user()
    seen, owner = Counter(), []
    for n in range(1000):
        seen[login_from(client, "203.0.113.9", user.email).status_code] += 1
        if n % 100 == 99:
            owner.append(login_from(client, "198.51.100.2", user.email, PASSWORD).status_code)
    assert seen == {401: 10, 429: 990}, seen
    assert owner == [200] * 10


def test_every_answer_that_tells_something_counts_per_address(make_app, assert_error):
    """A failed login, a sign-up for a registered email (409), a friend request for an
    unknown id (404): one budget per address."""
    client = make_app(FAILED_ATTEMPTS_PER_ADDRESS="4 per minute").test_client()
    from conftest import AuthActions
    auth = AuthActions(client)
    user = auth.user()
    assert_error(auth.login("nobody1@example.test", "whatever-pw"), 401)
    assert_error(auth.register(user.email), 409)
    assert_error(auth.register(user.email), 409)
    assert_error(client.post("/users/friends", json={"friendId": 999_999},
                             headers=user.headers), 404)
    assert_error(auth.login("nobody2@example.test", "whatever-pw"), 429)
    assert_error(auth.register("fresh@example.test"), 429)
    assert_error(client.post("/users/friends", json={"friendId": 999_999},
                             headers=user.headers), 429)
    other = client.post("/auth/register", environ_base={"REMOTE_ADDR": "198.51.100.2"},
                        json={"email": "fresh@example.test", "username": "f",
                              "password": PASSWORD})
    assert other.status_code == 201  # another address is not affected


def test_sign_ups_are_limited_per_address(make_app, assert_error):
    client = make_app(REGISTER_LIMIT_PER_ADDRESS="2 per minute").test_client()
    from conftest import AuthActions
    auth = AuthActions(client)
    assert auth.register("r1@example.test").status_code == 201
    assert auth.register("r2@example.test").status_code == 201
    assert_error(auth.register("r3@example.test"), 429, "too_many_requests")


def test_the_labs_login_burst_never_meets_the_default_limits(client, redis_client):
    """The lab seeds a few hundred users and logs them all in from one address within
    seconds; successful logins never count, and sign-ups stay far below their limit."""
    from app.seed import seed_users
    users = seed_users(redis_client, 300, 2, hash_method="pbkdf2:sha256:1000")
    statuses = {client.post("/auth/login", json={"email": u["email"],
                                                 "password": u["password"]}).status_code
                for u in users}
    assert statuses == {200}


def test_login_costs_the_same_for_unknown_and_known_emails(make_app):
    """The dummy hash uses the method in force (here a slow pbkdf2), so an unknown email
    takes as long as a wrong password. Timed in this thread's CPU seconds (the test
    client serves in the caller's thread), interleaved: wall time on a shared box
    once read 93 ms against 41 ms for the same work."""
    method = "pbkdf2:sha256:200000"
    client = make_app(PASSWORD_HASH_METHOD=method).test_client()
    client.post("/auth/register", json={"email": "known@example.test", "username": "k",
                                        "password": PASSWORD})
    times = {"known@example.test": [], "unknown@example.test": []}
    for _ in range(5):
        for email, spent in times.items():
            started = time.thread_time()
            response = client.post("/auth/login", json={"email": email, "password": "wrong-pw!"})
            spent.append((time.thread_time() - started) * 1000)
            assert response.status_code == 401
    known, unknown = (statistics.median(spent) for spent in times.values())
    # Before the fix the lab's setting gave 6.4 ms against 169 ms (a factor of 26).
    assert 0.5 < unknown / known < 2, (known, unknown)


# --- input ------------------------------------------------------------------------

@pytest.mark.parametrize("field, value", [
    ("email", "nul\x00@example.test"), ("email", "esc\x1b@example.test"),
    ("username", "bell\x07"), ("username", "line\nbreak"), ("username", "nul\x00"),
    ("username", "c1\x85control"), ("username", "del\x7f"),
])
def test_control_characters_are_refused_at_sign_up(client, assert_error, field, value):
    body = {"email": "ctl@example.test", "username": "ctl", "password": PASSWORD, field: value}
    assert "control" in assert_error(client.post("/auth/register", json=body),
                                     400)["message"] or field == "email"


def test_control_characters_in_content(client, auth, assert_error, redis_client):
    a, b = auth.user(), auth.user()
    room = auth.friends(a, b)
    url = f"/rooms/{room}/messages"
    for bad in ("nul\x00", "esc\x1b[31m", "\x7f", "c1\x9b"):
        assert_error(client.post(url, json={"content": bad}, headers=a.headers), 400)
    # Line breaks and tabs are text.
    assert client.post(url, json={"content": "two\nlines\twith tab\r\n"},
                       headers=a.headers).status_code == 201
    assert redis_client.llen(f"room:{room}:messages") == 1


def test_kv_values_expire(client, redis_client):
    assert client.get("/kv/expiring").status_code == 200
    assert 0 < redis_client.ttl("kv:expiring") <= KV_TTL


def test_a_stranger_reaches_no_email(client, auth):
    """The issue's probe: a stranger asks everybody for friendship, looks every email
    up and tries every room and every friends route. Not one other email comes back."""
    users = [auth.user(f"member{n}") for n in range(12)]
    for a, b in zip(users, users[1:], strict=False):
        auth.friends(a, b)
    stranger = auth.user("stranger")
    answers = []
    for user in users:
        for call in (
            lambda u: client.post("/users/friends", json={"friendId": u.id},
                                  headers=stranger.headers),
            lambda u: client.get(f"/users/getUserSecure/{u.email}", headers=stranger.headers),
            lambda u: client.post("/rooms/find-or-create", json={"friendId": u.id},
                                  headers=stranger.headers),
        ):
            answers.append(call(user))
    for room in range(1, 20):
        answers.append(client.get(f"/rooms/{room}/messages", headers=stranger.headers))
        answers.append(client.get(f"/rooms/{room}/messages?after=0", headers=stranger.headers))
    answers += [client.get("/users/friends", headers=stranger.headers),
                client.get("/users/friends/requests", headers=stranger.headers),
                client.get("/users/me", headers=stranger.headers)]
    text = "\n".join(r.get_data(as_text=True) for r in answers)
    reached = [u.email for u in users if u.email in text]
    print(f"\nemails reachable by a stranger: {len(reached)} of {len(users)} "
          f"({len(answers)} requests)")
    assert reached == []
    # The control: a friend does see the email.
    assert users[0].email in client.get(f"/users/getUserSecure/{users[0].email}",
                                        headers=users[1].headers).get_data(as_text=True)
