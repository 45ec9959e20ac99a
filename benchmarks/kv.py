"""The book's benchmark as a Locust scenario: one URL that SETs then GETs a Redis key.

What it teaches: the chapter's measurement (seed 004: `siege -c 100 -b -t30s` on
`/test/1`, 413 trans/s on Flask's built-in server, 419 on gunicorn `-w 4` on
one core, 683 with a Redis connection pool), repeated with Locust. No think
time, like siege's benchmark mode: the number of users is siege's `-c`.

    locust -f benchmarks/kv.py --host http://127.0.0.1:8000 --headless -u 100 -r 100 -t 30s

`python -m benchmarks.lab book` runs it against stages 0, 1, 2, 3 and 5 with the
server on one core and prints ours beside the book's figures. With no think
time Locust itself can become the bottleneck: watch its CPU (the lab reports
it) and cross-check with wrk: `python -m benchmarks.studies.crosscheck` runs both, turn
about, on the same stage, wrk sending this user's request headers included.
"""

from __future__ import annotations

import os

from locust import FastHttpUser, constant, events, run_single_user, task

try:
    from benchmarks import lab_range
except ImportError:  # `locust -f` from elsewhere: this file's folder is on the path
    import lab_range

# a lab address (198.18.0.0/15) only from a lab host: from here it would leave the machine
lab_range.guard_locust(events)

HOST = os.environ.get("CHAT_HOST", "http://127.0.0.1:8000")


class KeyValueUser(FastHttpUser):
    """`GET /kv/<key>`: the app SETs the key in Redis, then GETs it back."""

    host = HOST
    wait_time = constant(0)
    connection_timeout = 5.0
    network_timeout = 10.0
    key = "bench"

    @task
    def set_and_get(self):
        with self.client.get(f"/kv/{self.key}", name="/kv/[key]", catch_response=True) as r:
            if r.status_code != 200:
                r.failure(f"expected 200, got {r.status_code}: {(r.text or '')[:200]}")
                return
            try:
                body = r.json()
            except ValueError:
                r.failure(f"not JSON: {(r.text or '')[:200]}")
                return
            if not isinstance(body, dict) or body.get("key") != self.key or "value" not in body:
                r.failure(f"asked for key {self.key}, got {str(body)[:200]}")


if __name__ == "__main__":
    run_single_user(KeyValueUser)
