"""An open-model load: requests start on a schedule that does not wait for answers.

Locust's users, like siege's and wrk's connections, are a closed model: a fixed
number of clients, each waiting for its answer before it sends again. When the
server stalls, they stall with it, and the requests that would have arrived
meanwhile are never sent, so never timed: the tail a stream of real users feels
is hidden (coordinated omission). Here one `ArrivalUser` starts requests at
`--arrival-rate` a second (evenly spaced, or `--arrival-poisson` for random
gaps), each in a greenlet of its own, and times each from its *intended* start:
a request that waited for a free connection, or for the client's CPU, waited on
the users' clock too.

Locust's own statistics keep every response time, never sampled, but rounded
(100 ms buckets past a second); the same time goes into the stage's HdrHistogram
too (`--latency-file`, chat.py's, latency_log.py: 3 significant digits), and the
open model's percentiles come from it. Requests that could not start on time
are counted, never dropped silently:
`late` (the scheduler woke over `LATE_S` after the intended start: a busy client)
and `not_started` (`--arrival-max-in-flight` requests already waiting), written
to `--arrival-file` when the test stops (in distributed mode by the master, every
worker's added up: worker_messages.py). The chat mix is ChatUser's, over
`SESSIONS` signed-in accounts. Run it with the chat locustfile's settings:

    locust -f benchmarks/arrivals.py --headless -u 1 -t 30s --arrival-rate 200 \\
        --chat-users-file users.json --host http://127.0.0.1:8000 ArrivalUser
"""

from __future__ import annotations

import itertools
import random
import time

import gevent
import gevent.pool
from chat import (  # the chat scenario's sessions, settings and request checks
    HISTORY_LIMIT,
    WEIGHTS,
    SocketIOChatUser,  # noqa: F401  (beside ArrivalUser: the lab's Socket.IO users)
    expect,
    open_chat,
    setting,
)
from locust import FastHttpUser, constant_throughput, events, task
from locust.runners import STATE_RUNNING, STATE_SPAWNING

try:
    from benchmarks import worker_messages
except ImportError:  # `benchmarks/` on the path, not the repository root
    import worker_messages

SESSIONS = 20  # signed-in accounts the arrivals take turns with
LATE_S = 0.010  # a start this much after its intended time counts as late
MAX_IN_FLIGHT = 1000  # default --arrival-max-in-flight
# the chat mix both models send, by method: 6 history reads, 3 posts, 2 friend lists in 11
# (ChatUser's weights of those tasks, benchmarks/chat_mix.py)
MIX = (("read",) * WEIGHTS["read_messages"] + ("post",) * WEIGHTS["post_message"]
       + ("friends",) * WEIGHTS["friends"])


@events.init_command_line_parser.add_listener
def add_options(parser):
    parser.add_argument("--arrival-rate", type=float, default=10.0, env_var="LOCUST_ARRIVAL_RATE",
                        help="open model: requests started a second, whatever the answers")
    parser.add_argument("--arrival-poisson", action="store_true", default=False,
                        help="open model: random (exponential) gaps at that mean rate")
    parser.add_argument("--arrival-max-in-flight", type=int, default=MAX_IN_FLIGHT,
                        help="open model: requests waiting at once before new ones are "
                             "counted as not started")
    parser.add_argument("--arrival-file", default="", help="open model: write the schedule's "
                        "counts (intended, started, late, not started) here as the test stops")


class Schedule:
    """Intended start times at a rate, and what became of them."""

    def __init__(self, rate: float, poisson: bool, start: float):
        self.rate, self.poisson, self.at = rate, poisson, start
        self.counts = {"intended": 0, "started": 0, "late": 0, "not_started": 0,
                       "worst_lateness_ms": 0.0}

    def next(self) -> float:
        gap = random.expovariate(self.rate) if self.poisson else 1.0 / self.rate
        self.at += gap
        return self.at

    def started(self, intended: float, now: float) -> None:
        self.counts["intended"] += 1
        self.counts["started"] += 1
        lateness = now - intended
        if lateness > LATE_S:
            self.counts["late"] += 1
        self.counts["worst_lateness_ms"] = max(self.counts["worst_lateness_ms"],
                                               round(lateness * 1000, 1))

    def not_started(self) -> None:
        self.counts["intended"] += 1
        self.counts["not_started"] += 1


SCHEDULES: list[Schedule] = []  # this process's, for --arrival-file


class ArrivalUser(FastHttpUser):
    """One per load process: the open model's scheduler and its requests."""

    fixed_count = 1
    concurrency = 200  # connections the requests in flight share
    connection_timeout = 5.0
    network_timeout = 10.0

    def on_start(self):
        users_file = setting(self.environment, "users-file")
        self.chats = [c for c in (open_chat(self.client, users_file, self.environment)
                                  for _ in range(SESSIONS)) if c is not None]
        self.turn = itertools.cycle(self.chats)
        self.mix = [getattr(self, name) for name in MIX]

    @task
    def arrive(self):
        """The schedule, for the rest of the test: each intended start gets a greenlet."""
        if not self.chats:
            gevent.sleep(1)  # no session could open (a failing stage): try again soon
            return self.on_start()
        opts = self.environment.parsed_options
        schedule = Schedule(opts.arrival_rate, opts.arrival_poisson, time.monotonic())
        SCHEDULES.append(schedule)
        in_flight = gevent.pool.Pool(opts.arrival_max_in_flight)
        runner = self.environment.runner
        # until the test stops (its --stop-timeout lets the requests in flight finish,
        # but no new one starts)
        while runner is None or runner.state in (STATE_SPAWNING, STATE_RUNNING):
            intended = schedule.next()
            gevent.sleep(max(0.0, intended - time.monotonic()))
            if in_flight.full():
                schedule.not_started()
                continue
            schedule.started(intended, time.monotonic())
            in_flight.spawn(random.choice(self.mix), next(self.turn), intended)
        in_flight.join()

    def timed(self, r, intended: float) -> None:
        """Time the request from its intended start: the users' clock, not the client's."""
        r.request_meta["response_time"] = (time.monotonic() - intended) * 1000

    def read(self, chat, intended: float) -> None:
        with self.client.get(f"/rooms/{chat.room_id}/messages?limit={HISTORY_LIMIT}",
                             name="/rooms/[id]/messages", headers=chat.headers,
                             catch_response=True) as r:
            self.timed(r, intended)
            expect(r, 200)

    def post(self, chat, intended: float) -> None:
        with self.client.post(f"/rooms/{chat.room_id}/messages", json={"content": "open"},
                              name="/rooms/[id]/messages", headers=chat.headers,
                              catch_response=True) as r:
            self.timed(r, intended)
            expect(r, 201, "id")

    def friends(self, chat, intended: float) -> None:
        with self.client.get("/users/friends", headers=chat.headers, catch_response=True) as r:
            self.timed(r, intended)
            expect(r, 200, "friends")


class PacedUser(FastHttpUser):
    """The closed model at the same offered rate: `-u N` users, each sending its next
    request only after its answer, paced to `--arrival-rate` / N a second (Locust's
    `constant_throughput`). Same mix and sessions as ArrivalUser, so the two models
    compare at equal load; when the server stalls, these users stall with it
    (benchmarks/studies/omission.py)."""

    connection_timeout = 5.0
    network_timeout = 10.0
    timed = ArrivalUser.timed

    def wait_time(self):
        opts = self.environment.parsed_options
        return constant_throughput(opts.arrival_rate / max(1, opts.num_users))(self)

    def on_start(self):
        self.chat = open_chat(self.client, setting(self.environment, "users-file"),
                              self.environment)
        self.mix = [getattr(ArrivalUser, name) for name in MIX]

    @task
    def send(self):
        if self.chat is None:  # no session could open (a failing stage): try again soon
            gevent.sleep(1)
            return self.on_start()
        # a closed-model request counts from when it is sent: the users' clock has no
        # other start for it, which is the whole difference
        random.choice(self.mix)(self, self.chat, time.monotonic())


HIGHEST = ("worst_lateness_ms", "rate")  # the highest of any schedule's, not a sum


def counts(environment) -> dict | None:
    """This process's schedules added up (--arrival-file); None where none ran."""
    if not SCHEDULES:
        return None
    total = {"rate": environment.parsed_options.arrival_rate}
    for schedule in SCHEDULES:
        total = worker_messages.merge(total, schedule.counts, HIGHEST)
    return total


worker_messages.figures("arrivals", counts, "arrival_file", HIGHEST)
