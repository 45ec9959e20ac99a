"""Friends, rooms and messages over HTTP, membership included."""

from __future__ import annotations

import json
import threading

import pytest


@pytest.fixture
def app(code_path_app):
    """Every test here on both code paths: the default one and stage 7's."""
    return code_path_app


def test_friendship_needs_both_sides(client, auth, redis_client):
    a, b = auth.user("amy"), auth.user("ben")
    # Asking is only asking: no friend yet, no email given away, asking again changes nothing.
    for _ in range(2):
        asked = client.post("/users/friends", json={"friendId": b.id}, headers=a.headers)
        assert asked.status_code == 202 and asked.get_json() == {"status": "requested"}
    assert client.get("/users/friends", headers=a.headers).get_json() == {"friends": []}
    assert client.get("/users/friends/requests", headers=a.headers).get_json() == {
        "incoming": [], "outgoing": [{"id": b.id, "username": "ben"}]}
    assert client.get("/users/friends/requests", headers=b.headers).get_json() == {
        "incoming": [{"id": a.id, "username": "amy"}], "outgoing": []}
    # The other side asks back (the id as a string): now both are friends.
    answered = client.post("/users/friends", json={"friendId": str(a.id)}, headers=b.headers)
    assert answered.status_code == 201
    assert answered.get_json() == {"friends": [{"id": a.id, "email": a.email,
                                                "username": "amy"}]}
    # Again, from either side: nothing new.
    for me, other in ((a, b), (b, a)):
        again = client.post("/users/friends", json={"friendId": other.id}, headers=me.headers)
        assert again.status_code == 200
        friends = client.get("/users/friends", headers=me.headers).get_json()
        assert friends == again.get_json() == {"friends": [
            {"id": other.id, "email": other.email, "username": other.username}]}
        assert client.get("/users/friends/requests", headers=me.headers).get_json() == {
            "incoming": [], "outgoing": []}
    assert redis_client.smembers(f"user:{a.id}:friends") == {str(b.id)}


def test_requests_list_no_emails(client, auth):
    a, b, c = auth.user("amy"), auth.user("ben"), auth.user("cat")
    client.post("/users/friends", json={"friendId": a.id}, headers=b.headers)
    client.post("/users/friends", json={"friendId": c.id}, headers=a.headers)
    body = client.get("/users/friends/requests", headers=a.headers)
    assert body.get_json() == {"incoming": [{"id": b.id, "username": "ben"}],
                               "outgoing": [{"id": c.id, "username": "cat"}]}
    assert "@" not in body.get_data(as_text=True)


def test_two_users_asking_at_once_become_friends_once(app, auth, redis_client):
    a, b = auth.user(), auth.user()
    statuses, barrier = [], threading.Barrier(2)

    def ask(me, other):
        barrier.wait(timeout=10)
        statuses.append(app.test_client().post("/users/friends", json={"friendId": other.id},
                                               headers=me.headers).status_code)

    threads = [threading.Thread(target=ask, args=pair) for pair in ((a, b), (b, a))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=20)
    assert sorted(statuses) == [201, 202]
    assert redis_client.smembers(f"user:{a.id}:friends") == {str(b.id)}
    assert redis_client.smembers(f"user:{b.id}:friends") == {str(a.id)}


def test_friends_empty_list(client, auth):
    assert client.get("/users/friends", headers=auth.user().headers).get_json() == {"friends": []}


def test_add_friend_errors(client, auth, assert_error):
    a = auth.user()
    assert_error(client.post("/users/friends", json={"friendId": 9999}, headers=a.headers), 404)
    assert_error(client.post("/users/friends", json={"friendId": a.id}, headers=a.headers), 400)


def test_find_or_create_gives_one_room_per_pair(client, auth, redis_client):
    a, b = auth.user(), auth.user()
    room = auth.friends(a, b)
    assert isinstance(room, int)
    for me, other in ((a, b), (b, a)):
        response = client.post("/rooms/find-or-create", json={"friendId": other.id},
                               headers=me.headers)
        assert response.status_code == 200 and response.get_json() == {"roomId": room}
    assert redis_client.smembers(f"room:{room}:members") == {str(a.id), str(b.id)}


def test_find_or_create_is_race_safe(app, auth, redis_client):
    a, b = auth.user(), auth.user()
    auth.friends(a, b)
    redis_client.delete(f"room:pair:{min(a.id, b.id)}:{max(a.id, b.id)}")  # forget the room
    results, barrier = [], threading.Barrier(8)

    def call(user, other):
        barrier.wait(timeout=10)
        response = app.test_client().post("/rooms/find-or-create", json={"friendId": other.id},
                                          headers=user.headers)
        results.append(response.get_json()["roomId"])

    threads = [threading.Thread(target=call, args=(a, b) if i % 2 else (b, a)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=20)
    assert len(results) == 8 and len(set(results)) == 1


def test_find_or_create_errors(client, auth, assert_error):
    a, stranger = auth.user(), auth.user()
    url = "/rooms/find-or-create"
    # A stranger and nobody answer alike; a pending request does not open a room.
    client.post("/users/friends", json={"friendId": stranger.id}, headers=a.headers)
    assert assert_error(client.post(url, json={"friendId": stranger.id}, headers=a.headers),
                        404) == assert_error(client.post(url, json={"friendId": 424242},
                                                         headers=a.headers), 404)
    assert_error(client.post(url, json={"friendId": a.id}, headers=a.headers), 400)


@pytest.fixture
def room(auth):
    """Two friends and their room: (a, b, room_id)."""
    a, b = auth.user("ann"), auth.user("bob")
    return a, b, auth.friends(a, b)


def test_post_and_read_messages(client, room, redis_client):
    a, b, room_id = room
    ids = []
    for n, sender in enumerate((a, b, a)):
        response = client.post(f"/rooms/{room_id}/messages", json={"content": f"m{n} ✓"},
                                headers=sender.headers)
        assert response.status_code == 201
        body = response.get_json()
        assert set(body) == {"id", "ts"} and isinstance(body["ts"], int)
        ids.append(body["id"])
    assert len(set(ids)) == 3 and ids == sorted(ids)
    # Stored before it was acknowledged.
    stored = [json.loads(m) for m in redis_client.lrange(f"room:{room_id}:messages", 0, -1)]
    assert [m["id"] for m in stored] == ids

    body = client.get(f"/rooms/{room_id}/messages", headers=b.headers).get_json()
    assert body["roomId"] == room_id
    messages = body["messages"]
    assert [m["content"] for m in messages] == ["m0 ✓", "m1 ✓", "m2 ✓"]  # newest last
    assert messages[1] == {"id": ids[1], "roomId": room_id, "seq": 2, "userId": b.id,
                           "username": "bob", "content": "m1 ✓", "ts": messages[1]["ts"]}


def test_message_limit(client, room, redis_client):
    a, _, room_id = room
    for n in range(60):
        client.post(f"/rooms/{room_id}/messages", json={"content": str(n)}, headers=a.headers)
    url = f"/rooms/{room_id}/messages"
    default = client.get(url, headers=a.headers).get_json()["messages"]
    assert len(default) == 50 and default[-1]["content"] == "59"
    three = client.get(url + "?limit=3", headers=a.headers).get_json()["messages"]
    assert [m["content"] for m in three] == ["57", "58", "59"]
    assert len(client.get(url + "?limit=200", headers=a.headers).get_json()["messages"]) == 60


@pytest.mark.parametrize("limit", ["0", "201", "-1", "abc", "1.5", "", "9" * 5000])
def test_bad_limit_is_400(client, room, assert_error, limit):
    a, _, room_id = room
    assert_error(client.get(f"/rooms/{room_id}/messages?limit={limit}", headers=a.headers),
                 400, "bad_request")


def test_history_is_trimmed(make_app, redis_client, auth):
    client = make_app(ROOM_HISTORY_MAX=5).test_client()
    a, b = auth.user(), auth.user()
    room_id = auth.friends(a, b)
    for n in range(8):
        client.post(f"/rooms/{room_id}/messages", json={"content": str(n)}, headers=a.headers)
    assert redis_client.llen(f"room:{room_id}:messages") == 5


def test_non_member_cannot_read_or_write(client, room, auth, assert_error, redis_client):
    _, _, room_id = room
    outsider = auth.user("eve")
    url = f"/rooms/{room_id}/messages"
    # Like a room that does not exist: room ids cannot be probed.
    assert_error(client.get(url, headers=outsider.headers), 404, "not_found")
    assert_error(client.get(url + "?after=0", headers=outsider.headers), 404, "not_found")
    assert_error(client.post(url, json={"content": "hi"}, headers=outsider.headers),
                 404, "not_found")
    assert redis_client.llen(f"room:{room_id}:messages") == 0


@pytest.mark.parametrize("room_path", ["9999", "abc", "0", "-1", "1.0"])
def test_unknown_room_is_404(client, room, assert_error, room_path):
    a, _, _ = room
    url = f"/rooms/{room_path}/messages"
    assert_error(client.get(url, headers=a.headers), 404, "not_found")
    assert_error(client.post(url, json={"content": "hi"}, headers=a.headers), 404, "not_found")


def test_message_too_long_is_413(client, room, app, assert_error, redis_client):
    a, _, room_id = room
    limit = app.config["MESSAGE_MAX_LENGTH"]
    url = f"/rooms/{room_id}/messages"
    assert client.post(url, json={"content": "x" * limit}, headers=a.headers).status_code == 201
    assert_error(client.post(url, json={"content": "x" * (limit + 1)}, headers=a.headers),
                 413, "payload_too_large")
    assert redis_client.llen(f"room:{room_id}:messages") == 1
