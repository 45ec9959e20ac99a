"""The chat service under load: the lab's Locust scenario.

What it teaches: how a realistic mix of chat traffic (log in once, then read
a room's history, post, list friends, ...) and long-lived Socket.IO
connections load each stage of the stack. The book's one-URL benchmark is
`benchmarks/kv.py`.

Run it against any running instance (it never imports the app):

    locust                                     # pyproject.toml names this file
    locust -f benchmarks/chat.py --host http://127.0.0.1:8000 \\
        --headless -u 50 -r 10 -t 30s --csv results/chat ChatUser SocketIOChatUser

- `ChatUser` (weight 4): HTTP chat traffic, weighted tasks, responses validated.
- `SocketIOChatUser` (weight 1): one Socket.IO connection (websocket transport
  only, so no sticky sessions are needed behind several gunicorn workers) that
  joins a room and sends a message every `--chat-socketio-pace` seconds; each
  ack's round trip is a `WSIO sendMessage` request in Locust's stats, which
  the lab reports apart from the HTTP requests. It listens to its room too and
  catches up on what it missed (a jump in `seq`, a reconnect: chat_socket.py),
  counted in the sessions file (`missed_live`, `caught_up`, `missing`).

Every chat user logs in once when it starts, and the app's password check
costs tens of milliseconds of CPU by design: the first seconds of a run are a
login burst. Warm up before recording (the lab does). Every message carries a
key (an `Idempotency-Key` header over HTTP, a `clientId` over Socket.IO) and a
message that failed (a 503, a timeout) is sent again with the same key by the
user's next post, as a real client retries: the service stores it once.

A step load that finds the saturation point lives in `step_load.py`:
`locust -f benchmarks/chat.py,benchmarks/step_load.py --headless ChatUser`.
Debug one scenario in-process: `python benchmarks/chat.py` (runs one ChatUser
against CHAT_HOST, default http://127.0.0.1:8000).

Settings (the web UI's form, `LOCUST_CHAT_...` variables, or `--chat-...` on the
command line; the older `CHAT_...` variables still give their defaults). Locust's
own `--help` cannot list them: it prints before it loads a locustfile
(locustio/locust#2917); `python -m benchmarks.chat --help` prints Locust's help
with them:
- `--chat-users-file`: JSON list of `{email, password, ...}` written by
  `flask --app app seed-users --out FILE` (seeded friendships are accepted).
  Each simulated user logs in as the next entry, cycling (per Locust
  process). Empty: each simulated user registers a fresh account and, when
  it has no friend, a friend too; friendship is by consent, so the friend
  logs in and asks back.
- `--chat-wait-min`, `--chat-wait-max`: seconds a chat user waits between
  tasks (default 0.05 and 0.2: heavy load, but still a think time).
- `--chat-socketio-users`: run exactly this many `SocketIOChatUser`s, the
  rest of `-u` going to `ChatUser` (default 0: by weight). The lab runs 10
  on top of its HTTP users, so every stage has the same HTTP load.
- `--chat-socketio-pace`: seconds between one Socket.IO user's messages
  (default 1: a chatty person, not a load generator).
- `--chat-failure-backoff`: least seconds a chat user waits for a second after
  a failed request (default 0.1), as a real client backs off: stage 4's fast
  502s would otherwise keep Locust at 100% of its core.
- `--chat-sessions-file`: a JSON file for the Socket.IO users' sessions
  (created, completed, failed, their lengths), written as the test stops; in
  distributed mode by the master, with every worker's added up (worker_messages.py).
- `--latency-file` (not a `--chat-` setting: it takes every request): an
  HdrHistogram log (.hlog) of every request's time, µs to 3 significant digits,
  written as the test stops (by the master, every worker's added up; default:
  `latency.hlog` beside `--json-file`'s, when given, as in the lab's runs).
- `--chat-burst-every`: seconds between bursts (default 0: a steady load). Every
  chat user waits for the next multiple of it on the clock (plus up to
  `BURST_JITTER`), so all of them send together and then leave their
  connections idle: the idle gaps that the keep-alive race (stage 5k, lab 11)
  needs, and that a steady load never leaves in Nginx's pool. Each burst, a
  chat user posts to its room, or reads it one time in three.
"""

from __future__ import annotations

import itertools
import math
import os
import random
import time
import uuid
from dataclasses import dataclass

from locust import FastHttpUser, constant_pacing, events, run_single_user, task

# isort: split
# After locust, whose import monkey-patches the standard library for gevent: socketio
# pulls in requests and ssl (else `python benchmarks/chat.py` dies in a RecursionError).
import socketio

try:
    from benchmarks import chat_socket, lab_range, latency_log, worker_messages
    from benchmarks.chat_mix import HISTORY_LIMIT, WEIGHTS
    from benchmarks.chat_socket import RoomFeed, SessionClosed, catch_up, check_ack, connect
except ImportError:  # `python benchmarks/chat.py`: this file's folder is on the path
    import chat_socket
    import lab_range
    import latency_log
    import worker_messages
    from chat_mix import HISTORY_LIMIT, WEIGHTS
    from chat_socket import RoomFeed, SessionClosed, catch_up, check_ack, connect

# a lab address (198.18.0.0/15) only from a lab host: from here it would leave the machine
lab_range.guard_locust(events)
# a worker's figures and accounts travel in Locust's messages, never through files
worker_messages.install(events)
# every request's time in an HdrHistogram too (--latency-file), every worker's added up
latency_log.install(events)
worker_messages.figures("latency", latency_log.figures, "latency_file", save=latency_log.save)

HOST = os.environ.get("CHAT_HOST", "http://127.0.0.1:8000")


@dataclass(frozen=True)
class Option:
    """A scenario setting: a Locust option (`--chat-...`, `LOCUST_CHAT_...`, the web UI's
    form), whose default still comes from the older `CHAT_...` variable when set."""

    name: str  # the part after --chat-
    type: type
    default: object
    help: str

    @property
    def dest(self) -> str:
        return "chat_" + self.name.replace("-", "_")

    def initial(self):
        return self.type(os.environ.get("CHAT_" + self.name.upper().replace("-", "_"),
                                        self.default))


OPTIONS = (
    Option("users-file", str, "", "JSON list of {email, password} written by `flask --app "
           "app seed-users --out FILE`; empty: each user registers a fresh account"),
    Option("wait-min", float, 0.05, "least seconds a chat user waits between tasks"),
    Option("wait-max", float, 0.2, "most seconds a chat user waits between tasks"),
    Option("socketio-users", int, 0, "run exactly this many SocketIOChatUsers, the rest "
           "of the users going to the other classes (0: by weight)"),
    Option("socketio-pace", float, 1.0, "seconds between the messages of one Socket.IO user"),
    Option("socketio-transport", str, "websocket", "the Socket.IO users' transport: "
           "websocket, or polling (long-polling: every poll a new HTTP request, which "
           "several app servers must route to the one that holds the session)"),
    Option("failure-backoff", float, 0.1, "least seconds a chat user waits after a failed "
           "request, as a real client backs off"),
    Option("sessions-file", str, "", "write the Socket.IO sessions (created, completed, "
           "failed, their lengths) to this JSON file when the test stops"),
    Option("burst-every", float, 0.0, "seconds between bursts: every chat user sends its next "
           "request at the same moments, this far apart, and leaves its connection idle in "
           "between (the keep-alive race, stage 5k); 0: a steady load"),
)


@events.init_command_line_parser.add_listener
def add_options(parser):
    for opt in OPTIONS:
        parser.add_argument(f"--chat-{opt.name}", type=opt.type, default=opt.initial(),
                            env_var=f"LOCUST_CHAT_{opt.name.upper().replace('-', '_')}",
                            help=f"chat scenario: {opt.help}")


def setting(environment, name: str):
    """A scenario setting as this run has it (its default when run outside Locust's CLI)."""
    opt = next(o for o in OPTIONS if o.name == name)
    parsed = getattr(environment, "parsed_options", None)
    return getattr(parsed, opt.dest, None) if parsed is not None else opt.initial()


@events.request.add_listener
def note_failure(exception=None, context=None, **_kwargs):
    """Remember when a user's request failed, for its back-off (SignedInUser.wait_time)."""
    user = (context or {}).get("user")
    if exception is not None and user is not None:
        user.failed_at = time.monotonic()


@events.test_start.add_listener
def apply_fixed_count(environment, **_kwargs):
    # Locust reads fixed_count when it spreads the users over the classes
    SocketIOChatUser.fixed_count = setting(environment, "socketio-users")
# A burst's requests spread over this many seconds (--chat-burst-every), so that the
# idle times of the connections they find in Nginx's pool spread around the app's
# keep-alive rather than all missing its close by the same few milliseconds.
BURST_JITTER = 0.05
SOCKET_TIMEOUT = 10  # seconds for a Socket.IO connect or ack
PASSWORD = "load-test-password"


@dataclass
class Chat:
    """A signed-in simulated user: token, own record, one friend, their room."""

    token: str
    user: dict
    friend: dict
    room_id: str

    @property
    def headers(self) -> dict:
        return {"Authorization": f"Bearer {self.token}"}


_seeded: list[dict] | None = None
_next_seeded = itertools.count()


def seeded_users(path: str, environment=None) -> list[dict]:
    """The users file's entries (read once; on a Locust worker, the master's, sent as it
    joined), or [] when there is none."""
    global _seeded
    if _seeded is None:
        sent = worker_messages.accounts(environment, path) if environment else None
        _seeded = sent if sent is not None else (
            worker_messages.read_accounts(path) if path else [])
        if path and not _seeded:
            raise ValueError(f"--chat-users-file {path} holds no users")
    return _seeded


def expect(response, status: int, *keys: str):
    """The JSON body if `response` has `status` and `keys`; else mark it failed, None."""
    if response.status_code != status:
        text = (response.text or "").strip()[:200]
        response.failure(f"expected {status}, got {response.status_code}: {text}")
        return None
    try:
        body = response.json()
    except ValueError:
        response.failure(f"not JSON: {(response.text or '').strip()[:200]}")
        return None
    missing = [k for k in keys if not isinstance(body, dict) or k not in body]
    if missing:
        response.failure(f"missing {', '.join(missing)} in {str(body)[:200]}")
        return None
    return body


def register(client, prefix: str = "load") -> dict | None:
    """A fresh unique account: `{email, password, id, username}`, or None."""
    name = f"{prefix}-{uuid.uuid4().hex[:12]}"
    account = {"email": f"{name}@example.test", "password": PASSWORD, "username": name}
    with client.post("/auth/register", json=account, catch_response=True) as r:
        body = expect(r, 201, "id", "email", "username")
    return body and {**account, "id": body["id"]}


def open_chat(client, users_file: str, environment=None) -> Chat | None:
    """Log in (seeded account or a fresh one), find a friend, find-or-create their room.

    Every request is recorded in Locust's stats; on any failure the failure
    is recorded there too and None is returned (the caller tries again later).
    """
    users = seeded_users(users_file, environment)
    account = users[next(_next_seeded) % len(users)] if users else register(client)
    if not account:
        return None
    creds = {"email": account["email"], "password": account["password"]}
    with client.post("/auth/login", json=creds, catch_response=True) as r:
        body = expect(r, 200, "access_token", "user")
    if not body:
        return None
    token, user = body["access_token"], body["user"]
    headers = {"Authorization": f"Bearer {token}"}

    with client.get("/users/friends", headers=headers, catch_response=True) as r:
        body = expect(r, 200, "friends")
    if body is None:
        return None
    friends = body["friends"]
    friend = random.choice(friends) if friends else befriend_fresh(client, user, headers)
    if not friend:
        return None

    with client.post("/rooms/find-or-create", json={"friendId": friend["id"]}, headers=headers,
                     catch_response=True) as r:
        body = expect(r, 200, "roomId")
    if not body:
        return None
    return Chat(token=token, user=user, friend=friend, room_id=body["roomId"])


def befriend_fresh(client, user: dict, headers: dict) -> dict | None:
    """A fresh account made a friend: we ask (202), it logs in and asks back (201)."""
    friend = register(client, prefix="friend")
    if not friend:
        return None
    creds = {"email": friend["email"], "password": friend["password"]}
    with client.post("/auth/login", json=creds, catch_response=True) as r:
        body = expect(r, 200, "access_token")
    if not body:
        return None
    for asker, other, status in ((headers, friend["id"], 202),
                                 ({"Authorization": f"Bearer {body['access_token']}"},
                                  user["id"], 201)):
        with client.post("/users/friends", json={"friendId": other}, headers=asker,
                         catch_response=True) as r:
            if expect(r, status) is None:
                return None
    return friend


def messages_of(body) -> list | None:
    """The message list of a history response (a list, or `{messages: [...]}`)."""
    if isinstance(body, dict):
        body = body.get("messages")
    return body if isinstance(body, list) else None


class SignedInUser(FastHttpUser):
    """A user that opens a chat session first, and again whenever it has none."""

    abstract = True
    host = HOST
    failed_at = float("-inf")  # when this user's last request failed (note_failure)

    def wait_time(self):
        every = setting(self.environment, "burst-every")
        if every > 0:
            return until_next_burst(every, time.time())
        low = setting(self.environment, "wait-min")
        wait = random.uniform(low, max(low, setting(self.environment, "wait-max")))
        if time.monotonic() - self.failed_at < 1.0:
            # a failed request (Nginx's fast 502s in stage 4) makes a real client back
            # off; without it 50 users spin Locust at 100% of its core on 5,000 502s/s
            wait = max(wait, setting(self.environment, "failure-backoff"))
        return wait

    def context(self) -> dict:
        return {"user": self}

    # Fail fast instead of Locust's 60 s: a stage that drops connections should
    # show errors, not hung users.
    connection_timeout = 5.0
    network_timeout = 10.0
    chat: Chat | None = None

    def on_start(self):
        self.signed_in()

    def signed_in(self) -> bool:
        """True when a session is open (opening one if needed: a stage may have
        refused the first try, e.g. Nginx's 502s; keep the load going)."""
        if self.chat is None:
            self.chat = open_chat(self.client, setting(self.environment, "users-file"),
                                  self.environment)
        return self.chat is not None


def until_next_burst(every: float, now: float) -> float:
    """Seconds from `now` to this user's moment in the next burst: the next multiple of
    `every` on the wall clock (the same in every Locust process on the machine), plus
    a jitter; a burst less than half a period away is skipped, so that every
    connection stays idle about `every` seconds between two requests."""
    tick = (math.floor(now / every) + 1) * every
    if tick - now < every / 2:
        tick += every
    return tick - now + random.uniform(0, BURST_JITTER)


class Outbox:
    """The next message to send and its key; a failed one is sent again, same key."""

    def __init__(self, label: str):
        self.label, self.sent, self.pending = label, 0, None

    def next(self, username) -> tuple[str, str]:
        if self.pending is None:
            self.sent += 1
            self.pending = (f"{self.label} {self.sent} from {username}", uuid.uuid4().hex)
        return self.pending

    def delivered(self) -> None:
        self.pending = None


class ChatUser(SignedInUser):
    """HTTP chat traffic: mostly reading a room's history, some posting."""

    weight = 4
    outbox: Outbox | None = None

    def on_start(self):
        super().on_start()
        if setting(self.environment, "burst-every") > 0:
            # in bursts, a person in a group chat: posts to the room, or reads it (one
            # time in three), so that a POST and a GET both often meet a connection the
            # app is just closing
            self.tasks = [ChatUser.post_message, ChatUser.post_message, ChatUser.read_messages]

    @task(WEIGHTS["read_messages"])
    def read_messages(self):
        if not self.signed_in():
            return
        with self.client.get(f"/rooms/{self.chat.room_id}/messages?limit={HISTORY_LIMIT}",
                             name="/rooms/[id]/messages", headers=self.chat.headers,
                             catch_response=True) as r:
            body = expect(r, 200)
            if body is not None and messages_of(body) is None:
                r.failure(f"no message list in {str(body)[:200]}")

    @task(WEIGHTS["post_message"])
    def post_message(self):
        if not self.signed_in():
            return
        self.outbox = self.outbox or Outbox("message")
        content, key = self.outbox.next(self.chat.user.get("username"))
        with self.client.post(f"/rooms/{self.chat.room_id}/messages", json={"content": content},
                              name="/rooms/[id]/messages",
                              headers={**self.chat.headers, "Idempotency-Key": key},
                              catch_response=True) as r:
            if expect(r, 201, "id", "ts") is not None:
                self.outbox.delivered()

    @task(WEIGHTS["friends"])
    def friends(self):
        if not self.signed_in():
            return
        with self.client.get("/users/friends", headers=self.chat.headers,
                             catch_response=True) as r:
            body = expect(r, 200, "friends")
            if body is not None and not isinstance(body["friends"], list):
                r.failure(f"friends is not a list: {str(body)[:200]}")

    @task(WEIGHTS["find_or_create_room"])
    def find_or_create_room(self):
        if not self.signed_in():
            return
        with self.client.post("/rooms/find-or-create", json={"friendId": self.chat.friend["id"]},
                              headers=self.chat.headers, catch_response=True) as r:
            body = expect(r, 200, "roomId")
            if body is not None and body["roomId"] != self.chat.room_id:
                r.failure(f"one room per pair: got {body['roomId']}, had {self.chat.room_id}")

    @task(WEIGHTS["me"])
    def me(self):
        if not self.signed_in():
            return
        with self.client.get("/users/me", headers=self.chat.headers, catch_response=True) as r:
            body = expect(r, 200, "id", "email")
            if body is not None and body["id"] != self.chat.user.get("id"):
                r.failure(f"me is {body['id']}, logged in as {self.chat.user.get('id')}")

    @task(WEIGHTS["get_user_secure"])
    def get_user_secure(self):
        if not self.signed_in():
            return
        friend = self.chat.friend
        with self.client.get(f"/users/getUserSecure/{friend['email']}",
                             name="/users/getUserSecure/[email]", headers=self.chat.headers,
                             catch_response=True) as r:
            body = expect(r, 200, "id", "email", "username")
            if body is not None and body["id"] != friend["id"]:
                r.failure(f"got user {body['id']}, expected {friend['id']}")


class SocketIOChatUser(SignedInUser):
    """One Socket.IO connection per user: join a room, send, time each ack.

    python-socketio's sync client, on the websocket transport (websocket-client
    underneath), or long-polling with --chat-socketio-transport polling; under
    Locust's gevent monkey-patching its threads and sockets are greenlets, so a
    user waiting for an ack blocks no one else.
    `locust.contrib.socketio.SocketIOUser` was not used: it records every
    received broadcast and every emit as a 0 ms request (inflating the
    request rate) and cannot fail a request on an `{error}` ack.
    """

    weight = 1
    fixed_count = 0  # --chat-socketio-users, applied when the test starts

    def wait_time(self):
        # a steady background beside the HTTP load, reported apart from it (WSIO)
        return constant_pacing(setting(self.environment, "socketio-pace"))(self)
    sio: socketio.Client | None = None
    outbox: Outbox | None = None
    session_started: float | None = None  # when the session now open began (monotonic)
    feed: RoomFeed | None = None  # its room's messages as it saw them, across reconnects

    def on_start(self):
        self.connected()

    def on_stop(self):
        if self.sio is not None:
            self.end_session(None)  # lasted until the user stopped: completed
            chat_socket.hang_up(self.sio)

    def end_session(self, failure: Exception | None) -> None:
        """Count the session that ends now, completed or failed, with its length."""
        if self.session_started is None:
            return
        SESSIONS["completed" if failure is None else "failed"] += 1
        SESSIONS["lengths"].append(round(time.monotonic() - self.session_started, 3))
        self.session_started = None

    def measure(self, name: str):
        return self.environment.events.request.measure("WSIO", name)

    def connected(self) -> bool:
        """Signed in over HTTP, connected and in the room (reconnecting if dropped).

        Failures are recorded by `measure` (it records the exception instead of
        raising it) and retried on the next task.
        """
        if not self.signed_in():
            return False
        if self.sio is not None and self.sio.connected:
            return True
        if self.sio is not None:  # it was open and is not: the server ended it
            self.end_session(SessionClosed("the session was closed under the user"))
        self.sio = None
        sio = socketio.Client(reconnection=False)
        if self.feed is None:
            self.feed = RoomFeed()
            FEEDS.append(self.feed)
        sio.on("newMessage", self.feed.push)
        self.session_started = time.monotonic()
        SESSIONS["created"] += 1
        with self.measure("connect") as meta:
            connect(sio, self.host, self.chat.token, transport(self.environment), SOCKET_TIMEOUT)
        if meta["exception"] is None:
            with self.measure("joinRoom") as meta:
                ack = sio.call("joinRoom", {"roomId": self.chat.room_id}, timeout=SOCKET_TIMEOUT)
                check_ack(ack, meta)
        if meta["exception"] is not None:
            chat_socket.hang_up(sio)
            self.end_session(meta["exception"])
            return False
        self.sio = sio
        self.catch_up()  # what was sent while it was away (nothing on the first connect)
        return True

    def catch_up(self) -> None:
        """Fetch what its feed lacks; a failure here shows in the next task's."""
        try:
            catch_up(lambda *a: self.sio.call(*a, timeout=SOCKET_TIMEOUT), self.chat.room_id,
                     self.feed)
        except (socketio.exceptions.SocketIOError, OSError):
            pass

    @task
    def send_message(self):
        if not self.connected():
            return
        if self.feed.gap:  # `seq` jumped: the server's queue listener was away
            self.catch_up()
        self.outbox = self.outbox or Outbox("socket message")
        content, key = self.outbox.next(self.chat.user.get("username"))
        with self.measure("sendMessage") as meta:
            ack = self.sio.call("sendMessage", {"roomId": self.chat.room_id, "content": content,
                                                "clientId": key}, timeout=SOCKET_TIMEOUT)
            check_ack(ack, meta, "id", "ts")
        if meta["exception"] is None:
            self.outbox.delivered()


# The Socket.IO users' sessions, as Artillery reports its virtual users: created, completed
# (open until their user stopped), failed (refused, or closed under the user), and their
# lengths (s). Apart from Locust's request stats, whose Aggregated row a session's tens of
# seconds would swamp: a worker reports its own to the master, which writes the sum.
SESSIONS = {"created": 0, "completed": 0, "failed": 0, "lengths": []}
FEEDS: list[RoomFeed] = []  # each Socket.IO user's: what it missed live, caught up, lacks


@events.test_start.add_listener
def reset_sessions(**_kwargs):
    """A new test counts from zero: `lab up`'s Locust runs one test after another."""
    SESSIONS.update(created=0, completed=0, failed=0, lengths=[])
    FEEDS.clear()


def sessions(_environment) -> dict:
    """This process's sessions and what its users' feeds missed (--chat-sessions-file)."""
    counts = [feed.counts() for feed in FEEDS]
    feeds = {k: sum(c[k] for c in counts) for k in ("missed_live", "caught_up", "missing")}
    return {**SESSIONS, **feeds}


worker_messages.figures("sessions", sessions, "chat_sessions_file")


def transport(environment) -> str:
    value = setting(environment, "socketio-transport")
    if value not in ("websocket", "polling"):
        raise ValueError(f"--chat-socketio-transport {value!r}: websocket or polling")
    return value


def print_help() -> None:
    """Locust's --help with this scenario's options, which `locust -f ... --help` omits."""
    from locust.argument_parser import get_parser

    parser = get_parser()  # fires init_command_line_parser: add_options is registered
    parser.usage = "locust -f benchmarks/chat.py [options] [UserClass ...]"
    parser.print_help()


if __name__ == "__main__":
    import sys

    if {"-h", "--help"} & set(sys.argv[1:]):
        print_help()
    else:
        run_single_user(ChatUser)
