"""The real-time server's census of its objects (app/watchers/gc_census.py), as the capacity study
takes it (benchmarks/studies/capacity/census.py): a real gunicorn on stage 10's config
(gevent, its collector frozen every 5 s), real Socket.IO clients connected over the
websocket, a census at rest and one with the clients held."""

from __future__ import annotations

import json
import re
from concurrent.futures import ThreadPoolExecutor

import requests
from conftest import RealClient, gunicorn_process, mint_token

from benchmarks import stages
from benchmarks.studies.capacity import census

USERS = 40
# engineio's Socket, a connected client's Engine.IO session; stage 10 makes its class
# (app/realtime/engineio_socket.py) from engineio's and its own mixins
SOCKET = re.compile(r"(engineio\.socket|app\.realtime\.engineio_socket)\.Socket")
GREENLET = "gevent._gevent_cgreenlet.Greenlet"  # gunicorn's handler of a connection


def sockets(found: dict) -> int:
    return sum(count for name, (count, _) in found["types"].items() if SOCKET.fullmatch(name))


def waiting(found: dict) -> int:
    """Greenlets alive (started, not ended)."""
    return sum(n for label, n in found["greenlets"].items() if label.endswith("(alive)"))


def connected(url: str, token: str) -> list[RealClient]:
    with ThreadPoolExecutor(8) as pool:
        clients = list(pool.map(lambda _: RealClient(url, auth={"token": token}),
                                range(USERS)))
    assert all(c.is_connected() for c in clients)
    return clients


def test_a_census_counts_an_engineio_session_a_connected_user(redis_url, tmp_path):
    inbox, kept = tmp_path / "census", tmp_path / "kept"  # the server makes its folder
    with gunicorn_process(redis_url, tmp_path, ["-c", stages.get("10").gunicorn_config],
                          env={"FLASK_GC_CENSUS_DIR": str(inbox)}) as (url, proc):
        workers = census.workers([proc.pid])
        assert len(workers) == 1, workers  # stage 10: one worker
        at_rest = census.take(workers, inbox, kept)
        clients = connected(url, mint_token(redis_url, "test", "census"))
        try:
            held = census.take(workers, inbox, kept)
        finally:
            for c in clients:
                c.disconnect()
        # the signal asked for a census and ended nothing: the worker still serves
        assert requests.get(f"{url}/healthz", timeout=10).status_code == 200
        assert [p.pid for p in census.workers([proc.pid])] == [workers[0].pid]
    assert sockets(at_rest) == 0, at_rest["types"]
    assert 0.9 <= (sockets(held) - sockets(at_rest)) / USERS <= 1.2
    # stage 10's one greenlet a user (gunicorn/realtime.conf.py), its stack saved
    assert 0.9 <= (waiting(held) - waiting(at_rest)) / USERS <= 1.2, held["greenlets"]
    assert held["greenlet_stacks"] - at_rest["greenlet_stacks"] > USERS * 1000
    # each greenlet counted once, though a waiting one says it is not tracked
    greenlets = [found["types"].get(GREENLET, [0])[0] for found in (at_rest, held)]
    assert 0.9 <= (greenlets[1] - greenlets[0]) / USERS <= 1.2, greenlets
    share = census.per_user(at_rest, held, USERS)
    assert share["census_objects_per_user"] > share["census_tracked_per_user"] > 10, share
    assert share["census_bytes_per_user"] > 1000, share
    assert len(list(kept.glob("*.json"))) == 2 and not list(inbox.iterdir())
    for path in kept.glob("*.json"):  # the frozen heap counted, and frozen again
        raw = json.loads(path.read_text())
        assert raw["frozen_before"] > 10_000, raw["frozen_before"]  # the app, at start
        assert raw["tracked"] >= raw["frozen_before"]
        # what the census made between listing and freezing: about a list a type
        assert 0 <= raw["frozen_after"] - raw["tracked"] <= len(raw["types"]) + 100
