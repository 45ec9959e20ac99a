"""The two Redis modes, seen on the sockets; and a Redis outage and recovery.

The Flask test client runs in this process, so this process's connections
toward the Redis port are the app's connections. Each test gets its own
redis-server (conftest's ``private_redis``), so every connection it accepted
(``connections_received``) is ours; the machine's TIME_WAIT table is not, and is
read only for a lower bound.
"""

from __future__ import annotations

import json
import os
import signal
import time

import psutil
import pytest
import redis

from app import redis_store


def own_connections(port: int) -> list:
    """This process's TCP sockets toward the Redis port."""
    return [c for c in psutil.Process().net_connections("tcp")
            if c.raddr and c.raddr.port == port]


def time_wait_ports(port: int) -> set[int]:
    """Local ports of TIME_WAIT sockets from 127.0.0.1 toward 127.0.0.1:port.

    A TIME_WAIT socket belongs to no process, so this reads the machine's table: another
    process's socket can be in it (a server's, whose client happened to use this port
    number as its own). Only a lower bound is read from it; what this test's own
    connections did is counted by its own redis-server (`connections_received`).
    """
    return {c.laddr.port for c in psutil.net_connections("tcp")
            if c.status == psutil.CONN_TIME_WAIT and c.raddr == ("127.0.0.1", port)
            and c.laddr.ip == "127.0.0.1"}


def connections_received(url: str) -> int:
    """Connections the test's private redis-server has accepted so far (INFO stats),
    this question's own included: every one of them is this test's."""
    with redis.Redis.from_url(url) as probe:
        return probe.info("stats")["total_connections_received"]


N = 25


def test_per_request_mode_opens_and_closes_a_connection_per_request(make_app, private_redis):
    app = make_app(redis_url=private_redis.url, REDIS_MODE="per-request")
    client = app.test_client()
    before = time_wait_ports(private_redis.port)
    for i in range(N):
        assert client.get("/kv/hits").status_code == 200
        if i % 5 == 0:  # (a socket-table scan is not free; a sample is enough)
            # Closed in teardown: nothing of ours is left open between requests.
            assert own_connections(private_redis.port) == []
    new = time_wait_ports(private_redis.port) - before
    # One fresh connection (a new local port) per request, each actively closed
    # by the app, so each now sits in TIME_WAIT on our side.
    assert len(new) >= N, f"expected >= {N} new TIME_WAIT sockets, saw {len(new)}"


def test_pool_mode_reuses_one_connection(make_app, private_redis):
    app = make_app(redis_url=private_redis.url, REDIS_MODE="pool")
    client = app.test_client()
    before = connections_received(private_redis.url)
    seen = set()
    for _ in range(N):
        assert client.get("/kv/hits").status_code == 200
        connections = own_connections(private_redis.port)
        assert all(c.status == psutil.CONN_ESTABLISHED for c in connections)
        seen.update(c.laddr.port for c in connections)
    assert len(seen) == 1, f"pooled connection changed: local ports {seen}"
    # every connection Redis accepted (but the second question's own) is the one still
    # open: the app closed none, so none of its sockets sits in TIME_WAIT
    assert connections_received(private_redis.url) - before - 1 == len(seen)
    pool = app.extensions["redis_pool"][1].connection_pool
    assert isinstance(pool, redis.BlockingConnectionPool)
    assert pool.max_connections == app.config["REDIS_POOL_SIZE"]


def test_pool_size_comes_from_config(make_app, private_redis):
    app = make_app(redis_url=private_redis.url, REDIS_POOL_SIZE=3, REDIS_POOL_TIMEOUT=0.5)
    with app.app_context():
        pool = redis_store.get_redis().connection_pool
    assert pool.max_connections == 3 and pool.timeout == 0.5


def test_pool_is_created_anew_in_a_forked_process(make_app, private_redis):
    """A forked worker must not reuse the parent's pooled sockets."""
    app = make_app(redis_url=private_redis.url)
    with app.app_context():
        parent_id = redis_store.get_redis().client_id()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: report the Redis connection id it uses, then leave at once
        status = 1
        try:
            os.close(read_end)
            with app.app_context():
                r = redis_store.get_redis()
                report = {"client_id": r.client_id(),
                          "keyed_by": app.extensions["redis_pool"][0], "pid": os.getpid()}
            os.write(write_end, json.dumps(report).encode())
            status = 0
        finally:
            os._exit(status)
    os.close(write_end)
    with os.fdopen(read_end) as pipe:
        report = json.loads(pipe.read() or "{}")
    _, status = os.waitpid(pid, 0)
    assert status == 0 and report, "child failed"
    assert report["keyed_by"] == report["pid"] != os.getpid()
    assert report["client_id"] != parent_id
    with app.app_context():  # the parent's pool is untouched
        assert redis_store.get_redis().client_id() == parent_id


@pytest.mark.parametrize("mode", ["per-request", "pool"])
def test_outage_gives_fast_503_and_recovery_is_automatic(make_app, private_redis, mode):
    app = make_app(redis_url=private_redis.url, REDIS_MODE=mode)
    client = app.test_client()
    assert client.post("/auth/register", json={"email": "o@example.test", "username": "o",
                                               "password": "long-enough-pw"}).status_code == 201
    token = client.post("/auth/login", json={"email": "o@example.test",
                                             "password": "long-enough-pw"}).get_json()
    headers = {"Authorization": f"Bearer {token['access_token']}"}
    assert client.get("/healthz").status_code == 200

    private_redis.stop()
    calls = [
        ("get", "/healthz", None, {}),
        ("get", "/kv/a", None, {}),
        ("get", "/users/me", None, headers),
        ("get", "/users/friends", None, headers),
        ("post", "/rooms/1/messages", {"content": "lost?"}, headers),
        ("post", "/auth/login", {"email": "o@example.test", "password": "x"}, {}),
    ]
    for method, path, body, hdrs in calls:
        started = time.monotonic()
        response = getattr(client, method)(path, json=body, headers=hdrs)
        elapsed = time.monotonic() - started
        assert response.status_code == 503, (path, response.get_data(as_text=True))
        assert response.get_json()["error"] == "service_unavailable"
        assert elapsed < 3, f"{path} took {elapsed:.1f}s to fail"
    health = client.get("/healthz").get_json()
    assert health["status"] == "unavailable" and "message" in health

    private_redis.start()  # same port, same data (the append-only file)
    assert client.get("/healthz").status_code == 200
    assert client.get("/kv/a").status_code == 200
    assert client.get("/users/me", headers=headers).status_code == 200  # the user survived
    assert client.post("/auth/register", json={"email": "p@example.test", "username": "p",
                                               "password": "long-enough-pw"}).status_code == 201


def test_pool_survives_a_restart_between_requests(make_app, private_redis):
    """Pooled connections killed by a Redis restart are replaced transparently."""
    app = make_app(redis_url=private_redis.url, REDIS_MODE="pool")
    client = app.test_client()
    for _ in range(3):
        assert client.get("/kv/a").status_code == 200
    old_ports = {c.laddr.port for c in own_connections(private_redis.port)}
    private_redis.stop()
    private_redis.start()
    # No request saw the outage: the very first one after it must succeed.
    assert client.get("/kv/a").status_code == 200
    new_ports = {c.laddr.port for c in own_connections(private_redis.port)
                 if c.status == psutil.CONN_ESTABLISHED}
    assert new_ports and not new_ports & old_ports


@pytest.mark.parametrize("mode", ["per-request", "pool"])
def test_hung_redis_gives_503_after_the_read_timeout(make_app, private_redis, mode):
    """A Redis that accepts but never answers (SIGSTOP) costs one short timeout, not a hang."""
    app = make_app(redis_url=private_redis.url, REDIS_MODE=mode, REDIS_SOCKET_TIMEOUT=0.5)
    client = app.test_client()
    assert client.get("/kv/a").status_code == 200
    os.kill(private_redis.proc.pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        response = client.get("/kv/a")
        elapsed = time.monotonic() - started
        assert response.status_code == 503
        assert response.get_json()["error"] == "service_unavailable"
        assert elapsed < 2.5, f"took {elapsed:.1f}s"
    finally:
        os.kill(private_redis.proc.pid, signal.SIGCONT)
    assert client.get("/kv/a").status_code == 200
