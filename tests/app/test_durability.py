"""Nothing acknowledged is lost, and listeners catch up: real gunicorn, real Redis with AOF.

A client posts as fast as it can (each message with its own Idempotency-Key,
retried with the same key until acknowledged) while two members listen on
Socket.IO. Redis is killed (SIGKILL) and restarted on the same port and
folder, as `benchmarks/sandbox/procs.py` starts it for the lab; then the
worker holding a listener is killed (SIGKILL). Then:

- acknowledged-but-lost must be 0 (the append-only file is written before
  Redis answers), and no message may be stored twice;
- a listener misses messages live (its worker's queue listener reconnecting to
  Redis, its own connection gone with the worker): it sees `seq` jump, or it
  reconnects, and catches up from the history (benchmarks/chat_socket.py, what
  the Locust user and the delivery probe do); after that, missing at any
  listener: 0.

Each test prints its numbers (run with -s to read them).
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import uuid

import psutil
import pytest
import redis
import requests
import socketio
from conftest import RedisProcess, gunicorn, gunicorn_process

from benchmarks.chat_socket import RoomFeed, catch_up
from benchmarks.sandbox import procs

TIMEOUT = 5
# every worker class a stage serves Socket.IO on, each from its own environment
WORKERS = {"eventlet": ["-w", "2", "-k", "eventlet", "--keep-alive", "10"],
           "gevent": ["-w", "2", "-k", "gevent", "--keep-alive", "10"],
           "gthread": ["-w", "2", "-k", "gthread", "--threads", "16", "--keep-alive", "10"]}


class Api:
    def __init__(self, base: str):
        self.base = base

    def post(self, path, body, token=None, key=None, timeout=TIMEOUT):
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        if key:
            headers["Idempotency-Key"] = key
        return requests.post(self.base + path, json=body, headers=headers, timeout=timeout)

    def user(self, name):
        email = f"{name}-{uuid.uuid4().hex[:8]}@example.test"
        account = {"email": email, "username": name, "password": "long-enough-pw"}
        user_id = self.post("/auth/register", account).json()["id"]
        token = self.post("/auth/login", account).json()["access_token"]
        return {"id": user_id, "token": token}

    def room(self, a, b):
        assert self.post("/users/friends", {"friendId": b["id"]}, a["token"]).status_code == 202
        assert self.post("/users/friends", {"friendId": a["id"]}, b["token"]).status_code == 201
        return self.post("/rooms/find-or-create", {"friendId": b["id"]},
                         a["token"]).json()["roomId"]


class Poster(threading.Thread):
    """Posts until stopped; a failed message is retried with its key until acknowledged."""

    def __init__(self, api, token, room):
        super().__init__(daemon=True)
        self.api, self.token, self.room = api, token, room
        self.acked: dict[int, float] = {}  # message id -> when acknowledged
        self.failures = 0
        self.stop = threading.Event()

    def run(self):
        n = 0
        while not self.stop.is_set():
            n += 1
            key, content = uuid.uuid4().hex, f"m{n}"
            while True:
                try:
                    r = self.api.post(f"/rooms/{self.room}/messages", {"content": content},
                                      self.token, key=key, timeout=3)
                    if r.status_code == 201:
                        self.acked[r.json()["id"]] = time.monotonic()
                        break
                except requests.RequestException:
                    pass
                self.failures += 1
                if self.stop.wait(0.05):
                    return
            time.sleep(0.005)


class Member:
    """A Socket.IO listener in the room that catches up as a client should: when `seq`
    jumps, and when it reconnects (python-socketio reconnects by itself)."""

    def __init__(self, base, token, room):
        self.pushed: dict[int, float] = {}  # message id -> when pushed
        self.room, self.feed, self.connects = room, RoomFeed(), 0
        self.catching = threading.Lock()
        self.sio = socketio.Client(reconnection_delay=0.2, reconnection_delay_max=1)
        self.sio.on("newMessage", self.on_message)
        self.sio.on("connect", self.on_connect)
        self.sio.connect(base, auth={"token": token}, transports=["websocket"],
                         wait_timeout=TIMEOUT)
        self.pid = self.call("joinRoom", {"roomId": room})["pid"]

    def call(self, event, data):
        return self.sio.call(event, data, timeout=TIMEOUT)

    def on_connect(self):
        self.connects += 1
        if self.connects > 1:  # a reconnect (the first connect's join is __init__'s)
            self.pid = self.call("joinRoom", {"roomId": self.room})["pid"]
            self.catch_up()

    def on_message(self, message):
        self.pushed.setdefault(message["id"], time.monotonic())
        if self.feed.push(message):
            self.catch_up()

    def catch_up(self):
        """One catch-up at a time (each handler runs in a thread of its own); a gap seen
        while one ran is caught by that one or by the next turn here."""
        for _ in range(10):
            if not self.catching.acquire(blocking=False):
                return  # the thread that holds it looks again when done
            try:
                catch_up(self.call, self.room, self.feed)  # the tail too, after a reconnect
            except (socketio.exceptions.SocketIOError, TypeError, KeyError):
                return  # disconnected meanwhile: the reconnect catches up
            finally:
                self.catching.release()
            if not self.feed.gap:
                return


def test_a_feed_tells_a_gap_from_pushes_out_of_order_and_counts_what_it_caught():
    """benchmarks/chat_socket.py's RoomFeed on its own: 3 late is no gap once it comes;
    5-7 never pushed are a gap until fetched; a page of history fills it."""
    feed = RoomFeed()
    assert [feed.push({"seq": s, "id": 100 + s}) for s in (1, 2, 4)] == [False, False, True]
    assert not feed.push({"seq": 3, "id": 103}) and not feed.gap
    assert feed.push({"seq": 8, "id": 108})  # 5, 6, 7 never came
    assert feed.gap and feed.after_id == 104
    history = [{"seq": s, "id": 100 + s} for s in (5, 6, 7, 8)]
    assert catch_up(lambda event, data: {"missed": history if data["after"] == 104 else []},
                    7, feed) == 3
    assert not feed.gap and feed.after_id == 108
    assert feed.counts() == {"missed_live": 3, "caught_up": 3, "missing": 0}
    assert feed.fetched_ids() == {105, 106, 107}


def kill_and_restart(server: RedisProcess, down_for: float) -> float:
    """SIGKILL Redis (no shutdown, no final fsync), restart it on the same port and
    folder; the moment it answers again."""
    os.killpg(server.proc.pid, signal.SIGKILL)
    server.proc.wait(timeout=10)
    time.sleep(down_for)
    server.start()
    return time.monotonic()


def stored_messages(url: str, room) -> list[dict]:
    direct = redis.Redis.from_url(url, decode_responses=True)
    try:
        return [json.loads(m) for m in direct.lrange(f"room:{room}:messages", 0, -1)]
    finally:
        direct.close()


@pytest.mark.slow
@pytest.mark.parametrize("worker", list(WORKERS))
def test_redis_restart_and_worker_kill_lose_nothing_and_listeners_catch_up(tmp_path, worker):
    server = RedisProcess(tmp_path)
    server.start()
    try:
        # a history that keeps every message of the run (the default keeps 1,000 a room)
        with gunicorn_process(server.url, tmp_path, [*WORKERS[worker], "--no-control-socket"],
                              env={"FLASK_ROOM_HISTORY_MAX": "100000"}) as (base, proc):
            api = Api(base)
            a, b = api.user("poster"), api.user("member")
            room = api.room(a, b)
            members = [Member(base, b["token"], room), Member(base, a["token"], room)]
            poster = Poster(api, a["token"], room)
            poster.start()
            time.sleep(1.5)
            back_at = kill_and_restart(server, down_for=1.0)
            # the queue listeners' back-off (1, 2, 4 s): back within 2 s when last measured
            time.sleep(4)
            killed = members[0].pid
            assert killed in [c.pid for c in psutil.Process(proc.pid).children()]
            os.kill(killed, signal.SIGKILL)  # our gunicorn's worker; the master starts another
            time.sleep(3)  # its listener reconnects within about a second
            poster.stop.set()
            poster.join(timeout=10)
            time.sleep(1)  # late pushes
            stored = stored_messages(server.url, room)
            for m in members:
                m.sio.disconnect()

        stored_ids = {m["id"] for m in stored}
        acked = poster.acked
        lost = set(acked) - stored_ids
        duplicates = len(stored) - len({m["content"] for m in stored})
        after_restart = [i for i, t in acked.items() if t >= back_at]
        print(f"\n[{worker}] acked {len(acked)} ({len(after_restart)} after the Redis restart), "
              f"retries {poster.failures}, acknowledged-but-lost {len(lost)}, stored twice "
              f"{duplicates}; worker {killed} killed")
        for n, m in enumerate(members):
            fetched = m.feed.fetched_ids()
            missing = set(acked) - set(m.pushed) - fetched
            print(f"  listener {n + 1}: missed live {len(set(acked) - set(m.pushed))}, caught up "
                  f"{len(fetched & set(acked))} (as it counted: {m.feed.counts()}), reconnects "
                  f"{m.connects - 1}, missing after catch-up {len(missing)}")
            assert missing == set(), f"listener {n + 1}"
            assert m.feed.counts()["missing"] == 0
        assert after_restart, "nothing was posted after the restart"
        assert members[0].connects >= 2  # its worker was killed under it: it reconnected
        assert lost == set()
        assert duplicates == 0
    finally:
        server.stop()


@pytest.mark.slow
def test_a_503_during_a_pause_may_be_stored_and_a_retry_with_its_key_stores_once(tmp_path):
    """The issue's probe: Redis paused (SIGSTOP) for 4 s under 12 posting clients. The
    posts in flight are answered 503; those already past the token check are stored
    anyway when Redis resumes. Retried with their keys, each is stored exactly once."""
    server = RedisProcess(tmp_path)
    server.start()
    try:
        with gunicorn(server.url, tmp_path, [*WORKERS["gevent"], "--no-control-socket"]) as base:
            api = Api(base)
            a, b = api.user("poster"), api.user("member")
            room = api.room(a, b)
            acked, refused = [], []  # contents; (content, key) of the refused
            paused = threading.Event()

            def post_until_refused(client: int):
                n = 0
                while True:
                    n += 1
                    content, key = f"c{client}-{n}", uuid.uuid4().hex
                    try:
                        status = api.post(f"/rooms/{room}/messages", {"content": content},
                                          a["token"], key=key, timeout=10).status_code
                    except requests.RequestException:
                        status = None
                    if status == 201:
                        acked.append(content)
                        if paused.is_set():
                            return
                    else:
                        refused.append((content, key))
                        return

            threads = [threading.Thread(target=post_until_refused, args=(i,))
                       for i in range(12)]
            for t in threads:
                t.start()
            time.sleep(1)
            os.kill(server.proc.pid, signal.SIGSTOP)
            paused.set()
            try:
                time.sleep(4)
            finally:
                os.kill(server.proc.pid, signal.SIGCONT)
            for t in threads:
                t.join(timeout=15)
            direct = redis.Redis.from_url(server.url, decode_responses=True)
            time.sleep(0.5)
            stored_before = {json.loads(m)["content"]
                             for m in direct.lrange(f"room:{room}:messages", 0, -1)}
            stored_anyway = [c for c, _ in refused if c in stored_before]
            for content, key in refused:
                retry = api.post(f"/rooms/{room}/messages", {"content": content}, a["token"],
                                 key=key)
                assert retry.status_code == 201, retry.text
            stored = [json.loads(m)["content"]
                      for m in direct.lrange(f"room:{room}:messages", 0, -1)]
            direct.close()
        print(f"\n12 clients, Redis paused 4 s: {len(refused)} posts refused, "
              f"{len(stored_anyway)} of them stored anyway; after retrying each with its "
              f"key: {len(stored)} stored for {len(acked) + len(refused)} messages, "
              f"{len(stored) - len(set(stored))} twice")
        assert refused, "no post was refused: the pause did not bite"
        assert sorted(stored) == sorted(acked + [c for c, _ in refused])
    finally:
        server.stop()


def test_redis_command_keeps_an_append_only_file(tmp_path):
    """The lab's and the tests' Redis persist: a restart on the same folder keeps the data."""
    command = procs.redis_command(6379, tmp_path)
    assert command[command.index("--appendonly") + 1] == "yes"
    assert command[command.index("--appendfsync") + 1] == "everysec"
    assert command[command.index("--protected-mode") + 1] == "yes"
    # On a lab host's address protected mode would refuse the app host.
    on_a_host = procs.redis_command(6379, tmp_path, host="198.18.0.40")
    assert on_a_host[on_a_host.index("--protected-mode") + 1] == "no"
    server = RedisProcess(tmp_path)
    server.start()
    try:
        direct = redis.Redis.from_url(server.url, decode_responses=True)
        direct.set("kept", "yes")
        direct.close()
        os.killpg(server.proc.pid, signal.SIGKILL)
        server.proc.wait(timeout=10)
        server.start()
        direct = redis.Redis.from_url(server.url, decode_responses=True)
        assert direct.get("kept") == "yes"
        assert direct.config_get("appendonly")["appendonly"] == "yes"
        direct.close()
    finally:
        server.stop()


def test_a_redis_that_takes_connections_but_does_not_answer_is_not_ready(private_redis):
    """procs.wait_for_redis waits for PONG, not for the port: a Redis loading its
    append-only file (seconds under qemu-user) accepts connections and answers
    -LOADING. Here a real Redis stopped with SIGSTOP: the kernel still accepts."""
    os.kill(private_redis.proc.pid, signal.SIGSTOP)
    try:
        with pytest.raises(procs.ServiceError, match="did not answer PING"):
            procs.wait_for_redis(private_redis.port, timeout=2)
    finally:
        os.kill(private_redis.proc.pid, signal.SIGCONT)
    procs.wait_for_redis(private_redis.port, timeout=5)
