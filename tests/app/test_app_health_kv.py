"""/healthz and the book's /kv benchmark endpoint."""

from __future__ import annotations

import time


def test_healthz_ok(client):
    response = client.get("/healthz")
    assert response.status_code == 200
    body = response.get_json()
    assert body["status"] == "ok"
    assert "pid" not in body  # nothing about the process to a stranger
    assert body["redisMode"] == "pool" and body["asyncMode"] == "threading"


def test_healthz_needs_no_token_and_ignores_a_bad_one(client):
    assert client.get("/healthz", headers={"Authorization": "Bearer junk"}).status_code == 200


def test_kv_sets_then_gets_the_time(client, redis_client):
    before = time.time()
    response = client.get("/kv/some-key")
    assert response.status_code == 200
    body = response.get_json()
    assert body["key"] == "some-key"
    assert before <= float(body["value"]) <= time.time()
    assert redis_client.get("kv:some-key") == body["value"]  # namespaced key
    assert redis_client.get("some-key") is None


def test_kv_key_length_is_capped(client, app, assert_error):
    limit = app.config["KV_KEY_MAX_LENGTH"]
    assert client.get("/kv/" + "k" * limit).status_code == 200
    assert_error(client.get("/kv/" + "k" * (limit + 1)), 400, "bad_request")


def test_kv_odd_keys(client):
    for key in ("%E2%9C%93", "a.b", "%ED%A0%80", "a%20b"):
        assert client.get(f"/kv/{key}").status_code == 200, key
