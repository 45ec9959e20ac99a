"""The capacity study's load: many chat users in one asyncio process, each one websocket.

    python -m benchmarks.studies.capacity.client --url http://HOST:PORT --users-file F
        --first A --count N --steps 100,200 --send-every 60 --seconds 30 --grace 5

Why not Locust: a Locust user is a greenlet with a python-socketio client, tens of KiB
and a share of the process's CPU each; ten thousand of them need more load processes
than this box has cores. Here a user is a websocket (wsproto over asyncio streams,
Engine.IO v4 and Socket.IO v5 spoken by hand, as benchmarks/studies/fd_limit.py's
probe does) and a few small objects: one process holds thousands, and says what it
costs (its CPU, memory and event-loop lag each step), so the study can show the load
is not what broke.

Users `first`..`first+count` of the seeded users file (`flask seed-users --rooms-of K`:
each entry names its group room); whole rooms, so every member of a room is in this
process and a message's expected deliveries are known here. Each step connects more of
them (log in over HTTP, open the websocket, connect with the token, join its room), then
waits for the study's "go" on stdin; holds `--seconds` with every user sending a message
every `--send-every` seconds (a random phase each), stops sending, waits `--grace` for
what is still on its way, prints the step's figures and waits for "go" again. A line on
stdout per event, JSON: `connected` (the step's connects) and `held` (its traffic).

A message's content carries its step and the time it was sent (CLOCK_MONOTONIC, one
clock for every process of the machine, whatever namespace): a member's receipt gives
its delivery latency. Every member gets it, the sender too (the server emits to the
whole room), so a message is `room size` deliveries.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import heapq
import http.client
import json
import random
import resource
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    CloseConnection,
    Ping,
    RejectConnection,
    Request,
    TextMessage,
)
from wsproto.extensions import PerMessageDeflate

from benchmarks import latency_log
from benchmarks.run import limits

PATH = "/socket.io/?EIO=4&transport=websocket"
CONNECTING_AT_ONCE = 100  # connects in flight: enough to be quick, few enough to be fair
LOGIN_THREADS = 8


class ConnectFailed(Exception):
    """A user could not connect; its argument is the reason's short name."""


class Stats:
    """This process's figures for the step under way."""

    def __init__(self, step: int):
        self.step = step
        self.sent = self.acked = self.ack_errors = self.expected = 0
        self.received = self.stale = self.dropped = 0
        self.delivery, self.ack, self.connect = (latency_log.new() for _ in range(3))


class User:
    """One chat user: its websocket, its room, its acks waiting."""

    def __init__(self, entry: dict, client: Client):
        self.entry, self.client, self.room = entry, client, entry["room"]
        self.ws = WSConnection(ConnectionType.CLIENT)
        self.reader = self.writer = None
        self.acks: dict[int, asyncio.Future] = {}
        self.next_ack = 0
        self.open = False

    def send(self, text: str) -> None:
        self.writer.write(self.ws.send(TextMessage(data=text)))

    async def frames(self):
        """The text messages the server sends, whole, as they come (None: closed)."""
        parts = []
        while True:
            data = await self.reader.read(65536)
            if not data:
                yield None
                return
            self.ws.receive_data(data)
            for event in self.ws.events():
                if isinstance(event, TextMessage):
                    parts.append(event.data)
                    if event.message_finished:
                        yield "".join(parts)
                        parts = []
                elif isinstance(event, Ping):
                    self.writer.write(self.ws.send(event.response()))
                elif isinstance(event, CloseConnection):
                    yield None
                    return
                elif isinstance(event, AcceptConnection):
                    yield ""
                elif isinstance(event, RejectConnection):
                    raise ConnectFailed(f"http {event.status_code}")

    async def connect(self, host: str, port: int, token: str, deflate: bool = False) -> None:
        """Open the websocket (offering permessage-deflate, as browsers do, if `deflate`),
        connect with the token, join the user's room."""
        self.reader, self.writer = await asyncio.open_connection(host, port)
        offer = [PerMessageDeflate()] if deflate else []
        self.writer.write(self.ws.send(Request(host=f"{host}:{port}", target=PATH,
                                               extensions=offer)))
        self.stream = self.frames()
        expect = {"": "upgrade", "0": "engine.io open", "40": "socket.io connect"}
        for step, what in expect.items():
            frame = await anext(self.stream)
            if frame is None:
                raise ConnectFailed(f"closed before {what}")
            if not frame.startswith(step) or (step == "" and frame):
                raise ConnectFailed("refused" if frame.startswith("44") else f"no {what}")
            if step == "0":
                self.send("40" + json.dumps({"token": token}))
        self.open = True
        self.listener = asyncio.create_task(self.listen())
        joined = await self.call("joinRoom", {"roomId": self.room})
        if not (isinstance(joined, dict) and joined.get("ok")):
            raise ConnectFailed("join refused")

    async def call(self, event: str, data: dict, timeout: float = 30):
        """Emit `event` with an ack and wait for it."""
        n, self.next_ack = self.next_ack, self.next_ack + 1
        self.acks[n] = asyncio.get_running_loop().create_future()
        self.send(f"42{n}" + json.dumps([event, data]))
        try:
            return (await asyncio.wait_for(self.acks[n], timeout))[0]
        finally:
            self.acks.pop(n, None)

    async def listen(self) -> None:
        async for frame in self.stream:
            if frame is None:
                break
            if frame == "2":  # Engine.IO ping: the server closes a socket that misses one
                self.send("3")
            elif frame.startswith("42"):
                self.client.delivered(json.loads(frame[2:]))
            elif frame.startswith("43"):
                n, _, body = frame[2:].partition("[")
                future = self.acks.get(int(n))
                if future is not None and not future.done():
                    future.set_result(json.loads("[" + body))
        self.open = False
        self.client.lost(self)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


class Client:
    """The process's users, its step's figures, and the study's protocol."""

    def __init__(self, args):
        url = urlsplit(args.url)
        self.host, self.port = url.hostname, url.port or 80
        self.args = args
        with open(args.users_file) as f:
            entries = json.load(f)[args.first:args.first + args.count]
        self.users = [User(e, self) for e in entries]
        self.room_size = Counter(u.room for u in self.users)  # members here, all of them
        self.connected: list[User] = []
        self.online: Counter = Counter()  # members connected now, by room
        self.failed: Counter = Counter()
        self.stats = Stats(0)
        self.sending = False

    # --- what the server sends

    def delivered(self, packet) -> None:
        if not (isinstance(packet, list) and packet and packet[0] == "newMessage"):
            return
        parts = str(packet[1].get("content", "")).split()
        if len(parts) != 3 or parts[0] != "cap":
            return
        if int(parts[1]) != self.stats.step:
            self.stats.stale += 1  # a message of an earlier step, past its grace
            return
        self.stats.received += 1
        self.stats.delivery.record_value(max(1, (time.monotonic_ns() - int(parts[2])) // 1000))

    def lost(self, user: User) -> None:
        if user in self.connected:
            self.connected.remove(user)
            self.online[user.room] -= 1
            self.stats.dropped += 1

    # --- connecting

    def tokens(self, entries: list[dict]) -> list[str | None]:
        """Each user's token, logged in over HTTP as the chat's users are (a thread's
        keep-alive connection each); None where the login failed."""
        local = threading.local()

        def login(entry):
            if not hasattr(local, "conn"):
                local.conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
            body = json.dumps({"email": entry["email"], "password": entry["password"]})
            try:
                local.conn.request("POST", "/auth/login", body,
                                   {"Content-Type": "application/json"})
                answer = local.conn.getresponse()
                data = answer.read()
            except (OSError, http.client.HTTPException):
                local.conn.close()
                del local.conn
                return None
            return json.loads(data)["access_token"] if answer.status == 200 else None

        with ThreadPoolExecutor(LOGIN_THREADS) as pool:
            return list(pool.map(login, entries))

    async def connect_one(self, user: User, token: str | None, gate: asyncio.Semaphore):
        async with gate:
            started = time.monotonic()
            try:
                if token is None:
                    raise ConnectFailed("login failed")
                await asyncio.wait_for(user.connect(self.host, self.port, token,
                                                    self.args.deflate),
                                       self.args.connect_timeout)
            except (TimeoutError, ConnectFailed, OSError, StopAsyncIteration) as e:
                reason = (e.args[0] if isinstance(e, ConnectFailed) else
                          "timeout" if isinstance(e, asyncio.TimeoutError) else
                          type(e).__name__)
                self.failed[reason] += 1
                user.close()
                return
            self.stats.connect.record_value(max(1, int((time.monotonic() - started) * 1e6)))
            self.connected.append(user)
            self.online[user.room] += 1

    async def grow(self, target: int) -> None:
        """Connect users until `target` of this process's have been tried."""
        tried = len(self.connected) + sum(self.failed.values())
        new = self.users[tried:target]
        loop = asyncio.get_running_loop()
        tokens = await loop.run_in_executor(None, self.tokens, [u.entry for u in new])
        gate = asyncio.Semaphore(CONNECTING_AT_ONCE)
        await asyncio.gather(*(self.connect_one(u, t, gate)
                               for u, t in zip(new, tokens, strict=True)))

    # --- the traffic

    async def send_one(self, user: User, step: int) -> None:
        sent = time.monotonic_ns()
        self.stats.sent += 1
        self.stats.expected += self.online[user.room]
        try:
            ack = await user.call("sendMessage",
                                  {"roomId": user.room, "content": f"cap {step} {sent}"})
        except (TimeoutError, OSError):
            ack = None
        if step != self.stats.step:
            return
        if isinstance(ack, dict) and "id" in ack:
            self.stats.acked += 1
            self.stats.ack.record_value(max(1, (time.monotonic_ns() - sent) // 1000))
        else:
            self.stats.ack_errors += 1

    async def send_for(self, seconds: float, step: int) -> list[asyncio.Task]:
        """Every connected user sends every --send-every seconds for `seconds`, each
        from a random phase; the sends' tasks."""
        every, start = self.args.send_every, time.monotonic()
        users, tasks = list(self.connected), []
        due = [(start + random.uniform(0, every), n) for n in range(len(users))]
        heapq.heapify(due)
        while time.monotonic() - start < seconds:
            while due and due[0][0] <= time.monotonic():
                when, n = heapq.heappop(due)
                if users[n].open:
                    tasks.append(asyncio.create_task(self.send_one(users[n], step)))
                    heapq.heappush(due, (when + every, n))
            await asyncio.sleep(0.01)
        return tasks

    async def watch_lag(self, hist) -> None:
        """The event loop's lateness, every 50 ms: a busy loop delays every latency it
        measures, and says the load side is saturated."""
        while True:
            asked = time.monotonic()
            await asyncio.sleep(0.05)
            hist.record_value(max(1, int((time.monotonic() - asked - 0.05) * 1e6)))

    async def hold(self, step: int) -> dict:
        lag = latency_log.new()
        watcher = asyncio.create_task(self.watch_lag(lag))
        cpu0, t0 = cpu_seconds(), time.monotonic()
        tasks = await self.send_for(self.args.seconds, step)
        end = time.monotonic() + self.args.grace
        while time.monotonic() < end and (self.stats.received < self.stats.expected
                                          or not all(t.done() for t in tasks)):
            await asyncio.sleep(0.05)
        watcher.cancel()
        for task in tasks:
            task.cancel()
        s, wall = self.stats, time.monotonic() - t0
        return {"event": "held", "step": step, "users": len(self.connected),
                "sent": s.sent, "acked": s.acked, "ack_errors": s.ack_errors,
                "expected": s.expected, "received": s.received, "stale": s.stale,
                "dropped": s.dropped, "seconds": round(wall, 3),
                "cpu_percent": round((cpu_seconds() - cpu0) / wall * 100, 1),
                "rss_kib": rss_kib(), "histograms": {
                    "delivery": s.delivery.encode().decode(), "ack": s.ack.encode().decode(),
                    "lag": lag.encode().decode()}}

    # --- the study's protocol

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        for step, target in enumerate(self.args.steps, 1):
            self.stats = Stats(step)
            await self.grow(target)
            # The users just made live to the end: out of the collector's reach, so that
            # a full collection of this process (hundreds of ms with thousands of users,
            # as in the servers: lab 16) does not pause the load and time it as latency.
            gc.collect()
            gc.freeze()
            say({"event": "connected", "step": step, "users": len(self.connected),
                 "failed": dict(self.failed), "rss_kib": rss_kib(),
                 "histograms": {"connect": self.stats.connect.encode().decode()}})
            if await loop.run_in_executor(None, sys.stdin.readline) != "go\n":
                return
            say(await self.hold(step))
            if await loop.run_in_executor(None, sys.stdin.readline) != "go\n":
                return

    def close(self) -> None:
        for user in self.users:
            user.close()


def say(event: dict) -> None:
    print(json.dumps(event), flush=True)


def cpu_seconds() -> float:
    used = resource.getrusage(resource.RUSAGE_SELF)
    return used.ru_utime + used.ru_stime


def rss_kib() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() // 1024


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.studies.capacity.client",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--url", required=True, help="the stage's entry, http://HOST:PORT")
    p.add_argument("--users-file", required=True)
    p.add_argument("--first", type=int, default=0, help="this process's first user")
    p.add_argument("--count", type=int, required=True, help="its users (whole rooms)")
    p.add_argument("--steps", type=lambda s: [int(x) for x in s.split(",")], required=True,
                   help="its users connected at each step, rising")
    p.add_argument("--send-every", type=float, default=60.0)
    p.add_argument("--seconds", type=float, default=30.0, help="each step's hold")
    p.add_argument("--grace", type=float, default=5.0,
                   help="after the sends, seconds for what is on its way")
    p.add_argument("--connect-timeout", type=float, default=15.0)
    p.add_argument("--deflate", action="store_true",
                   help="offer permessage-deflate, as browsers do (the server may accept it)")
    p.add_argument("--limit", type=float, default=3600.0,
                   help="seconds after which it stops whatever happens")
    return p


async def main_async(args) -> None:
    client = Client(args)
    try:
        await asyncio.wait_for(client.run(), args.limit)
    except TimeoutError:
        say({"event": "limit", "seconds": args.limit})
    finally:
        client.close()


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    limits.raise_nofile()  # a descriptor a user
    asyncio.run(main_async(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
