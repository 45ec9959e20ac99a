"""Register, log in, tokens, and the /users routes."""

from __future__ import annotations

import time

import pytest
from itsdangerous import TimestampSigner, URLSafeTimedSerializer

from app.tokens import TOKEN_SALT


@pytest.fixture
def app(code_path_app):
    """Every test here on both code paths: the default one and stage 7's."""
    return code_path_app

PASSWORD = "correct-horse-battery"  # what conftest's AuthActions registers with


def test_default_password_hash_is_scrypt(make_app, redis_client):
    from app.settings import DEFAULTS
    client = make_app(PASSWORD_HASH_METHOD=DEFAULTS["PASSWORD_HASH_METHOD"]).test_client()
    response = client.post("/auth/register", json={
        "email": "s@example.test", "password": PASSWORD, "username": "s"})
    assert response.status_code == 201
    stored = redis_client.hget(f"user:{response.get_json()['id']}", "password")
    assert stored.startswith("scrypt:")
    assert client.post("/auth/login", json={"email": "s@example.test",
                                            "password": PASSWORD}).status_code == 200


def test_register_returns_public_user(client, redis_client):
    response = client.post("/auth/register", json={
        "email": " Alice@Example.TEST ", "password": PASSWORD, "username": "alice"})
    assert response.status_code == 201
    body = response.get_json()
    assert body == {"id": body["id"], "email": "alice@example.test", "username": "alice"}
    assert isinstance(body["id"], int)
    stored = redis_client.hgetall(f"user:{body['id']}")
    assert stored["password"] != PASSWORD and stored["password"].startswith("pbkdf2:")
    assert redis_client.get("user:email:alice@example.test") == str(body["id"])


def test_register_same_email_conflicts(auth, assert_error):
    assert auth.register("bob@example.test").status_code == 201
    assert_error(auth.register("BOB@example.test"), 409, "conflict")


def test_login_returns_token_and_user(auth):
    auth.register("carol@example.test", username="carol")
    response = auth.login("Carol@example.test")
    assert response.status_code == 200
    body = response.get_json()
    assert set(body) == {"access_token", "user"}
    assert body["user"]["email"] == "carol@example.test"
    assert set(body["user"]) == {"id", "email", "username"}


@pytest.mark.parametrize("email, password", [
    ("dave@example.test", "wrong-password"),
    ("nobody@example.test", PASSWORD),
])
def test_login_bad_credentials(auth, assert_error, email, password):
    auth.register("dave@example.test")
    assert_error(auth.login(email, password), 401, "unauthorized")


def test_users_me(client, auth):
    user = auth.user("erin")
    response = client.get("/users/me", headers=user.headers)
    assert response.status_code == 200
    assert response.get_json() == {"id": user.id, "email": user.email, "username": "erin"}


def test_get_user_secure_is_for_yourself_and_friends(client, auth, assert_error):
    me, other = auth.user(), auth.user("frank")
    url = "/users/getUserSecure/FRANK@example.test"
    # A stranger's email answers like an unknown one: nothing can be enumerated.
    stranger = assert_error(client.get(url, headers=me.headers), 404, "not_found")
    ghost = assert_error(client.get("/users/getUserSecure/ghost@example.test",
                                    headers=me.headers), 404, "not_found")
    assert stranger == ghost
    assert_error(client.get("/users/getUserSecure/not-an-email", headers=me.headers), 404)
    assert client.get(f"/users/getUserSecure/{me.email}", headers=me.headers).get_json()["id"] \
        == me.id
    auth.friends(me, other)
    response = client.get(url, headers=me.headers)
    assert response.status_code == 200
    assert response.get_json() == {"id": other.id, "email": other.email, "username": "frank"}


def test_no_password_or_hash_in_any_response(client, auth, redis_client):
    a, b = auth.user("gina"), auth.user("hank")
    room = auth.friends(a, b)
    hashed = redis_client.hget(f"user:{a.id}", "password")
    responses = [
        auth.register("ivy@example.test"), auth.login(a.email),
        client.get("/users/me", headers=a.headers),
        client.get(f"/users/getUserSecure/{b.email}", headers=a.headers),
        client.get("/users/friends", headers=a.headers),
        client.post("/users/friends", json={"friendId": b.id}, headers=a.headers),
        client.post(f"/rooms/{room}/messages", json={"content": "hi"}, headers=a.headers),
        client.get(f"/rooms/{room}/messages", headers=a.headers),
    ]
    for response in responses:
        text = response.get_data(as_text=True)
        assert PASSWORD not in text and hashed not in text and "password" not in text, text


PROTECTED = [
    ("get", "/users/me", None),
    ("get", "/users/getUserSecure/a@example.test", None),
    ("get", "/users/friends", None),
    ("post", "/users/friends", {"friendId": 1}),
    ("post", "/rooms/find-or-create", {"friendId": 1}),
    ("get", "/rooms/1/messages", None),
    ("post", "/rooms/1/messages", {"content": "hi"}),
]


class TwoDaysAgo(TimestampSigner):
    """Signs with a timestamp two days old (the default max age is one day)."""

    def get_timestamp(self):
        return int(time.time()) - 2 * 24 * 3600


def sign(secret: str, claims: dict, signer=TimestampSigner) -> str:
    return URLSafeTimedSerializer(secret, salt=TOKEN_SALT, signer=signer).dumps(claims)


def test_auth_helper_password_matches(auth):
    assert auth.password == PASSWORD


@pytest.mark.parametrize("method, path, body", PROTECTED)
@pytest.mark.parametrize("case", ["missing", "not-bearer", "garbage", "tampered",
                                  "other-secret", "expired"])
def test_protected_routes_reject_bad_tokens(app, client, assert_error, method, path, body,
                                            case):
    # Tokens are checked before any lookup, so no user needs to exist: a
    # correctly signed token for user 1 is the starting point.
    secret = app.config["SECRET_KEY"]
    token = sign(secret, {"uid": 1, "name": "x", "key": "k"})
    header = {
        "missing": None,
        "not-bearer": f"Basic {token}",
        "garbage": "Bearer not.a.token",
        # Flip one character of the payload: the signature no longer matches.
        "tampered": "Bearer " + ("X" if token[0] != "X" else "Y") + token[1:],
        "other-secret": "Bearer " + sign("another-secret", {"uid": 1, "name": "x", "key": "k"}),
        "expired": "Bearer " + sign(secret, {"uid": 1, "name": "x", "key": "k"},
                                    signer=TwoDaysAgo),
    }[case]
    headers = {"Authorization": header} if header else {}
    response = getattr(client, method)(path, json=body, headers=headers)
    message = assert_error(response, 401, "unauthorized")["message"]
    assert response.headers.get("WWW-Authenticate", "").lower().startswith("bearer")
    if case == "expired":
        assert "expired" in message


def test_token_of_deleted_user_is_401_on_me(client, auth, redis_client, assert_error):
    user = auth.user()
    redis_client.delete(f"user:{user.id}")
    assert_error(client.get("/users/me", headers=user.headers), 401)


def test_valid_signed_token_is_accepted(app, client, auth, redis_client):
    """The control for the test above: the same recipe, unmodified, passes."""
    user = auth.user()
    key = redis_client.hget(f"user:{user.id}", "token_key")
    token = sign(app.config["SECRET_KEY"], {"uid": user.id, "name": user.username, "key": key})
    assert client.get("/users/me", headers={"Authorization": f"Bearer {token}"}).status_code == 200


@pytest.mark.parametrize("claims", [
    {"uid": "1", "name": "x", "key": "k"}, {"uid": True, "name": "x", "key": "k"},
    {"uid": 1.5, "name": "x", "key": "k"}, {"uid": 1, "name": 7, "key": "k"},
    {"uid": 1, "name": "x", "key": 5}, {"uid": 1, "name": "x"}, {"uid": 1},
    [1, 2], "just a string", None, {"uid": [1], "name": "x", "key": "k"},
])
def test_signed_token_with_malformed_claims_is_401(app, client, auth, assert_error, claims):
    auth.user()  # user 1 exists
    token = sign(app.config["SECRET_KEY"], claims)
    assert_error(client.get("/users/me", headers={"Authorization": f"Bearer {token}"}), 401)


def test_login_of_user_without_stored_hash_is_401(auth, redis_client, assert_error):
    response = auth.register("broken@example.test")
    redis_client.hdel(f"user:{response.get_json()['id']}", "password")
    assert_error(auth.login("broken@example.test"), 401)
