"""``flask seed-users``: many users, friendships and rooms for the load tests.

Fast because it is pipelined: commands are sent to Redis in batches (one
round trip per batch instead of per command), and the password is hashed
ONCE per run. All seeded users share that password and that hash: the hash
function is deliberately slow (tens of ms of CPU), 1,000 separate hashes
would take most of a minute, and these are throw-away load-test accounts.
Their logins still pay the full hash check, as a real login does.

Seeded friendships are accepted ones (both sides asked), so each seeded
user can open its rooms at once.

``--rooms-of K`` also puts the users in group rooms of K members (consecutive
users, the last group what is left): the API makes rooms of two friends only,
and the capacity study (benchmarks/studies/capacity) needs rooms whose every
message reaches K sockets. A group room is a members set like a pair's, so the
membership check, the Socket.IO events and the history work on it unchanged;
each user's entry in the credentials file names its group room (``room``).

Re-runnable: users are keyed by email (``<prefix><n>@lab.test``). Running it
again with the same prefix reuses the existing users (same ids), resets their
password to this run's (which revokes their old tokens), and re-adds
friendships and rooms (both idempotent).
Use another ``--prefix`` for a separate population.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import click
from flask import Flask, current_app
from flask.cli import with_appcontext
from werkzeug.security import generate_password_hash

from . import chat_store
from .redis_store import get_redis
from .tokens import new_token_key

BATCH = 1000  # commands per pipeline round trip
DEFAULT_PASSWORD = "lab-password-1234"


def friend_pairs(count: int, friends: int) -> list[tuple[int, int]]:
    """Index pairs (i < j) that give each of `count` users `friends` friends.

    A ring: user i befriends i±1 .. i±friends//2; an odd `friends` adds the
    user opposite on the ring (exact when `count` is even, else one user gets
    one friend less). `friends` >= count-1 means everybody knows everybody.
    """
    if count < 2 or friends <= 0:
        return []
    if friends >= count - 1:
        return [(i, j) for i in range(count) for j in range(i + 1, count)]
    pairs = set()
    for i in range(count):
        for d in range(1, friends // 2 + 1):
            pairs.add(tuple(sorted((i, (i + d) % count))))
    if friends % 2:
        half = count // 2
        for i in range(half):
            pairs.add((i, i + half))
    return sorted(pairs)


def _batches(items, size=BATCH):
    for start in range(0, len(items), size):
        yield items[start:start + size]


def seed_users(r, count: int, friends: int, prefix: str = "user",
               password: str = DEFAULT_PASSWORD, hash_method: str = "scrypt") -> list[dict]:
    """Create (or refresh) the users, friendships and rooms; return the users."""
    width = max(4, len(str(count)))
    emails = [f"{prefix}{n:0{width}d}@lab.test".lower() for n in range(1, count + 1)]
    usernames = [f"{prefix}{n:0{width}d}" for n in range(1, count + 1)]
    password_hash = generate_password_hash(password, method=hash_method)  # once per run

    ids: list[int | None] = []
    for chunk in _batches(emails):
        pipe = r.pipeline(transaction=False)
        for email in chunk:
            pipe.get(chat_store.email_key(email))
        ids.extend(int(v) if v is not None else None for v in pipe.execute())

    missing = [i for i, user_id in enumerate(ids) if user_id is None]
    if missing:
        # Reserve a block of ids in one command instead of one INCR per user.
        last = r.incrby("next:user_id", len(missing))
        for offset, i in enumerate(missing):
            ids[i] = last - len(missing) + 1 + offset

    for chunk in _batches(list(range(count)), BATCH // 2):
        pipe = r.pipeline(transaction=False)
        for i in chunk:
            pipe.hset(chat_store.user_key(ids[i]), mapping={
                "id": ids[i], "email": emails[i], "username": usernames[i],
                "password": password_hash, "token_key": new_token_key()})
            pipe.set(chat_store.email_key(emails[i]), ids[i])
        pipe.execute()

    pairs = friend_pairs(count, friends)
    for chunk in _batches(pairs, BATCH // 3):
        pipe = r.pipeline(transaction=False)
        for a, b in chunk:
            chat_store.make_friends(pipe, ids[a], ids[b])  # accepted, no request
            chat_store.find_or_create_room(pipe, ids[a], ids[b])
        pipe.execute()

    return [{"email": emails[i], "password": password, "id": ids[i],
             "username": usernames[i]} for i in range(count)]


def seed_group_rooms(r, users: list[dict], size: int) -> None:
    """Consecutive users in rooms of `size` members (the last one what is left, at least
    two); each user dict gets its room's id as ``room``. New rooms on every call."""
    groups = [users[i:i + size] for i in range(0, len(users), size)]
    if len(groups) > 1 and len(groups[-1]) < 2:
        groups[-2].extend(groups.pop())  # a room of one would be nobody's chat
    last = r.incrby("next:room_id", len(groups))
    for chunk_start in range(0, len(groups), BATCH):
        pipe = r.pipeline(transaction=False)
        for n, group in enumerate(groups[chunk_start:chunk_start + BATCH], chunk_start):
            room_id = last - len(groups) + 1 + n
            pipe.sadd(chat_store.members_key(room_id), *(u["id"] for u in group))
            for user in group:
                user["room"] = room_id
        pipe.execute()


@click.command("seed-users")
@click.option("--count", default=1000, show_default=True, type=click.IntRange(min=1),
              help="Number of users.")
@click.option("--friends", default=5, show_default=True, type=click.IntRange(min=0),
              help="Friends per user (mutual); one room per friendship.")
@click.option("--out", "out", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="JSON file for the credentials: [{email, password, id, username}].")
@click.option("--prefix", default="user", show_default=True,
              help="Email prefix; another prefix gives another population.")
@click.option("--password", default=DEFAULT_PASSWORD, show_default=True,
              help="The password every seeded user gets.")
@click.option("--rooms-of", "rooms_of", default=None, type=click.IntRange(min=2),
              help="Also put the users in group rooms of this many members (consecutive "
                   "users); each user's entry names its room.")
@with_appcontext
def seed_users_command(count, friends, out, prefix, password, rooms_of):
    """Create COUNT users with FRIENDS friends each and a room per friendship."""
    if not prefix.replace("-", "").replace("_", "").replace(".", "").isalnum():
        raise click.BadParameter("use letters, digits, '-', '_' or '.'", param_hint="--prefix")
    started = time.perf_counter()
    users = seed_users(get_redis(), count, friends, prefix=prefix, password=password,
                       hash_method=current_app.config["PASSWORD_HASH_METHOD"])
    if rooms_of:
        seed_group_rooms(get_redis(), users, rooms_of)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(users, indent=1) + "\n")
    pairs = len(friend_pairs(count, friends))
    groups = f", {len({u['room'] for u in users})} group rooms" if rooms_of else ""
    click.echo(f"seeded {count} users, {pairs} friendships/rooms{groups} into "
               f"{current_app.config['REDIS_URL']} in {time.perf_counter() - started:.2f}s; "
               f"credentials in {out}")


def init_app(app: Flask) -> None:
    app.cli.add_command(seed_users_command)
