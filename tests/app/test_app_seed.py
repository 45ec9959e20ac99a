"""``flask seed-users``: users, mutual friendships, one room per pair, a credentials file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter

import pytest

from app.seed import friend_pairs
from benchmarks.stages import ROOT


@pytest.mark.parametrize("count, friends", [(10, 5), (10, 4), (9, 3), (5, 10), (1, 5), (6, 0)])
def test_friend_pairs_give_each_user_k_friends(count, friends):
    pairs = friend_pairs(count, friends)
    assert all(a < b for a, b in pairs) and len(set(pairs)) == len(pairs)
    degree = Counter(i for pair in pairs for i in pair)
    expected = min(friends, count - 1)
    if friends % 2 and count % 2 and friends < count - 1:
        # odd k on an odd ring: exactly one user is one short
        assert sorted(degree[i] for i in range(count)) == [expected - 1] + [expected] * (count - 1)
    else:
        assert all(degree[i] == expected for i in range(count)), degree


def _check_seeded(redis_client, users, count, friends):
    assert len(users) == count
    assert all(set(u) == {"email", "password", "id", "username"} for u in users)
    assert len({u["id"] for u in users}) == count
    for user in users:
        assert redis_client.get(f"user:email:{user['email']}") == str(user["id"])
        friend_ids = redis_client.smembers(f"user:{user['id']}:friends")
        assert len(friend_ids) == friends
        for friend_id in friend_ids:  # mutual, and their room exists with both members
            assert str(user["id"]) in redis_client.smembers(f"user:{friend_id}:friends")
            lo, hi = sorted((user["id"], int(friend_id)))
            room = redis_client.get(f"room:pair:{lo}:{hi}")
            assert redis_client.smembers(f"room:{room}:members") == {str(lo), str(hi)}


def test_seed_users_command(app, redis_client, tmp_path):
    out = tmp_path / "users.json"
    result = app.test_cli_runner().invoke(args=["seed-users", "--count", "30", "--friends", "4",
                                                "--out", str(out)])
    assert result.exit_code == 0, result.output
    users = json.loads(out.read_text())
    _check_seeded(redis_client, users, 30, 4)
    assert int(redis_client.get("next:room_id")) == 30 * 4 // 2
    assert users[0]["email"] == "user0001@lab.test"

    # Re-runnable: same users (ids), no new rooms; another prefix is a new population.
    again = app.test_cli_runner().invoke(args=["seed-users", "--count", "30", "--friends", "4",
                                               "--out", str(out)])
    assert again.exit_code == 0, again.output
    assert json.loads(out.read_text()) == users
    assert int(redis_client.get("next:room_id")) == 60
    other = tmp_path / "other.json"
    app.test_cli_runner().invoke(args=["seed-users", "--count", "5", "--friends", "2",
                                       "--prefix", "run2-", "--out", str(other)])
    assert {u["id"] for u in json.loads(other.read_text())}.isdisjoint(u["id"] for u in users)


def test_seeded_users_can_log_in_and_chat(app, client, redis_client, tmp_path):
    out = tmp_path / "users.json"
    app.test_cli_runner().invoke(args=["seed-users", "--count", "4", "--friends", "1",
                                       "--out", str(out)])
    a = json.loads(out.read_text())[0]
    login = client.post("/auth/login", json={"email": a["email"], "password": a["password"]})
    assert login.status_code == 200
    headers = {"Authorization": f"Bearer {login.get_json()['access_token']}"}
    friends = client.get("/users/friends", headers=headers).get_json()["friends"]
    assert len(friends) == 1
    room = client.post("/rooms/find-or-create", json={"friendId": friends[0]["id"]},
                       headers=headers).get_json()["roomId"]
    assert client.post(f"/rooms/{room}/messages", json={"content": "hi"},
                       headers=headers).status_code == 201


def test_bad_options(app, tmp_path):
    runner = app.test_cli_runner()
    out = str(tmp_path / "x.json")
    assert runner.invoke(args=["seed-users", "--count", "0", "--out", out]).exit_code != 0
    assert runner.invoke(args=["seed-users", "--prefix", "a b", "--out", out]).exit_code != 0
    assert runner.invoke(args=["seed-users", "--count", "3"]).exit_code != 0  # --out required


def test_flask_cli_finds_the_factory(redis_url, redis_client, tmp_path):
    """The documented command line, as a real process: ``flask --app app seed-users``."""
    out = tmp_path / "cli.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLASK_")}
    env.update(FLASK_REDIS_URL=redis_url, FLASK_SECRET_KEY="cli-test-secret")
    result = subprocess.run(
        [sys.executable, "-m", "flask", "--app", "app", "seed-users", "--count", "200",
         "--friends", "5", "--out", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "seeded 200 users" in result.stdout
    _check_seeded(redis_client, json.loads(out.read_text()), 200, 5)


def test_group_rooms_hold_their_members_and_take_their_messages(app, client, redis_client,
                                                                 tmp_path):
    out = tmp_path / "users.json"
    result = app.test_cli_runner().invoke(args=["seed-users", "--count", "11", "--friends", "0",
                                                "--rooms-of", "4", "--out", str(out)])
    assert result.exit_code == 0, result.output
    users = json.loads(out.read_text())
    rooms = {}
    for user in users:
        rooms.setdefault(user["room"], set()).add(str(user["id"]))
    # 4, 4, then 3: consecutive users, the last room what is left (at least two)
    assert [len(rooms[r]) for r in sorted(rooms)] == [4, 4, 3]
    for room, members in rooms.items():
        assert redis_client.smembers(f"room:{room}:members") == members
    first, stranger = users[0], users[-1]

    def post(user, room):
        token = client.post("/auth/login", json={"email": user["email"],
                                                 "password": user["password"]}
                            ).get_json()["access_token"]
        return client.post(f"/rooms/{room}/messages", json={"content": "hello group"},
                           headers={"Authorization": f"Bearer {token}"}).status_code

    assert post(first, first["room"]) == 201
    assert post(stranger, first["room"]) == 404  # not a member: as if it did not exist


def test_a_room_of_one_is_refused_by_the_option():
    result = subprocess.run([sys.executable, "-m", "flask", "--app", "app", "seed-users",
                             "--count", "3", "--rooms-of", "1", "--out", os.devnull],
                            capture_output=True, text=True, cwd=ROOT, timeout=60,
                            env={**os.environ, "FLASK_DEV_MODE": "1"})
    assert result.returncode == 2 and "--rooms-of" in result.stderr
