"""What the token check costs per request: the signature alone vs signature + Redis.

Purpose: since issue 10 a token is only accepted while its user's token key in
Redis (`user:<id>` field `token_key`) is the one it was issued with, so it
dies with its user, with the data and on logout. That is one HGET per
request; this measures it against the signature check that was all before.

Usage:

    python -m benchmarks.studies.token_cost redis://127.0.0.1:6379/0

Requirements: a running Redis at that URL (it registers one user
`token-cost@example.test` there, or reuses it). Overhead: about ten seconds
of one core.

Prints the median per call over 5 runs of each: `read_token` (signature and
claims), `live_claims` (the same plus the HGET, through the app's connection
pool) and a whole `GET /users/me` through Flask's in-process test client.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from app import create_app
from app.tokens import live_claims, read_token

EMAIL, PASSWORD = "token-cost@example.test", "token-cost-password"


def median_us(fn, calls: int) -> float:
    runs = []
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(calls):
            fn()
        runs.append((time.perf_counter() - started) / calls * 1e6)
    return statistics.median(runs)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.studies.token_cost",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("redis_url", help="a running Redis, e.g. redis://127.0.0.1:6379/0")
    return p


def main(argv: list[str] | None = None) -> int:
    redis_url = build_parser().parse_args(argv).redis_url
    app = create_app({"SECRET_KEY": "token-cost", "REDIS_URL": redis_url,
                      "SOCKETIO_MESSAGE_QUEUE": False,
                      "PASSWORD_HASH_METHOD": "pbkdf2:sha256:1000"})
    client = app.test_client()
    client.post("/auth/register", json={"email": EMAIL, "password": PASSWORD,
                                        "username": "token-cost"})
    token = client.post("/auth/login", json={"email": EMAIL, "password": PASSWORD}
                        ).get_json()["access_token"]
    headers = {"Authorization": f"Bearer {token}"}
    with app.app_context():
        signature = median_us(lambda: read_token(token), 20000)
        live = median_us(lambda: live_claims(token), 20000)
    request = median_us(lambda: client.get("/users/me", headers=headers), 3000)
    print(f"signature only {signature:.1f} us; signature + HGET {live:.1f} us: the check "
          f"adds {live - signature:.1f} us per request (one Redis round trip); "
          f"a whole GET /users/me in-process: {request:.0f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
