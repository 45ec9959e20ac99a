"""Real gunicorn, 2 eventlet or 2 gevent workers, real python-socketio clients.

Websocket transport only, so no sticky sessions are needed. Members of one
room are spread over both workers; a message sent through one worker must
reach the members held by the other, carried by the Redis message queue.

The asyncio server (app/asgi.py, 2 granian workers) holds the sockets the same way,
with the HTTP API on a gevent gunicorn beside it, as stage 9 splits them: there a
message also crosses between the two servers, both ways.
"""

from __future__ import annotations

import http.client
import json
import os
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests
import socketio

from benchmarks import stages
from benchmarks.sandbox import procs
from benchmarks.stages import ROOT

TIMEOUT = 10  # seconds, for every network wait in this file
ASYNCIO = ("asyncio", "default")  # the asyncio server (app/asgi.py), with a gevent API


class Server:
    """Socket.IO at `base`; the HTTP API there too, or at `api` (the asyncio server's)."""

    def __init__(self, worker: str, port: int, log: Path, api: str | None = None):
        self.worker, self.port, self.log = worker, port, log
        self.base = f"http://127.0.0.1:{port}"
        self.api = api or self.base
        self.api_port = int(self.api.rsplit(":", 1)[1])

    def post(self, path, body, token=None):
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return requests.post(self.api + path, json=body, headers=headers, timeout=TIMEOUT)

    def user(self, name: str) -> dict:
        """Register and log in a user unique to this run; {id, token}."""
        email = f"{name}-{uuid.uuid4().hex[:8]}@example.test"
        registered = self.post("/auth/register", {"email": email, "username": name,
                                                  "password": "long-enough-pw"})
        assert registered.status_code == 201, registered.text
        login = self.post("/auth/login", {"email": email, "password": "long-enough-pw"})
        return {"id": registered.json()["id"], "token": login.json()["access_token"]}

    def room(self, a: dict, b: dict) -> int:
        """Make a and b friends (both ask) and return their room."""
        assert self.post("/users/friends", {"friendId": b["id"]}, a["token"]).status_code == 202
        assert self.post("/users/friends", {"friendId": a["id"]}, b["token"]).status_code == 201
        return self.post("/rooms/find-or-create", {"friendId": b["id"]},
                         a["token"]).json()["roomId"]

    def socket(self, token: str | None, url: str | None = None) -> socketio.SimpleClient:
        client = socketio.SimpleClient()
        client.connect(url or self.base, auth={"token": token} if token else None,
                       transports=["websocket"], wait_timeout=TIMEOUT)
        return client


@pytest.fixture(scope="module", params=[("eventlet", "default"), ("gevent", "default"),
                                        ("gthread", "default"), ("eventlet", "stage 7"),
                                        ("gevent", "stage 8"), ASYNCIO], ids=" ".join)
def server(request, redis_url, tmp_path_factory):
    """2 workers, each worker class on the gunicorn that runs it (eventlet's 25.3, the
    others' 27); the default code path on each, stages 7's and 8's on theirs."""
    worker, code_path = request.param
    if worker == "asyncio":
        yield from asyncio_server(redis_url, tmp_path_factory.mktemp("asyncio"))
        return
    port = procs.free_port()
    log = tmp_path_factory.mktemp(f"gunicorn-{worker}") / "gunicorn.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLASK_")}
    env.update(FLASK_REDIS_URL=redis_url, FLASK_SECRET_KEY="gunicorn-test-secret",
               **(stages.get(code_path[-1]).env if code_path.startswith("stage") else {}))
    threads = ["--threads", "16"] if worker == "gthread" else []
    # stage 8 runs its own config file (gunicorn/today.conf.py: gevent, the C parser, one
    # send per response), the others gunicorn's worker as it comes
    kind = (["-c", stages.get("8").gunicorn_config] if code_path == "stage 8"
            else ["-k", worker, *threads])
    cmd = [procs.gunicorn_for(worker), *kind, "-w", "2",
           "-b", f"127.0.0.1:{port}", "--graceful-timeout", "3", "--timeout", "30",
           # gunicorn 25 otherwise opens a control socket at a fixed path in
           # $HOME, which a second gunicorn on the same machine would fight over.
           "--no-control-socket", "app.wsgi:app"]
    proc = procs.start(cmd, log=log, env=env, cwd=ROOT)
    try:
        procs.wait_for_port(port, proc=proc, timeout=30)
        yield Server(worker, port, log)
    finally:
        procs.stop(proc, timeout=10)
    assert proc.poll() is not None, "gunicorn did not stop"


def asyncio_server(redis_url: str, workdir: Path):
    """The asyncio server's 2 workers, and a gevent gunicorn for the HTTP API."""
    from conftest import asgi_process, gunicorn_process

    env = {k: v for k, v in os.environ.items() if not k.startswith("FLASK_")}
    env.update(FLASK_REDIS_URL=redis_url, FLASK_SECRET_KEY="gunicorn-test-secret")
    with asgi_process(redis_url, workdir, workers=2, env=env) as (url, _), \
            gunicorn_process(redis_url, workdir, ["-k", "gevent", "-w", "1"], env=env) as (api, _):
        yield Server("asyncio", int(url.rsplit(":", 1)[1]), workdir / "granian.log", api)


def test_workers_pick_the_matching_async_mode(server):
    health = requests.get(server.base + "/healthz", timeout=TIMEOUT).json()
    mode = {"gthread": "threading", "asyncio": "asgi"}.get(server.worker, server.worker)
    assert health["status"] == "ok" and health["asyncMode"] == mode
    assert "pid" not in health


def test_connect_without_valid_token_is_refused(server):
    for token in (None, "forged.token.value"):
        with pytest.raises(socketio.exceptions.ConnectionError):
            server.socket(token)


def _members_on_both_workers(server, users, room, batch=8, max_batches=12):
    """Join clients (alternating users) until both worker pids hold a member; keep two
    per worker. Clients connect in concurrent batches: one at a time, the worker that
    just accepted tends to win the next accept too (gevent once kept 16 of 16)."""

    def join(i):
        user = users[i % 2]
        client = server.socket(user["token"])
        ack = client.call("joinRoom", {"roomId": room}, timeout=TIMEOUT)
        return client, user, ack

    joined = []  # (client, user, pid)
    with ThreadPoolExecutor(batch) as pool:
        for n in range(max_batches):
            for client, user, ack in pool.map(join, range(n * batch, (n + 1) * batch)):
                joined.append((client, user, ack.get("pid")))
                assert ack.get("ok") is True, ack
            if len({pid for _, _, pid in joined}) >= 2:
                break
    kept, per_pid = [], {}
    for member in joined:
        pid = member[2]
        if per_pid.get(pid, 0) < 2:
            per_pid[pid] = per_pid.get(pid, 0) + 1
            kept.append(member)
        else:
            member[0].disconnect()
    return kept


def _next_message(client, timeout=TIMEOUT) -> dict:
    event, data = client.receive(timeout=timeout)
    assert event == "newMessage", (event, data)
    return data


def test_broadcast_reaches_members_on_the_other_worker(server):
    a, b = server.user("ann"), server.user("bob")
    room = server.room(a, b)
    members = _members_on_both_workers(server, (a, b), room)
    try:
        pids = {pid for _, _, pid in members}
        assert len(pids) == 2, f"all clients landed on worker(s) {pids}"
        sender, sender_user, sender_pid = members[0]
        ack = sender.call("sendMessage", {"content": f"over the queue ({server.worker})"},
                          timeout=TIMEOUT)
        assert set(ack) == {"id", "ts"}, ack
        for client, _, _ in members:
            message = _next_message(client)
            assert message["id"] == ack["id"] and message["roomId"] == room
            assert message["userId"] == sender_user["id"] and message["ts"] == ack["ts"]
        assert any(pid != sender_pid for _, _, pid in members)  # crossed workers

        # The same for a message posted over HTTP (whichever worker takes it).
        posted = server.post(f"/rooms/{room}/messages", {"content": "via http"}, b["token"])
        assert posted.status_code == 201
        for client, _, _ in members:
            assert _next_message(client)["id"] == posted.json()["id"]
    finally:
        for client, _, _ in members:
            client.disconnect()


@pytest.mark.parametrize("server", [ASYNCIO], indirect=True, ids=" ".join)
def test_a_message_crosses_between_the_asyncio_and_the_gevent_server(server):
    """Stage 9's split with the asyncio server: members on it and on the gevent worker
    (Flask-SocketIO) of the same room get what either side sends, over the one queue."""
    a, b = server.user("asa"), server.user("geo")
    room = server.room(a, b)
    here, there = server.socket(a["token"]), server.socket(b["token"], url=server.api)
    try:
        for client in (here, there):
            assert client.call("joinRoom", {"roomId": room}, timeout=TIMEOUT)["ok"] is True
        for sender in (here, there):
            ack = sender.call("sendMessage", {"content": "across"}, timeout=TIMEOUT)
            assert [_next_message(c)["id"] for c in (here, there)] == [ack["id"]] * 2
    finally:
        here.disconnect()
        there.disconnect()


def test_ack_errors_on_a_real_server(server):
    a, outsider = server.user("amy"), server.user("eve")
    room = server.room(a, server.user("ben"))
    client = server.socket(outsider["token"])
    try:
        assert client.call("joinRoom", {"roomId": room}, timeout=TIMEOUT)["error"] == "not_found"
        assert client.call("sendMessage", {"roomId": room, "content": "x"},
                           timeout=TIMEOUT)["error"] == "not_found"
    finally:
        client.disconnect()


def test_socket_io_accepts_the_same_origin_only_by_default(server):
    """websocket-client sends the URL it dials as Origin (the same origin: accepted, as
    every other test here shows); a page of another origin is refused."""
    token = server.user("origin")["token"]
    client = socketio.Client(reconnection=False,
                             websocket_extra_options={"origin": "http://evil.example"})
    try:
        with pytest.raises(socketio.exceptions.ConnectionError):
            client.connect(server.base, auth={"token": token}, transports=["websocket"],
                           wait_timeout=TIMEOUT)
    finally:
        client.disconnect()
    assert "http://evil.example is not an accepted origin" in server.log.read_text()


def test_oversize_chunked_body_is_413(server):
    """Without a Content-Length the server cannot refuse up front; still 413, not 400."""
    def chunks(size):
        yield b'{"email": "big-%s@example.test", "username": "big", "password": "' % (
            uuid.uuid4().hex.encode())
        yield b"x" * size
        yield b'"}'

    for size, status in ((200_000, 413), (100, 201)):
        conn = http.client.HTTPConnection("127.0.0.1", server.api_port, timeout=TIMEOUT)
        try:
            conn.request("POST", "/auth/register", body=chunks(size), encode_chunked=True,
                         headers={"Content-Type": "application/json"})
            response = conn.getresponse()
            body = json.loads(response.read())
        finally:
            conn.close()
        assert response.status == status, body
        if status == 413:
            assert body["error"] == "payload_too_large"


def test_a_websocket_holds_a_gthread_thread_for_its_whole_life(redis_url, tmp_path):
    """Stage 3t's lesson (lab 13), on one gthread worker with 2 threads: two open
    websockets hold both threads, so an HTTP request waits behind them; once one
    socket closes, requests are answered again."""
    from conftest import gunicorn_process

    args = ["-k", "gthread", "-w", "1", "--threads", "2", "--no-control-socket",
            "--graceful-timeout", "3"]
    env = {"FLASK_SOCKETIO_ASYNC_MODE": "threading"}
    with gunicorn_process(redis_url, tmp_path, args, env=env) as (url, _):
        port = int(url.rsplit(":", 1)[1])
        server = Server("gthread", port, tmp_path / "gunicorn.log")
        token = server.user("holder")["token"]
        sockets = [server.socket(token) for _ in range(2)]
        try:
            with pytest.raises(requests.exceptions.ReadTimeout):
                requests.get(url + "/healthz", timeout=2)  # both threads held
        finally:
            sockets.pop().disconnect()
        assert requests.get(url + "/healthz", timeout=TIMEOUT).status_code == 200
        sockets.pop().disconnect()
