"""Verify that a running chat service answers correctly before measuring it.

As TechEmpower's toolset does before every benchmark: a load test against a
server that answers 500s (or the wrong thing, fast) measures nothing. This
walks the Chat API once with plain `requests`, checks every answer against
the contract, and records how the server treats a client's HTTP/1.1
connection (`Connection: close` from a sync worker, kept open by a
keep-alive worker).

Usage:

    python -m benchmarks.run.verify http://127.0.0.1:8000 [--json verify.json]
                                [--users-file users.json]

Exit status: 0 all checks pass, 1 some fail (each failure is printed with
what was expected and what came back), 2 nothing answers at the URL.
Importable: `verify(url, users_file=None) -> dict` with `ok`, `reachable`,
`url`, `checks` (`[{name, ok, detail}]`), `server_keepalive` (1 if the server
kept the connection open after a response, 0 if it closed it, None if
unknown), `connection_header` and `server_header` (as answered, "" if absent).

It writes to the instance: one or two fresh users, a friendship (asked by
one, asked back by the other: friendship is by consent), a room and one
message, posted twice with one Idempotency-Key (stored once). With
`--users-file`, the first seeded user logs in instead of a fresh one.
"""

from __future__ import annotations

import argparse
import http.client
import json
import sys
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import requests

from benchmarks.sandbox import hosts

TIMEOUT = (2.0, 5.0)  # connect, read: a healthy instance answers in milliseconds
PASSWORD = "verify-password-1234"


class CheckFailed(Exception):
    """A check's answer was not the contract's; the message says how."""


class Verifier:
    def __init__(self, url: str):
        self.url = url.rstrip("/")
        self.http = requests.Session()
        self.checks: list[dict] = []

    @contextmanager
    def check(self, name: str):
        """Record one check: ok unless the block raises (the detail says why)."""
        entry = {"name": name, "ok": False, "detail": ""}
        self.checks.append(entry)
        try:
            yield entry
        except CheckFailed as e:
            entry["detail"] = str(e)
        except requests.RequestException as e:
            entry["detail"] = f"request failed: {type(e).__name__}: {e}"
        else:
            entry["ok"] = True

    def call(self, method: str, path: str, status: int | tuple[int, ...], *keys: str,
             token: str | None = None, headers: dict | None = None, **kwargs):
        """Send a request; the JSON body if the status and keys are as expected."""
        headers = {**(headers or {}), **({"Authorization": f"Bearer {token}"} if token else {})}
        r = self.http.request(method, self.url + path, headers=headers, timeout=TIMEOUT,
                              **kwargs)
        wanted = status if isinstance(status, tuple) else (status,)
        if r.status_code not in wanted:
            raise CheckFailed(f"{method} {path}: expected {' or '.join(map(str, wanted))}, "
                              f"got {r.status_code}: {r.text.strip()[:200]}")
        try:
            body = r.json()
        except ValueError:
            raise CheckFailed(f"{method} {path}: not JSON: {r.text.strip()[:200]}") from None
        missing = [k for k in keys if not isinstance(body, dict) or k not in body]
        if missing:
            raise CheckFailed(f"{method} {path}: missing {', '.join(missing)} in "
                              f"{str(body)[:200]}")
        return body


def need(**values):
    """Fail a check whose prerequisite failed above (named in the message)."""
    missing = [name for name, value in values.items() if value is None]
    if missing:
        raise CheckFailed(f"skipped: needs {', '.join(missing)} (failed above)")


def connection_probe(url: str) -> dict:
    """One GET /healthz on a fresh HTTP/1.1 connection, then a second one on it.

    Returns the `Connection` and `Server` headers of the first answer and
    whether the second request was answered on the same connection.
    """
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    conn = cls(parts.hostname, port, timeout=TIMEOUT[1])
    path = (parts.path.rstrip("/") or "") + "/healthz"
    try:
        conn.request("GET", path)  # http.client speaks HTTP/1.1, no Connection header
        first = conn.getresponse()
        first.read()
        result = {"connection_header": first.getheader("Connection", ""),
                  "server_header": first.getheader("Server", "")}
        sock = conn.sock  # None once http.client saw the server close it
        if sock is None:
            result["server_keepalive"] = 0
            return result
        # The server may close without saying so: ask again on the same socket.
        conn.auto_open = 0  # never silently reconnect
        try:
            conn.request("GET", path)
            second = conn.getresponse()
            second.read()
            result["server_keepalive"] = 1
        except (http.client.HTTPException, OSError):
            result["server_keepalive"] = 0
        return result
    finally:
        conn.close()


@dataclass
class Session:
    """What the phases learn and pass on: the accounts, their tokens, the room."""

    fresh: str
    me: dict
    friend: dict
    token: str | None = None
    friend_token: str | None = None
    room: int | None = None


def check_server(v: Verifier, result: dict) -> bool:
    """/healthz answers, and how the server treats the connection; False if nobody answers."""
    with v.check("healthz") as c:
        try:
            body = v.call("GET", "/healthz", 200, "status")
        except requests.ConnectionError as e:
            result["reachable"] = False
            raise CheckFailed(f"nothing answers at {v.url} ({type(e).__name__}); "
                              f"is the server running, on that address and port?") from None
        c["detail"] = f"status {body['status']}"
    if not result["reachable"]:
        return False
    with v.check("connection probe") as c:
        try:
            result.update(connection_probe(v.url))
        except (http.client.HTTPException, OSError) as e:
            raise CheckFailed(f"GET /healthz on a fresh connection: {e}") from None
        c["detail"] = (f"Connection: {result['connection_header'] or '(absent)'}, "
                       f"server kept it open: {bool(result['server_keepalive'])}")
    return True


def accounts(v: Verifier, users_file: str | Path | None) -> Session:
    """The caller (a seeded user, or a fresh one registered here) and a fresh friend."""
    fresh = uuid.uuid4().hex[:10]
    friend = {"email": f"verify-friend-{fresh}@example.test", "password": PASSWORD,
              "username": f"verify-friend-{fresh}"}
    s = Session(fresh=fresh, me={}, friend=friend)
    if users_file:
        with v.check("seeded user") as c:
            users = json.loads(Path(users_file).read_text())
            if not users or not {"email", "password"} <= set(users[0]):
                raise CheckFailed(f"{users_file}: expected a list of {{email, password}}")
            s.me = {"email": users[0]["email"], "password": users[0]["password"]}
            c["detail"] = s.me["email"]
    else:
        s.me = {"email": f"verify-{fresh}@example.test", "password": PASSWORD,
                "username": f"verify-{fresh}"}
        with v.check("register") as c:
            body = v.call("POST", "/auth/register", 201, "id", "email", "username", json=s.me)
            s.me["id"] = body["id"]
            c["detail"] = f"id {body['id']}"
    with v.check("register friend") as c:
        body = v.call("POST", "/auth/register", 201, "id", "email", "username", json=friend)
        if body["email"] != friend["email"]:
            raise CheckFailed(f"registered {friend['email']}, answer says {body['email']}")
        friend["id"] = body["id"]
        c["detail"] = f"id {body['id']}"
    with v.check("register taken email -> 409"):
        v.call("POST", "/auth/register", 409, "error", "message", json=friend)
    return s


def log_in(v: Verifier, s: Session) -> None:
    with v.check("login") as c:
        body = v.call("POST", "/auth/login", 200, "access_token", "user",
                      json={"email": s.me["email"], "password": s.me["password"]})
        s.token, s.me["id"] = body["access_token"], body["user"].get("id")
        c["detail"] = f"user {s.me['id']}"
    with v.check("login friend"):
        s.friend_token = v.call("POST", "/auth/login", 200, "access_token",
                                json={"email": s.friend["email"],
                                      "password": s.friend["password"]})["access_token"]
    with v.check("login wrong password -> 401"):
        v.call("POST", "/auth/login", 401, "error",
               json={"email": s.friend["email"], "password": PASSWORD + "-wrong"})
    with v.check("me"):
        need(login=s.token)
        body = v.call("GET", "/users/me", 200, "id", "email", "username", token=s.token)
        if body["id"] != s.me["id"]:
            raise CheckFailed(f"/users/me is user {body['id']}, logged in as {s.me['id']}")


def befriend(v: Verifier, s: Session) -> None:
    """Friendship by consent: a stranger's email stays hidden until both have asked."""
    with v.check("getUserSecure of a stranger -> 404"):
        need(login=s.token, friend=s.friend.get("id"))
        v.call("GET", f"/users/getUserSecure/{s.friend['email']}", 404, "error", token=s.token)
    with v.check("ask friend -> 202"):
        need(login=s.token, friend=s.friend.get("id"))
        body = v.call("POST", "/users/friends", 202, "status", token=s.token,
                      json={"friendId": s.friend["id"]})
        if body["status"] != "requested":
            raise CheckFailed(f"expected status 'requested', got {body}")
    with v.check("friend requests"):
        need(login=s.friend_token)
        body = v.call("GET", "/users/friends/requests", 200, "incoming", "outgoing",
                      token=s.friend_token)
        if s.me["id"] not in [r.get("id") for r in body["incoming"]]:
            raise CheckFailed(f"user {s.me['id']} not in the friend's incoming requests: "
                              f"{str(body)[:200]}")
    with v.check("friend asks back -> 201"):
        need(login=s.friend_token, me=s.me.get("id"))
        v.call("POST", "/users/friends", 201, "friends", token=s.friend_token,
               json={"friendId": s.me["id"]})
    with v.check("friends list"):
        need(login=s.token, friend=s.friend.get("id"))
        body = v.call("GET", "/users/friends", 200, "friends", token=s.token)
        ids = [f.get("id") for f in body["friends"]]
        if s.friend["id"] not in ids:
            raise CheckFailed(f"friend {s.friend['id']} not in {ids[:20]}")
    with v.check("getUserSecure"):
        need(login=s.token, friend=s.friend.get("id"))
        body = v.call("GET", f"/users/getUserSecure/{s.friend['email']}", 200, "id", "email",
                      "username", token=s.token)
        if body["id"] != s.friend["id"]:
            raise CheckFailed(f"got user {body['id']}, expected {s.friend['id']}")
        if "password" in body:
            raise CheckFailed("the answer contains the password (hash)")


def chat(v: Verifier, s: Session) -> None:
    """One room per pair; a message posted (twice, with one Idempotency-Key) is stored once."""
    with v.check("find-or-create room") as c:
        need(login=s.token, friend=s.friend.get("id"))
        first = v.call("POST", "/rooms/find-or-create", 200, "roomId", token=s.token,
                       json={"friendId": s.friend["id"]})["roomId"]
        again = v.call("POST", "/rooms/find-or-create", 200, "roomId", token=s.token,
                       json={"friendId": s.friend["id"]})["roomId"]
        if again != first:
            raise CheckFailed(f"asked twice, got rooms {first} and {again}: one per pair")
        if s.friend_token:
            theirs = v.call("POST", "/rooms/find-or-create", 200, "roomId",
                            token=s.friend_token, json={"friendId": s.me["id"]})["roomId"]
            if theirs != first:
                raise CheckFailed(f"the friend got room {theirs}, not {first}")
        s.room = first
        c["detail"] = f"room {s.room}"

    posted = None
    content = f"verify {s.fresh}"
    with v.check("post message") as c:
        need(login=s.token, room=s.room)
        kwargs = {"token": s.token, "json": {"content": content},
                  "headers": {"Idempotency-Key": f"verify-{s.fresh}"}}
        posted = v.call("POST", f"/rooms/{s.room}/messages", 201, "id", "ts", **kwargs)
        retried = v.call("POST", f"/rooms/{s.room}/messages", 201, "id", "ts", **kwargs)
        if retried["id"] != posted["id"]:
            raise CheckFailed(f"the retry stored message {retried['id']} besides "
                              f"{posted['id']}")
        c["detail"] = f"id {posted['id']}, the same for a retry with its Idempotency-Key"
    with v.check("read messages"):
        need(login=s.token, message=posted)
        body = v.call("GET", f"/rooms/{s.room}/messages?limit=10", 200, "messages",
                      token=s.token)
        mine = [m for m in body["messages"] if m.get("content") == content]
        if [m.get("id") for m in mine] != [posted["id"]]:
            raise CheckFailed(f"expected message {posted['id']} ({content!r}) once in the "
                              f"last 10: {str(body['messages'])[:200]}")


def refusals(v: Verifier, s: Session) -> None:
    with v.check("bad token -> 401 JSON"):
        v.call("GET", "/users/me", 401, "error", "message", token="not-a-valid-token")
    with v.check("no token -> 401 JSON"):
        v.call("GET", "/users/me", 401, "error", "message")
    with v.check("kv") as c:
        key = f"verify-{s.fresh}"
        body = v.call("GET", f"/kv/{key}", 200, "key", "value")
        if body["key"] != key or body["value"] in (None, ""):
            raise CheckFailed(f"expected {{key: {key}, value: <the time>}}, got {body}")
        c["detail"] = f"value {body['value']}"


def verify(url: str, users_file: str | Path | None = None) -> dict:
    """Check the chat service at `url` against the Chat API contract, phase by phase."""
    v = Verifier(url)
    result = {"url": v.url, "ok": False, "reachable": True, "checks": v.checks,
              "server_keepalive": None, "connection_header": "", "server_header": ""}
    if not check_server(v, result):
        return result
    session = accounts(v, users_file)
    for phase in (log_in, befriend, chat, refusals):
        phase(v, session)
    result["ok"] = all(c["ok"] for c in v.checks)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.run.verify",
        description="Check a running chat service against the Chat API before measuring it.")
    parser.add_argument("url", help="base URL of the instance, e.g. http://127.0.0.1:8000")
    parser.add_argument("--json", dest="json_out", type=Path,
                        help="also write the result as JSON to this file")
    parser.add_argument("--users-file", type=Path,
                        help="log in as the first user of this `flask seed-users` file "
                             "instead of registering one")
    args = parser.parse_args(argv)
    refusal = hosts.outside_refusal(args.url, f"python -m benchmarks.run.verify {args.url}")
    if refusal:
        print(f"verify: {refusal}", file=sys.stderr)
        return 2

    result = verify(args.url, users_file=args.users_file)
    if args.json_out:
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        args.json_out.write_text(json.dumps(result, indent=1) + "\n")

    if not result["reachable"]:
        print(f"verify: {result['checks'][0]['detail']}", file=sys.stderr)
        return 2
    for c in result["checks"]:
        detail = f": {c['detail']}" if c["detail"] else ""
        print(f"{'ok  ' if c['ok'] else 'FAIL'} {c['name']}{detail}")
    failed = [c["name"] for c in result["checks"] if not c["ok"]]
    print(f"server: {result['server_header'] or '?'}, Connection: "
          f"{result['connection_header'] or '(absent)'}, "
          f"keep-alive: {result['server_keepalive']}")
    if failed:
        print(f"verify: {len(failed)} check(s) failed at {result['url']}: {', '.join(failed)}",
              file=sys.stderr)
        return 1
    print(f"verify: all {len(result['checks'])} checks passed at {result['url']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
