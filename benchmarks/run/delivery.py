"""Does a Socket.IO message sent on one app host reach a room member on another?

With several app servers, Flask-SocketIO hands an emit for sockets it does not
hold to its message queue (Redis here), and every server delivers it to its own
sockets. This probe shows it happened. Two seeded users who are friends log in,
one on each app host (each URL is an app host itself, not the proxy, so each
socket's server is known), find their room, connect Socket.IO (websocket) with
their tokens and join it. The sender sends `--messages` messages one after the
other, each acknowledged once Redis stored it; the member counts the room's
`newMessage` events carrying them and checks that the room's `seq` rises by one
from each to the next. What it missed live it then fetches from the history
(`joinRoom {after}`, as benchmarks/chat_socket.py does): the result
counts both (`missed_live`, `caught_up`) and what is missing even so. With
`--over-http` the sender opens no socket and posts each message over HTTP
(`POST /rooms/<id>/messages`, stored once answered 201) instead, and the member
too logs in and finds its room there, connecting only its socket to its URL:
stage 9, where granian serves the HTTP API and gunicorn's gevent worker the
websockets, on two ports of one app host (its twins: eventlet, threads, or an
asyncio server that serves Socket.IO alone).

    python -m benchmarks.run.delivery http://198.18.0.30:8000 http://198.18.0.31:8000 \\
        --users-file results/up/06-scale-out/users.json [--messages 20] [--json F]
    python -m benchmarks.run.delivery http://198.18.0.30:8000 http://198.18.0.30:8001 \\
        --users-file results/up/09-rust-http-server/users.json --over-http

Run it on a lab host (`lab exec -- ...`): the lab's addresses exist only there.
Writes `{sent, received, seq_gaps, missed_live, caught_up, missing, from, to,
sender_pid, member_pid, over}` (`over`: `socketio` or `http`, where `sender_pid` is
None); exit 0 when every message arrived live and in order, 1 when not, 2 on bad
input or when a URL does not answer.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import threading
import time
import uuid
from pathlib import Path

from benchmarks.sandbox import hosts

# requests and socketio are imported where they are used: the lab imports this module
# (through crash.py) for `lab list` and `--help`, which need neither, and socketio
# alone takes 0.15 s to import. The probe itself runs in a process of its own.

TIMEOUT = 5.0  # seconds for a login, an ack, the last message to arrive


class ProbeError(Exception):
    """The probe could not get as far as sending (login, room, connect)."""


def log_in(url: str, account: dict) -> tuple[str, dict]:
    import requests

    r = requests.post(f"{url}/auth/login", timeout=TIMEOUT,
                      json={"email": account["email"], "password": account["password"]})
    if r.status_code != 200:
        raise ProbeError(f"login of {account['email']} at {url}: {r.status_code} {r.text[:200]}")
    body = r.json()
    return body["access_token"], body["user"]


def pair(url: str, accounts: list[dict]) -> tuple[dict, dict]:
    """Two seeded accounts that are friends (`flask seed-users --friends`)."""
    import requests

    by_email = {a["email"]: a for a in accounts}
    for account in accounts:
        token, _ = log_in(url, account)
        r = requests.get(f"{url}/users/friends", timeout=TIMEOUT,
                         headers={"Authorization": f"Bearer {token}"})
        friends = r.json().get("friends", []) if r.status_code == 200 else []
        for friend in friends:
            if friend.get("email") in by_email:
                return account, by_email[friend["email"]]
    raise ProbeError("no two seeded users are friends (seed with --friends 1 or more)")


class Member:
    """A user connected to one app host, in the pair's room, noting what arrives. Its
    HTTP requests go to `http_url` when given (a Socket.IO server of its own, such as
    stage 9a's asyncio one, serves no HTTP API), its socket to `url`."""

    def __init__(self, url: str, account: dict, friend_id: int, http_url: str | None = None):
        import requests
        import socketio

        self.url, self.http_url = url, http_url or url
        self.token, self.user = log_in(self.http_url, account)
        r = requests.post(f"{self.http_url}/rooms/find-or-create", json={"friendId": friend_id},
                          headers={"Authorization": f"Bearer {self.token}"}, timeout=TIMEOUT)
        if r.status_code != 200:
            raise ProbeError(f"find-or-create at {self.http_url}: {r.status_code} "
                             f"{r.text[:200]}")
        self.room = r.json()["roomId"]
        self.arrived: list[dict] = []
        self.changed = threading.Condition()
        self.sio = socketio.Client(reconnection=False)
        self.sio.on("newMessage", self.on_message)

    def on_message(self, message):
        if isinstance(message, dict) and str(message.get("roomId")) == str(self.room):
            with self.changed:
                self.arrived.append(message)
                self.changed.notify_all()

    def history_after(self, after: int) -> set[int]:
        """The ids stored in the room after message `after`: how a client catches up
        (`joinRoom {after}`, 200 a page)."""
        ids: set[int] = set()
        while True:
            ack = self.sio.call("joinRoom", {"roomId": self.room, "after": after},
                                timeout=TIMEOUT)
            missed = ack.get("missed") if isinstance(ack, dict) else None
            if not missed:
                return ids
            ids |= {m["id"] for m in missed}
            after = missed[-1]["id"]

    def join(self) -> int:
        """Connect and join the room; the pid of the worker that holds the socket."""
        import socketio

        try:
            self.sio.connect(self.url, auth={"token": self.token}, transports=["websocket"],
                             wait_timeout=TIMEOUT)
            ack = self.sio.call("joinRoom", {"roomId": self.room}, timeout=TIMEOUT)
        except (socketio.exceptions.SocketIOError, OSError) as e:
            raise ProbeError(f"Socket.IO at {self.url}: {type(e).__name__}: {e}") from None
        if not (isinstance(ack, dict) and ack.get("ok")):
            raise ProbeError(f"joinRoom at {self.url}: {ack}")
        return ack.get("pid")

    def send(self, content: str) -> int | None:
        """A message sent on this user's socket; its id once acknowledged (None: not)."""
        ack = self.sio.call("sendMessage", {"roomId": self.room, "content": content,
                                            "clientId": uuid.uuid4().hex}, timeout=TIMEOUT)
        return ack["id"] if isinstance(ack, dict) and "id" in ack else None

    def post(self, content: str) -> int | None:
        """A message posted over HTTP; its id once stored (201), None otherwise."""
        import requests

        r = requests.post(f"{self.http_url}/rooms/{self.room}/messages",
                          json={"content": content},
                          headers={"Authorization": f"Bearer {self.token}",
                                   "Idempotency-Key": uuid.uuid4().hex}, timeout=TIMEOUT)
        return r.json().get("id") if r.status_code == 201 else None

    def wait_for(self, contents: set[str], timeout: float) -> list[dict]:
        """The messages with these contents that arrived within `timeout`, in order."""
        def mine():
            return [m for m in self.arrived if m.get("content") in contents]
        with self.changed:
            self.changed.wait_for(lambda: len(mine()) >= len(contents), timeout)
            return mine()


def probe(sender_url: str, member_url: str, accounts: list[dict], messages: int,
          over_http: bool = False) -> dict:
    a, b = pair(sender_url, accounts)
    # over HTTP, the member's own HTTP requests (login, its room) go to the HTTP server too
    member = Member(member_url, b, a["id"], http_url=sender_url if over_http else None)
    sender = Member(sender_url, a, b["id"])
    try:
        pids = (None if over_http else sender.join()), member.join()
        tag = uuid.uuid4().hex[:8]
        contents, acked = set(), set()
        for i in range(messages):
            content = f"delivery probe {tag} {i + 1}"
            sent = sender.post(content) if over_http else sender.send(content)
            if sent is not None:
                contents.add(content)
                acked.add(sent)
        started = time.monotonic()
        got = member.wait_for(contents, TIMEOUT)
        seqs = [m.get("seq") for m in got]
        gaps = sum(1 for x, y in itertools.pairwise(seqs)
                   if not (isinstance(x, int) and y == x + 1))
        missed = acked - {m.get("id") for m in got}
        fetched = member.history_after(min(acked) - 1) if missed else set()
        return {"sent": len(acked), "received": len(got), "seq_gaps": gaps,
                "missed_live": len(missed), "caught_up": len(missed & fetched),
                "missing": len(missed - fetched), "asked": messages,
                "from": sender_url, "to": member_url, "room": sender.room,
                "sender_pid": pids[0], "member_pid": pids[1],
                "over": "http" if over_http else "socketio",
                "waited_s": round(time.monotonic() - started, 3)}
    finally:
        for m in (sender, member):
            if m.sio.connected:
                m.sio.disconnect()


def main(argv: list[str] | None = None) -> int:
    import requests

    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.run.delivery",
        description="Send Socket.IO messages on one app host; count them on another.")
    parser.add_argument("sender", help="the sender's app host, e.g. http://198.18.0.30:8000")
    parser.add_argument("member", help="the member's app host, e.g. http://198.18.0.31:8000")
    parser.add_argument("--users-file", type=Path, required=True,
                        help="`flask seed-users --friends N --out FILE`'s file")
    parser.add_argument("--messages", type=int, default=20, help="messages to send (20)")
    parser.add_argument("--json", dest="json_out", type=Path, help="write the result here")
    parser.add_argument("--over-http", action="store_true",
                        help="post each message over HTTP to the sender's URL (no socket "
                             "there): a server with the HTTP API only, such as stage 9's")
    args = parser.parse_args(argv)
    if not 1 <= args.messages <= 1000:
        parser.error(f"--messages must be 1-1000 (got {args.messages})")
    for url in (args.sender, args.member):
        refusal = hosts.outside_refusal(url, " ".join([
            "python -m benchmarks.run.delivery", args.sender, args.member,
            "--users-file", str(args.users_file)]))
        if refusal:
            print(f"delivery: {refusal}", file=sys.stderr)
            return 2
    try:
        accounts = json.loads(args.users_file.read_text())
        accounts = accounts["users"] if isinstance(accounts, dict) else accounts
        result = probe(args.sender.rstrip("/"), args.member.rstrip("/"), accounts,
                       args.messages, args.over_http)
    except (OSError, ValueError, KeyError, ProbeError, requests.RequestException) as e:
        print(f"delivery: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    if args.json_out:
        args.json_out.write_text(json.dumps(result, indent=1) + "\n")
    ok = result["received"] == result["sent"] == args.messages and result["seq_gaps"] == 0
    how = "posted over HTTP to" if args.over_http else "sent on"
    print(f"delivery: {result['received']} of {result['sent']} messages {how} "
          f"{result['from']} (pid {result['sender_pid']}) reached the member on "
          f"{result['to']} (pid {result['member_pid']}); seq gaps {result['seq_gaps']}; "
          f"missed live {result['missed_live']}, caught up from the history "
          f"{result['caught_up']}, missing {result['missing']}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
