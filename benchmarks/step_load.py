"""A step load: find the saturation point of a stage.

Adds STEP_USERS users every STEP_SECONDS seconds, up to STEP_MAX_USERS, and
stops by itself after STEP_TIME_LIMIT seconds. Load it beside the scenario
(a separate file, because Locust always uses a shape it finds in a
locustfile):

    locust -f benchmarks/chat.py,benchmarks/step_load.py --headless \\
        --host http://127.0.0.1:8000 --csv results/step ChatUser

Reading the result (`--csv` writes `*_stats_history.csv`, one row a second):
while the server has capacity, every step raises the requests per second in
proportion to the users and latency stays flat. The saturation point is the
step where requests per second stop growing while the response times climb:
more users then only queue for the same throughput (Little's law). Compare
where each stage saturates; on 2 cores, also watch Locust's own CPU, since a
load generator at 100% of a core saturates first and measures itself.

With this shape Locust ignores `-u`, `-r` and `-t` (it says so): set

- STEP_USERS: users added per step (default 10)
- STEP_SECONDS: seconds per step (default 10)
- STEP_MAX_USERS: the last step's users (default 100)
- STEP_SPAWN_RATE: users started per second within a step (default STEP_USERS,
  so a step is reached in about a second)
- STEP_TIME_LIMIT: total seconds, then the run stops (default: the steps up
  to STEP_MAX_USERS plus one more step held at the maximum)
"""

from __future__ import annotations

import math
import os

from locust import LoadTestShape, events

try:
    from benchmarks import lab_range
except ImportError:  # `locust -f` from elsewhere: this file's folder is on the path
    import lab_range

# a lab address (198.18.0.0/15) only from a lab host: from here it would leave the machine
lab_range.guard_locust(events)


def _number(name: str, default: float) -> float:
    value = float(os.environ.get(name, default))
    if value <= 0:
        raise ValueError(f"{name} must be positive, not {value:g}")
    return value


class StepLoadShape(LoadTestShape):
    """STEP_USERS more users every STEP_SECONDS, capped at STEP_MAX_USERS, time-bounded."""

    def __init__(self):
        super().__init__()
        self.step_users = int(_number("STEP_USERS", 10))
        self.step_seconds = _number("STEP_SECONDS", 10)
        self.max_users = int(_number("STEP_MAX_USERS", 100))
        self.spawn_rate = _number("STEP_SPAWN_RATE", self.step_users)
        steps = math.ceil(self.max_users / self.step_users)
        self.time_limit = _number("STEP_TIME_LIMIT", (steps + 1) * self.step_seconds)

    def tick(self):
        run_time = self.get_run_time()
        if run_time >= self.time_limit:
            return None
        step = int(run_time // self.step_seconds) + 1
        return min(self.max_users, step * self.step_users), self.spawn_rate
