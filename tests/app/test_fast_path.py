"""Stage 7's code path (app/fast_path.py) on a real Redis: each setting does what it says,
and the hardening holds with it on (the contract tests run on both paths: see the `app`
fixtures of test_app_rooms.py, test_app_auth.py, test_app_hardening.py and
test_socketio_events.py)."""

from __future__ import annotations

import pytest
from redis import Redis

from app import fast_path, settings
from tests.conftest import AuthActions, stage_config


@pytest.fixture
def app(make_app):
    return make_app(**stage_config("7"))


def dead_token_requests(user, room):
    """(method, path, json) of every view declared `in_view`, and bad input for each."""
    return [("GET", f"/rooms/{room}/messages", None), ("GET", "/rooms/abc/messages", None),
            ("GET", f"/rooms/{room}/messages?after=0", None),
            ("GET", f"/rooms/{room}/messages?limit=0", None),
            ("POST", f"/rooms/{room}/messages", {"content": "after logout"}),
            ("POST", f"/rooms/{room}/messages", {"content": ""}),
            ("POST", "/rooms/find-or-create", {"friendId": user.id + 1}),
            ("POST", "/rooms/find-or-create", {"friendId": "x"}),
            ("GET", "/users/me", None), ("GET", "/users/friends", None),
            ("GET", f"/users/getUserSecure/{user.email}", None),
            ("GET", "/users/getUserSecure/not-an-email", None)]


def test_a_revoked_token_gets_401_from_every_fused_view_even_for_bad_input(
        client, auth, redis_client, assert_error):
    a, b = auth.user(), auth.user()
    room = auth.friends(a, b)
    assert client.post("/auth/logout", headers=a.headers).status_code == 200
    for method, path, body in dead_token_requests(a, room):
        response = client.open(path, method=method, json=body, headers=a.headers)
        assert "revoked" in assert_error(response, 401)["message"], (method, path)
    assert redis_client.llen(f"room:{room}:messages") == 0  # the script stored nothing


@pytest.mark.parametrize("code_path, commands", [
    ("default", {"hget": 1, "hmget": 1}),  # the token's key, then the user
    ("stage 7", {"hmget": 1})])  # both in one
def test_users_me_asks_redis_once_on_stage_7s_path(make_app, redis_url, code_path, commands):
    app = make_app(**(stage_config("7") if code_path == "stage 7" else {}))
    client = app.test_client()
    user = AuthActions(client).user()
    watcher = Redis.from_url(redis_url, decode_responses=True)
    watcher.config_resetstat()
    assert client.get("/users/me", headers=user.headers).status_code == 200
    calls = {name.removeprefix("cmdstat_"): stat["calls"]
             for name, stat in watcher.info("commandstats").items()}
    watcher.close()
    calls.pop("config|resetstat", None)
    assert calls == commands


def test_a_cached_token_still_expires(app, client, auth, assert_error):
    user = auth.user()
    assert client.get("/users/me", headers=user.headers).status_code == 200  # now cached
    assert user.token in app.extensions["token_cache"]
    app.config["TOKEN_MAX_AGE"] = 0.001
    assert "expired" in assert_error(client.get("/users/me", headers=user.headers),
                                     401)["message"]


def test_orjson_answers_and_refuses_what_the_stdlib_did(app, client, auth, assert_error):
    assert isinstance(app.json, fast_path.OrjsonProvider)
    user = auth.user()
    assert client.get("/users/me", headers=user.headers).get_json()["id"] == user.id
    for body in (b"{not json", b"[" * 5000, b'{"email": NaN}'):
        assert_error(client.post("/auth/login", data=body, content_type="application/json"),
                     400)


def test_no_cookie_session_and_no_engineio_on_api_paths(app, client, auth):
    user = auth.user()
    response = client.get("/users/me", headers=user.headers)
    assert "Set-Cookie" not in response.headers
    assert isinstance(app.wsgi_app, fast_path.SocketIOPathOnly)


@pytest.mark.parametrize("name, value", [("JSON_PROVIDER", "ujson"), ("TOKEN_CACHE_SIZE", -1),
                                         ("TOKEN_CACHE_SIZE", "many")])
def test_bad_stage_7_settings_are_refused(make_app, name, value):
    with pytest.raises(settings.ConfigError, match=name):
        make_app(**{name: value})


def test_every_setting_is_off_by_default():
    assert (settings.DEFAULTS["FUSED_ROUND_TRIPS"], settings.DEFAULTS["TOKEN_CACHE_SIZE"],
            settings.DEFAULTS["JSON_PROVIDER"], settings.DEFAULTS["COOKIE_SESSION"],
            settings.DEFAULTS["ENGINEIO_EVERY_PATH"]) == (False, 0, "stdlib", True, True)
