"""The chat mix: `ChatUser`'s HTTP tasks and their weights, defined once.

benchmarks/chat.py weights ChatUser's tasks with these (`@task(WEIGHTS[...])`); the
floor study (benchmarks/studies/floor.py) sends the same requests through the app
in-process, weighted the same. A module of its own because importing chat.py imports
Locust, which monkey-patches the standard library for gevent: the floor must measure
the app on plain sockets, and pytest cannot import Locust at all.
"""

from __future__ import annotations

# task name (ChatUser's method) -> weight: of every 14 tasks a user runs, 6 read its room
WEIGHTS = {
    "read_messages": 6,  # GET /rooms/<id>/messages?limit=HISTORY_LIMIT
    "post_message": 3,  # POST /rooms/<id>/messages, with an Idempotency-Key
    "friends": 2,  # GET /users/friends
    "find_or_create_room": 1,  # POST /rooms/find-or-create
    "me": 1,  # GET /users/me
    "get_user_secure": 1,  # GET /users/getUserSecure/<friend's email>
}
HISTORY_LIMIT = 20  # messages a history read asks for (`?limit=`)
