"""The chat's data in Redis: users, friendships, rooms and messages.

Key layout (one place to read it)::

    next:user_id              INCR counter for user ids
    user:<id>                 hash {id, email, username, password, token_key}
                              (password = hash; token_key: see tokens.py)
    user:email:<email>        string -> user id  (the login index, lower-cased email)
    user:<id>:friends         set of friend ids (friendship is mutual: both sets)
    user:<id>:requests:out    set of ids this user asked to befriend (not yet mutual)
    user:<id>:requests:in     set of ids that asked this user
    next:room_id              INCR counter for room ids
    room:pair:<lo>:<hi>       string -> room id of the pair (lo < hi): one room per pair
    room:<id>:members         set of member ids (a room exists iff this set does)
    room:<id>:messages        list of message JSON, oldest first, trimmed to ROOM_HISTORY_MAX
    room:<id>:seq             INCR counter: the room's message number (a gap shows a miss)
    next:message_id           INCR counter for message ids (unique across rooms, increasing)
    idem:<user id>:<key>      the message JSON stored under an Idempotency-Key/clientId
                              (expires after IDEMPOTENCY_TTL)

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
-- KEYS: user:email:<email>, next:user_id   ARGV: email, username, password hash, token key
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local id = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], id)
redis.call('HSET', 'user:' .. id, 'id', id, 'email', ARGV[1],
           'username', ARGV[2], 'password', ARGV[3], 'token_key', ARGV[4])
return id
"""

REQUEST_FRIEND_LUA = """
-- KEYS: user:<other>, user:<me>:friends, user:<other>:friends,
--       user:<me>:requests:out, user:<me>:requests:in,
--       user:<other>:requests:out, user:<other>:requests:in
-- ARGV: me, other
-- Returns 0 unknown user, 1 requested (waiting for the other), 2 now friends,
-- 3 already friends. Atomic, so two users asking at once become friends once.
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if redis.call('SISMEMBER', KEYS[2], ARGV[2]) == 1 then return 3 end
if redis.call('SISMEMBER', KEYS[5], ARGV[2]) == 1 then
  redis.call('SREM', KEYS[5], ARGV[2])
  redis.call('SREM', KEYS[6], ARGV[1])
  redis.call('SADD', KEYS[2], ARGV[2])
  redis.call('SADD', KEYS[3], ARGV[1])
  return 2
end
redis.call('SADD', KEYS[4], ARGV[2])
redis.call('SADD', KEYS[7], ARGV[1])
return 1
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
-- KEYS: room:<id>:members, room:<id>:messages, next:message_id, room:<id>:seq,
--       idem:<user id>:<key> (or "" without a key), user:<user id> (or "": the
--       token was checked before)
-- ARGV: room id, user id, username, content, ts (ms), history cap, key TTL (s),
--       the token's key (with KEYS[6])
-- Returns the message JSON; or the one stored before under the same key
-- (a retry stores nothing); 0 when the caller is not a member; -1 when the
-- key was used for another message; -2 when the token's key is not the user's.
if KEYS[6] ~= '' and redis.call('HGET', KEYS[6], 'token_key') ~= ARGV[8] then return -2 end
if redis.call('SISMEMBER', KEYS[1], ARGV[2]) == 0 then return 0 end
if KEYS[5] ~= '' then
  local prior = redis.call('GET', KEYS[5])
  if prior then
    local old = cjson.decode(prior)
    if old.roomId ~= tonumber(ARGV[1]) or old.content ~= ARGV[4] then return -1 end
    return prior
  end
end
local id = redis.call('INCR', KEYS[3])
local message = cjson.encode({id = id, roomId = tonumber(ARGV[1]),
  seq = redis.call('INCR', KEYS[4]), userId = tonumber(ARGV[2]), username = ARGV[3],
  content = ARGV[4], ts = tonumber(ARGV[5])})
redis.call('RPUSH', KEYS[2], message)
redis.call('LTRIM', KEYS[2], -tonumber(ARGV[6]), -1)
if KEYS[5] ~= '' then redis.call('SET', KEYS[5], message, 'EX', ARGV[7]) end
return message
"""

MESSAGES_AFTER_LUA = """
-- KEYS: room:<id>:members, room:<id>:messages   ARGV: user id, after (message id), limit
-- The first `limit` messages with an id above `after`, oldest first; false for a
-- non-member. Walks back from the newest in chunks until it meets `after`.
if redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 0 then return false end
local after, first = tonumber(ARGV[2]), redis.call('LLEN', KEYS[2])
while first > 0 do
  local items = redis.call('LRANGE', KEYS[2], math.max(0, first - 100), first - 1)
  for j = #items, 1, -1 do
    if cjson.decode(items[j]).id <= after then
      return redis.call('LRANGE', KEYS[2], first, first + tonumber(ARGV[3]) - 1)
    end
    first = first - 1
  end
end
return redis.call('LRANGE', KEYS[2], 0, tonumber(ARGV[3]) - 1)
"""

FRIENDS_LUA = """
-- KEYS: user:<id>, user:<id>:friends   ARGV: the token's key
-- The friends' id, email, username, flat; false when the token's key is not the user's.
if redis.call('HGET', KEYS[1], 'token_key') ~= ARGV[1] then return false end
local found = {}
for _, id in ipairs(redis.call('SMEMBERS', KEYS[2])) do
  local fields = redis.call('HMGET', 'user:' .. id, 'id', 'email', 'username')
  if fields[1] then
    for _, value in ipairs(fields) do found[#found + 1] = value end
  end
end
return found
"""

# Not bound to a client (each call passes its own, or a pipeline); given as
# bytes so no client is needed to compute the SHA. Script runs EVALSHA and
# falls back to SCRIPT LOAD when Redis was restarted and forgot the script.
REGISTER = Script(None, REGISTER_LUA.encode())
REQUEST_FRIEND = Script(None, REQUEST_FRIEND_LUA.encode())
FIND_OR_CREATE_ROOM = Script(None, FIND_OR_CREATE_ROOM_LUA.encode())
POST_MESSAGE = Script(None, POST_MESSAGE_LUA.encode())
MESSAGES_AFTER = Script(None, MESSAGES_AFTER_LUA.encode())
FRIENDS = Script(None, FRIENDS_LUA.encode())

# What a friend request came to (REQUEST_FRIEND's answer).
FRIEND_REQUEST_OUTCOMES = {0: "unknown", 1: "requested", 2: "friends", 3: "already"}


def user_key(user_id: int) -> str:
    return f"user:{user_id}"


def email_key(email: str) -> str:
    return f"user:email:{email}"


def friends_key(user_id: int) -> str:
    return f"user:{user_id}:friends"


def requests_key(user_id: int, direction: str) -> str:
    """``direction``: "out" (asked by the user) or "in" (asked of the user)."""
    return f"user:{user_id}:requests:{direction}"


def idempotency_key(user_id: int, key: str) -> str:
    return f"idem:{user_id}:{key}"


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

def create_user(r, email: str, username: str, password_hash: str,
                token_key: str) -> dict | None:
    """Create a user; None when the email is taken."""
    user_id = REGISTER(
        keys=[email_key(email), "next:user_id"],
        args=[email, username, password_hash, token_key], client=r)
    if not user_id:
        return None
    return {"id": int(user_id), "email": email, "username": username}


def get_user(r, user_id: int) -> dict | None:
    """Public fields of a user, or None."""
    values = r.hmget(user_key(user_id), PUBLIC_USER_FIELDS)
    if values[0] is None:
        return None
    return public_user(dict(zip(PUBLIC_USER_FIELDS, values, strict=True)))


def get_user_by_email(r, email: str, with_secrets: bool = False) -> dict | None:
    """A user by (normalised) email; password hash and token key only when asked (login)."""
    user_id = r.get(email_key(email))
    if user_id is None:
        return None
    fields = r.hgetall(user_key(user_id))
    if not fields:
        return None
    user = public_user(fields)
    if with_secrets:
        user["password"] = fields.get("password", "")
        user["token_key"] = fields.get("token_key")
    return user


def token_key(r, user_id: int) -> str | None:
    """The user's current token key (None: no such user)."""
    return r.hget(user_key(user_id), "token_key")


def set_token_key(r, user_id: int, key: str, only_if_missing: bool = False) -> None:
    """A new key revokes every token issued with the old one."""
    if only_if_missing:  # a user stored before token keys existed
        r.hsetnx(user_key(user_id), "token_key", key)
    else:
        r.hset(user_key(user_id), "token_key", key)


# --- friends ---------------------------------------------------------------

def request_friend(r, user_id: int, other_id: int) -> str:
    """Ask to befriend `other_id`: 'unknown', 'requested', 'friends' (both asked) or 'already'."""
    result = REQUEST_FRIEND(keys=[
        user_key(other_id), friends_key(user_id), friends_key(other_id),
        requests_key(user_id, "out"), requests_key(user_id, "in"),
        requests_key(other_id, "out"), requests_key(other_id, "in")],
        args=[user_id, other_id], client=r)
    return FRIEND_REQUEST_OUTCOMES[int(result)]


def make_friends(r, a: int, b: int) -> None:
    """Both directions at once, no request (seeding; `r` may be a pipeline)."""
    r.sadd(friends_key(a), b)
    r.sadd(friends_key(b), a)


def friend_requests(r, user_id: int) -> dict:
    """``{incoming, outgoing}``: ``[{id, username}]`` each, by id (no emails)."""
    pipe = r.pipeline(transaction=False)
    pipe.smembers(requests_key(user_id, "in"))
    pipe.smembers(requests_key(user_id, "out"))
    incoming, outgoing = ([int(i) for i in ids] for ids in pipe.execute())
    pipe = r.pipeline(transaction=False)
    for other in sorted(incoming) + sorted(outgoing):
        pipe.hget(user_key(other), "username")
    names = dict(zip(sorted(incoming) + sorted(outgoing), pipe.execute(), strict=True))
    return {direction: [{"id": i, "username": names[i]} for i in sorted(ids)
                        if names[i] is not None]
            for direction, ids in (("incoming", incoming), ("outgoing", outgoing))}


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


def is_member(r, room_id: int, user_id: int) -> bool:
    return bool(r.sismember(members_key(room_id), user_id))


def post_message(r, room_id: int, user_id: int, username: str, content: str,
                 history_max: int, key: str | None = None, key_ttl: int = 3600,
                 token_key: str | None = None) -> tuple[str, dict | None]:
    """Store a message if the user is a member; with `key`, at most once per key.

    Returns ('ok', message), ('not_member', None), ('key_reused', None) (the
    key was used for another message) or, with `token_key`, ('revoked', None)
    when it is not the user's. A retry with the same key gets the
    message stored the first time. The message is only returned once Redis has
    stored it.
    """
    ts = int(time.time() * 1000)
    result = POST_MESSAGE(
        keys=[members_key(room_id), messages_key(room_id), "next:message_id",
              f"room:{room_id}:seq", idempotency_key(user_id, key) if key else "",
              user_key(user_id) if token_key is not None else ""],
        args=[room_id, user_id, username or "", content, ts, history_max, key_ttl,
              token_key or ""], client=r)
    verdict = {0: "not_member", -1: "key_reused", -2: "revoked"}.get(result)
    if verdict:
        return verdict, None
    return "ok", json.loads(result)


def recent_messages(r, room_id: int, user_id: int, limit: int) -> list | None:
    """The last `limit` messages, oldest first; None unless the user is a member.

    One round trip: membership and the messages are fetched together and the
    messages are thrown away unless the user is a member.
    """
    pipe = r.pipeline(transaction=False)
    queue_recent(pipe, room_id, user_id, limit)
    return parse_recent(*pipe.execute())


def queue_recent(pipe, room_id: int, user_id: int, limit: int) -> None:
    pipe.sismember(members_key(room_id), user_id)
    pipe.lrange(messages_key(room_id), -limit, -1)


def parse_recent(member, raw) -> list | None:
    return [json.loads(m) for m in raw] if member else None


def messages_after(r, room_id: int, user_id: int, after: int, limit: int) -> list | None:
    """The first `limit` messages newer than message `after` (catching up after a gap);
    None unless the user is a member."""
    raw = MESSAGES_AFTER(keys=[members_key(room_id), messages_key(room_id)],
                         args=[user_id, after, limit], client=r)
    return None if raw is None else [json.loads(m) for m in raw]


# --- stage 7: the token's key fetched in the view's own round trip (tokens.confirm) ----

def with_token_key(r, user_id: int, queue) -> tuple[str | None, list]:
    """The user's token key and the results of what `queue(pipe)` queued, in one round trip."""
    pipe = r.pipeline(transaction=False)
    pipe.hget(user_key(user_id), "token_key")
    queue(pipe)
    stored, *results = pipe.execute()
    return stored, results


def user_and_token_key(r, user_id: int) -> tuple[dict | None, str | None]:
    """The user's public fields (None: gone) and token key, in one HMGET."""
    values = r.hmget(user_key(user_id), (*PUBLIC_USER_FIELDS, "token_key"))
    if values[0] is None:
        return None, None
    return public_user(dict(zip(PUBLIC_USER_FIELDS, values, strict=False))), values[-1]


def friends_checked(r, user_id: int, token_key: str) -> list[dict] | None:
    """Friends' public fields, by id, in one round trip; None when `token_key` is not
    the user's."""
    flat = FRIENDS(keys=[user_key(user_id), friends_key(user_id)], args=[token_key], client=r)
    if flat is None:
        return None
    return sorted((public_user(dict(zip(PUBLIC_USER_FIELDS, flat[i:i + 3], strict=True)))
                   for i in range(0, len(flat), 3)), key=lambda user: user["id"])
