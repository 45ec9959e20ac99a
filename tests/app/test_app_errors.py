"""Bad input of every kind gets a JSON 4xx, never a 500; the same answer under either
JSON provider (stdlib, orjson): every test here runs under both."""

from __future__ import annotations

import json

import pytest


@pytest.fixture
def app(contract_app):
    return contract_app

# Every route that reads a JSON body, with a valid body for it. "{room}" and
# "{friend}" are filled in per test.
JSON_ROUTES = {
    "register": ("/auth/register", {"email": "new@example.test", "password": "long-enough-pw",
                                    "username": "new"}),
    "login": ("/auth/login", {"email": "x@example.test", "password": "whatever-pw"}),
    "add-friend": ("/users/friends", {"friendId": "{friend}"}),
    "find-or-create": ("/rooms/find-or-create", {"friendId": "{friend}"}),
    "post-message": ("/rooms/{room}/messages", {"content": "hello"}),
}


@pytest.fixture
def world(auth):
    """A user with a friend and their room; returns a function that fills placeholders."""
    a, b = auth.user(), auth.user()
    room = auth.friends(a, b)

    def fill(route):
        path, body = JSON_ROUTES[route]
        body = {k: (b.id if v == "{friend}" else v) for k, v in body.items()}
        return path.replace("{room}", str(room)), body, a.headers
    return fill


def _without(body, field):
    return {k: v for k, v in body.items() if k != field}


@pytest.mark.parametrize("route", JSON_ROUTES)
@pytest.mark.parametrize("raw", [b"", b"{", b"not json", b"\xff\xfe", b"[1, 2]", b'"text"',
                                 b"null", b"42",
                                 pytest.param(b"[" * 30000, id="deep-array"),
                                 pytest.param(b'{"a":' * 10000, id="deep-object")])
def test_malformed_or_non_object_body_is_400(client, world, assert_error, route, raw):
    path, _, headers = world(route)
    response = client.post(path, data=raw, headers={**headers,
                                                    "Content-Type": "application/json"})
    assert_error(response, 400, "bad_request")


@pytest.mark.parametrize("route", JSON_ROUTES)
def test_missing_fields_are_400(client, world, assert_error, route):
    path, body, headers = world(route)
    for field in body:
        body_without = _without(body, field)
        message = assert_error(client.post(path, json=body_without, headers=headers),
                               400, "bad_request")["message"]
        assert field in message


@pytest.mark.parametrize("route", JSON_ROUTES)
@pytest.mark.parametrize("bad", [123, 1.5, True, ["x"], {"x": 1}, None])
def test_wrong_types_are_400(client, world, assert_error, route, bad):
    path, body, headers = world(route)
    for field in body:
        if isinstance(bad, int) and not isinstance(bad, bool) and field == "friendId":
            continue  # an int is the right type there (an unknown id is a 404)
        response = client.post(path, json={**body, field: bad}, headers=headers)
        assert_error(response, 400, "bad_request")


@pytest.mark.parametrize("route, field, value", [
    ("register", "email", "not-an-email"),
    ("register", "email", "a@b"),
    ("register", "email", "two@@example.test"),
    ("register", "email", "sp ace@example.test"),
    ("register", "email", "x" * 250 + "@example.test"),
    ("register", "email", "   "),
    ("register", "username", ""),
    ("register", "username", "   "),
    ("register", "username", "u" * 65),
    ("register", "password", "short"),
    ("register", "password", "p" * 257),
    ("register", "password", "\ud800lone-surrogate"),
    ("login", "email", "not-an-email"),
    ("login", "password", ""),
    ("add-friend", "friendId", 0),
    ("add-friend", "friendId", -3),
    ("add-friend", "friendId", "abc"),
    ("add-friend", "friendId", "1e3"),
    ("find-or-create", "friendId", "9" * 40),
    ("post-message", "content", ""),
    ("post-message", "content", "  \n\t "),
    ("post-message", "content", "\udfff"),
])
def test_bad_values_are_400(client, world, assert_error, route, field, value):
    path, body, headers = world(route)
    raw = json.dumps({**body, field: value})  # stdlib's: orjson writes no lone surrogate
    assert_error(client.post(path, data=raw, content_type="application/json",
                             headers=headers), 400, "bad_request")


@pytest.mark.parametrize("route", JSON_ROUTES)
def test_oversized_body_is_413(client, world, app, assert_error, route):
    path, body, headers = world(route)
    filler = "x" * (app.config["MAX_CONTENT_LENGTH"] + 1)
    response = client.post(path, json={**body, "filler": filler}, headers=headers)
    assert_error(response, 413, "payload_too_large")


@pytest.mark.parametrize("route", JSON_ROUTES)
@pytest.mark.parametrize("content_type", [None, "text/plain", "image/png",
                                          "application/x-www-form-urlencoded",
                                          "application/json; charset=utf-16"])
def test_a_json_body_needs_its_content_type(client, world, assert_error, route,
                                            content_type):
    """415 before anything is read, whatever the provider (stdlib's json once took any)."""
    path, body, headers = world(route)
    headers = {**headers, **({"Content-Type": content_type} if content_type else {})}
    response = client.post(path, data=json.dumps(body).encode(), headers=headers)
    assert_error(response, 415, "unsupported_media_type")


@pytest.mark.parametrize("route", JSON_ROUTES)
@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-32", "utf-8-sig"])
def test_a_json_body_is_utf8_without_a_byte_order_mark(client, world, assert_error, route,
                                                       encoding):
    """A UTF-16 body with its BOM was stored (201) under stdlib, refused under orjson."""
    path, body, headers = world(route)
    response = client.post(path, data=json.dumps(body).encode(encoding),
                           headers={**headers, "Content-Type": "application/json"})
    assert_error(response, 400, "bad_request")


@pytest.mark.parametrize("raw", [b'{"content": NaN}', b'{"content": Infinity}',
                                 b'{"content": "x", "n": 1e999}'])
def test_what_is_not_json_is_400_under_either_provider(client, world, assert_error, raw):
    path, _, headers = world("post-message")
    response = client.post(path, data=raw, headers={**headers,
                                                    "Content-Type": "application/json"})
    assert_error(response, 400, "bad_request")


@pytest.mark.parametrize("route", ["add-friend", "find-or-create"])
@pytest.mark.parametrize("friend", [2**63, 2**64, 10**30, -(2**64)])
def test_an_id_out_of_range_is_400_and_spends_no_attempt(app, client, world, assert_error,
                                                          redis_client, route, friend):
    """stdlib's json parses 10**30 (once a 404 that spent a failed attempt), orjson
    refuses it: 400 either way, and the attempt counters stay as they were."""
    path, _, headers = world(route)
    before = sorted(redis_client.scan_iter("LIMITS*"))
    response = client.post(path, data=f'{{"friendId": {friend}}}'.encode(),
                           headers={**headers, "Content-Type": "application/json"})
    assert_error(response, 400, "bad_request")
    assert sorted(redis_client.scan_iter("LIMITS*")) == before
    ok = client.post(path, json={"friendId": 2**63 - 1}, headers=headers)  # in range:
    assert_error(ok, 404, "not_found")  # an unknown id, as before
    if route == "add-friend":  # which spends one: the counters above are the right ones
        assert sorted(redis_client.scan_iter("LIMITS*")) != before


@pytest.mark.parametrize("path", ["/", "/nope", "/users", "/rooms/1", "/auth", "/kv/"])
def test_unknown_route_is_json_404(client, assert_error, path):
    assert_error(client.get(path), 404, "not_found")


@pytest.mark.parametrize("method, path", [
    ("get", "/auth/register"), ("get", "/auth/login"), ("delete", "/users/me"),
    ("put", "/users/friends"), ("get", "/rooms/find-or-create"),
    ("delete", "/rooms/1/messages"), ("post", "/healthz"), ("post", "/kv/a"),
])
def test_wrong_method_is_json_405(client, assert_error, method, path):
    response = getattr(client, method)(path)
    assert_error(response, 405, "method_not_allowed")
    assert response.headers.get("Allow")
