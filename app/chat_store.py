"""The chat's data in Redis: users, friendships, rooms and messages.

Key layout (one place to read it)::

    next:user_id              INCR counter for user ids
    user:<id>                 hash {id, email, username, password}  (password = hash)
    user:email:<email>        string -> user id  (the login index, lower-cased email)
    user:<id>:friends         set of friend ids (friendship is mutual: both sets)
    next:room_id              INCR counter for room ids
    room:pair:<lo>:<hi>       string -> room id of the pair (lo < hi): one room per pair
    room:<id>:members         set of member ids (a room exists iff this set does)
    room:<id>:messages        list of message JSON, oldest first, trimmed to ROOM_HISTORY_MAX
    next:message_id           INCR counter for message ids (unique across rooms)

Steps that must not interleave with a concurrent request (register, create
a room, check membership and store a message) run as Lua scripts: Redis
executes a script atomically, in one round trip. The scripts build a few key
names themselves, which is fine on one Redis (not on Redis Cluster).

Functions take the client (or a pipeline) as their first argument, so views
pass ``get_redis()`` and the seeding command can pass a pipeline.
"""

from __future__ import annotations

import json
import time

from redis.client import Pipeline
from redis.commands.core import Script

PUBLIC_USER_FIELDS = ("id", "email", "username")

REGISTER_LUA = """
-- KEYS: user:email:<email>, next:user_id   ARGV: email, username, password hash
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local id = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], id)
redis.call('HSET', 'user:' .. id, 'id', id, 'email', ARGV[1],
           'username', ARGV[2], 'password', ARGV[3])
return id
"""

FIND_OR_CREATE_ROOM_LUA = """
-- KEYS: room:pair:<lo>:<hi>, next:room_id   ARGV: lo, hi
-- Atomic, so two concurrent calls for a pair get the same room, and the
-- members set exists before anybody learns the room id.
local id = redis.call('GET', KEYS[1])
if id then return tonumber(id) end
id = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], id)
redis.call('SADD', 'room:' .. id .. ':members', ARGV[1], ARGV[2])
return id
"""

POST_MESSAGE_LUA = """
-- KEYS: room:<id>:members, room:<id>:messages, next:message_id
-- ARGV: room id, user id, username, content, ts (ms), history cap
-- Returns the new message id, 0 for an unknown room, -1 for a non-member.
if redis.call('SISMEMBER', KEYS[1], ARGV[2]) == 0 then
  if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
  return -1
end
local id = redis.call('INCR', KEYS[3])
local message = cjson.encode({id = id, roomId = tonumber(ARGV[1]),
  userId = tonumber(ARGV[2]), username = ARGV[3], content = ARGV[4],
  ts = tonumber(ARGV[5])})
redis.call('RPUSH', KEYS[2], message)
redis.call('LTRIM', KEYS[2], -tonumber(ARGV[6]), -1)
return id
"""

# Not bound to a client (each call passes its own, or a pipeline); given as
# bytes so no client is needed to compute the SHA. Script runs EVALSHA and
# falls back to SCRIPT LOAD when Redis was restarted and forgot the script.
REGISTER = Script(None, REGISTER_LUA.encode())
FIND_OR_CREATE_ROOM = Script(None, FIND_OR_CREATE_ROOM_LUA.encode())
POST_MESSAGE = Script(None, POST_MESSAGE_LUA.encode())


def user_key(user_id: int) -> str:
    return f"user:{user_id}"


def email_key(email: str) -> str:
    return f"user:email:{email}"


def friends_key(user_id: int) -> str:
    return f"user:{user_id}:friends"


def pair_key(a: int, b: int) -> str:
    lo, hi = sorted((a, b))
    return f"room:pair:{lo}:{hi}"


def members_key(room_id: int) -> str:
    return f"room:{room_id}:members"


def messages_key(room_id: int) -> str:
    return f"room:{room_id}:messages"


def public_user(fields: dict) -> dict:
    """What may leave the service about a user (never the password hash)."""
    return {"id": int(fields["id"]), "email": fields["email"], "username": fields["username"]}


# --- users -----------------------------------------------------------------

def create_user(r, email: str, username: str, password_hash: str) -> dict | None:
    """Create a user; None when the email is taken."""
    user_id = REGISTER(
        keys=[email_key(email), "next:user_id"], args=[email, username, password_hash],
        client=r)
    if not user_id:
        return None
    return {"id": int(user_id), "email": email, "username": username}


def get_user(r, user_id: int) -> dict | None:
    """Public fields of a user, or None."""
    values = r.hmget(user_key(user_id), PUBLIC_USER_FIELDS)
    if values[0] is None:
        return None
    return public_user(dict(zip(PUBLIC_USER_FIELDS, values, strict=True)))


def get_user_by_email(r, email: str, with_password: bool = False) -> dict | None:
    """A user by (normalised) email; the hash only when asked for (login)."""
    user_id = r.get(email_key(email))
    if user_id is None:
        return None
    fields = r.hgetall(user_key(user_id))
    if not fields:
        return None
    user = public_user(fields)
    if with_password:
        user["password"] = fields.get("password", "")
    return user


def user_exists(r, user_id: int) -> bool:
    return bool(r.exists(user_key(user_id)))


# --- friends ---------------------------------------------------------------

def add_friend(r, user_id: int, friend_id: int) -> bool:
    """Make two users friends (both directions); True if they were not yet."""
    pipe = r.pipeline(transaction=True)
    pipe.sadd(friends_key(user_id), friend_id)
    pipe.sadd(friends_key(friend_id), user_id)
    added, _ = pipe.execute()
    return bool(added)


def are_friends(r, user_id: int, other_id: int) -> bool:
    return bool(r.sismember(friends_key(user_id), other_id))


def list_friends(r, user_id: int) -> list[dict]:
    """Friends' public fields, by id (two round trips whatever the count)."""
    ids = sorted(int(i) for i in r.smembers(friends_key(user_id)))
    if not ids:
        return []
    pipe = r.pipeline(transaction=False)
    for friend_id in ids:
        pipe.hmget(user_key(friend_id), PUBLIC_USER_FIELDS)
    return [public_user(dict(zip(PUBLIC_USER_FIELDS, values, strict=True)))
            for values in pipe.execute() if values[0] is not None]


# --- rooms and messages ----------------------------------------------------

def find_or_create_room(r, a: int, b: int):
    """The one room of the pair (a, b), created on first call.

    With a client: the room id. With a pipeline: the call is queued and the
    id comes out of ``pipe.execute()``.
    """
    lo, hi = sorted((a, b))
    result = FIND_OR_CREATE_ROOM(keys=[pair_key(lo, hi), "next:room_id"], args=[lo, hi],
                                 client=r)
    return result if isinstance(r, Pipeline) else int(result)


def membership(r, room_id: int, user_id: int) -> str:
    """'member', 'forbidden' (room exists, user not in it) or 'unknown'."""
    pipe = r.pipeline(transaction=False)
    pipe.sismember(members_key(room_id), user_id)
    pipe.exists(members_key(room_id))
    is_member, exists = pipe.execute()
    if is_member:
        return "member"
    return "forbidden" if exists else "unknown"


def post_message(r, room_id: int, user_id: int, username: str, content: str,
                 history_max: int) -> tuple[str, dict | None]:
    """Store a message if the user is a member.

    Returns ('ok', message), ('forbidden', None) or ('unknown', None). The
    message is only returned once Redis has stored it.
    """
    ts = int(time.time() * 1000)
    result = int(POST_MESSAGE(
        keys=[members_key(room_id), messages_key(room_id), "next:message_id"],
        args=[room_id, user_id, username or "", content, ts, history_max], client=r))
    if result == 0:
        return "unknown", None
    if result < 0:
        return "forbidden", None
    return "ok", {"id": result, "roomId": room_id, "userId": user_id,
                  "username": username, "content": content, "ts": ts}


def recent_messages(r, room_id: int, user_id: int, limit: int) -> tuple[str, list]:
    """The last `limit` messages, oldest first, with the membership verdict.

    One round trip: membership and the messages are fetched together and the
    messages are thrown away unless the user is a member.
    """
    pipe = r.pipeline(transaction=False)
    pipe.sismember(members_key(room_id), user_id)
    pipe.exists(members_key(room_id))
    pipe.lrange(messages_key(room_id), -limit, -1)
    is_member, exists, raw = pipe.execute()
    if not is_member:
        return ("forbidden" if exists else "unknown"), []
    return "member", [json.loads(m) for m in raw]
