"""A chat client's Socket.IO side: connect and wait, check an ack, and know what it
missed in its room and catch up.

Every `newMessage` carries the room's `seq` (1, 2, 3, ...), numbered in the same
Redis script that stores the message (app/chat_store.py), so a stored message
always has one. A listener that sees `seq` jump by more than one knows some
were stored that never reached it: the server's message-queue listener was
reconnecting to Redis (after a restart it retries in 1, 2, 4 s), or the
listener's own connection dropped (a worker killed). It then asks for what
came after the last one it has: `joinRoom {roomId, after}`, whose ack carries
`missed` (200 at most: it asks again until none are left); it asks the same way
after it reconnects, since a gap at the end of the feed shows no jump.

The client does it, not the server: the server cannot tell which pushes a
client lost, a client can (and a hint from the server would be lost the same
way). Used by the Locust Socket.IO user (benchmarks/chat.py), the delivery
probe (benchmarks/run/delivery.py) and tests/app/test_durability.py. A
locustfile imports it: after Locust's gevent patching, as chat.py does.
"""

from __future__ import annotations

import json
import threading
import time

import socketio

PAGE = 200  # messages per joinRoom ack (app/realtime/server.py, CATCH_UP_MAX)


class RoomFeed:
    """One room as one listener saw it: which `seq`s arrived live, which were fetched.

    Pushes may come out of order (two workers publish, a client runs each handler
    in a thread of its own), so the counts are kept as sets and read at the end:
    missed live = the room's messages since the first one seen that never arrived
    live; caught up = those of them fetched from the history; missing = neither.
    """

    def __init__(self):
        self.lock = threading.Lock()
        self.live: set[int] = set()  # seqs pushed to this listener
        self.fetched: set[int] = set()  # seqs it had only from the history
        self.ids: dict[int, int] = {}  # seq -> message id
        self.first: int | None = None  # the first seq it saw: where its feed starts
        self.through: int | None = None  # it has every seq from `first` to this one
        self.newest: int | None = None

    @property
    def after_id(self) -> int | None:
        """The id to ask `joinRoom {after}` with: the last before its first hole."""
        with self.lock:
            return None if self.through is None else self.ids[self.through]

    @property
    def gap(self) -> bool:
        """Whether it knows of messages it does not have (a jump in `seq`)."""
        with self.lock:
            return self.newest is not None and self.through < self.newest

    def _add(self, seq: int, message_id: int) -> None:
        self.ids[seq] = message_id
        if self.first is None or seq < self.first:
            self.first = self.through = seq
        self.newest = seq if self.newest is None else max(self.newest, seq)
        while self.through + 1 in self.ids:
            self.through += 1

    def push(self, message) -> bool:
        """A `newMessage`; True when the feed now has a gap (time to catch up)."""
        seq, message_id = message.get("seq"), message.get("id")
        if not isinstance(seq, int) or not isinstance(message_id, int):
            return False
        with self.lock:
            self.live.add(seq)
            self._add(seq, message_id)
            return self.through < self.newest

    def caught(self, messages) -> int:
        """Messages from the history (an ack's `missed`); how many were new to it."""
        new = 0
        with self.lock:
            for message in messages or []:
                seq = message.get("seq") if isinstance(message, dict) else None
                if isinstance(seq, int) and seq not in self.ids:
                    self.fetched.add(seq)
                    self._add(seq, message["id"])
                    new += 1
        return new

    def fetched_ids(self) -> set[int]:
        """The ids of the messages it had from the history and never live."""
        with self.lock:
            return {self.ids[seq] for seq in self.fetched - self.live}

    def counts(self) -> dict:
        """`missed_live`, `caught_up`, `missing` (in its range, neither pushed nor fetched)."""
        with self.lock:
            if self.first is None:
                return {"missed_live": 0, "caught_up": 0, "missing": 0}
            span = set(range(self.first, self.newest + 1))
            return {"missed_live": len(span - self.live),
                    "caught_up": len(self.fetched - self.live),
                    "missing": len(span - self.ids.keys())}


def catch_up(call, room, feed: RoomFeed) -> int:
    """Fetch what came after the last message before the feed's first hole (its newest
    when it has none: a reconnect), page by page, through `call(event, data)` (a
    Socket.IO client's call); how many were new to it."""
    after, new = feed.after_id, 0
    while after is not None:
        ack = call("joinRoom", {"roomId": room, "after": after})
        missed = ack.get("missed") if isinstance(ack, dict) else None
        if not missed:
            break
        new += feed.caught(missed)
        after = missed[-1]["id"] if len(missed) >= PAGE else None
    return new


class SessionClosed(Exception):
    """The Engine.IO session ended before the server accepted the Socket.IO connect."""


def hang_up(sio: socketio.Client) -> None:
    """Close a session without waiting for its long-poll to return. Behind round robin
    (stage 6p) the close may reach the host that does not know the session, and the
    GET pending on the other one then waits out the server's ping interval: Locust's
    stop waited 15-20 s for it. The server ends the session on the close packet or at
    its ping timeout."""
    sio.eio.disconnect(abort=True)


def connect(sio: socketio.Client, url: str, token: str, transport_name: str,
            timeout: float) -> None:
    """Connect and wait for the namespace, failing as soon as the Engine.IO session drops.

    python-socketio's own wait (`connect(wait=True)`) sits out its whole timeout
    when the session closes under it, as a polling session does whose POST lands on
    the app host that did not open it (stage 6p): the failure would come 10 s late,
    after a short run has stopped its users, and never be counted.
    """
    sio.connect(url, auth={"token": token}, transports=[transport_name], wait=False)
    deadline = time.monotonic() + timeout
    while "/" not in sio.namespaces:
        if sio.failed_namespaces:
            raise socketio.exceptions.ConnectionError("the server refused the connect")
        if sio.eio.state != "connected":
            raise SessionClosed(f"the Engine.IO session closed before the connect was answered "
                                f"({transport_name}; several app hosts without sticky sessions?)")
        if time.monotonic() > deadline:
            sio.disconnect()
            raise TimeoutError(f"no connect ack within {timeout} s")
        time.sleep(0.05)  # a greenlet's sleep under Locust


class AckError(Exception):
    """A Socket.IO ack that is an `{error, message}` or lacks a field."""


def check_ack(ack, meta: dict, *keys: str) -> None:
    """Record the ack's size; raise AckError (a failure in the stats) if it is wrong."""
    meta["response_length"] = len(json.dumps(ack))
    if isinstance(ack, dict) and "error" in ack:
        raise AckError(f"{ack.get('error')}: {ack.get('message')}")
    missing = [k for k in keys if not isinstance(ack, dict) or k not in ack]
    if missing:
        raise AckError(f"ack lacks {', '.join(missing)}: {str(ack)[:200]}")
