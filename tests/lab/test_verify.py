"""benchmarks/run/verify.py against real gunicorn servers backed by a real Redis.

It must pass on a healthy instance of every worker type, tell a sync worker
(`Connection: close`) from a keep-alive one, and fail clearly when the
instance is broken (exit 1) or absent (exit 2).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import gunicorn

from benchmarks.run.verify import verify
from benchmarks.sandbox import procs
from benchmarks.stages import ROOT

VENV_BIN = Path(sys.executable).parent
WORKERS = {  # worker args, expected server_keepalive
    "sync": (["-w", "2"], 0),
    "eventlet": (["-w", "2", "-k", "eventlet", "--keep-alive", "10"], 1),
    "gevent": (["-w", "2", "-k", "gevent", "--keep-alive", "10"], 1),
}


def run_verify(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "benchmarks.run.verify", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module", params=list(WORKERS))
def server(request, redis_port, tmp_path_factory):
    """(kind, url, redis_url) of a gunicorn with that worker type. Redis db 1: the
    app tests flush db 0."""
    redis_url = f"redis://127.0.0.1:{redis_port}/1"
    workdir = tmp_path_factory.mktemp(request.param)
    with gunicorn(redis_url, workdir, WORKERS[request.param][0]) as url:
        yield request.param, url, redis_url


def test_verify_passes_and_sees_how_the_server_treats_the_connection(server):
    kind, url, _ = server
    result = verify(url)
    failed = [c for c in result["checks"] if not c["ok"]]
    assert result["ok"] and not failed, failed
    assert result["reachable"] is True
    assert result["server_keepalive"] == WORKERS[kind][1]
    assert "gunicorn" in result["server_header"]
    if kind == "sync":
        assert result["connection_header"].lower() == "close"
    assert {"healthz", "login", "post message", "read messages", "kv",
            "bad token -> 401 JSON", "getUserSecure of a stranger -> 404", "ask friend -> 202",
            "friend asks back -> 201"} <= {c["name"] for c in result["checks"]}


def test_cli_with_seeded_users_writes_json_and_exits_0(server, tmp_path):
    kind, url, redis_url = server
    users = tmp_path / "users.json"
    seeded = subprocess.run(
        [str(VENV_BIN / "flask"), "--app", "app", "seed-users", "--count", "3", "--friends", "1",
         "--prefix", f"verify-{kind}", "--out", str(users)],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
        env={**os.environ, "FLASK_REDIS_URL": redis_url, "FLASK_SECRET_KEY": "test"})
    assert seeded.returncode == 0, seeded.stderr
    out = tmp_path / "verify.json"
    result = run_verify(url, "--json", str(out), "--users-file", str(users))
    assert result.returncode == 0, result.stdout + result.stderr
    written = json.loads(out.read_text())
    assert written["ok"] is True
    assert written["server_keepalive"] == WORKERS[kind][1]
    seeded_check = [c for c in written["checks"] if c["name"] == "seeded user"]
    assert seeded_check and seeded_check[0]["detail"].startswith(f"verify-{kind}")
    assert "all" in result.stdout and "checks passed" in result.stdout


def test_redis_down_fails_each_check_clearly_with_exit_1(tmp_path):
    dead_redis = f"redis://127.0.0.1:{procs.free_port()}/0"
    with gunicorn(dead_redis, tmp_path, WORKERS["sync"][0]) as url:
        result = run_verify(url, "--json", str(tmp_path / "verify.json"))
    assert result.returncode == 1, result.stdout + result.stderr
    assert "FAIL healthz: GET /healthz: expected 200, got 503" in result.stdout
    assert "FAIL register:" in result.stdout
    assert "check(s) failed at" in result.stderr
    written = json.loads((tmp_path / "verify.json").read_text())
    assert written["ok"] is False and written["reachable"] is True


def test_nothing_listening_exits_2_with_a_clear_message():
    url = f"http://127.0.0.1:{procs.free_port()}"
    result = run_verify(url)
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"nothing answers at {url}" in result.stderr
    assert "is the server running" in result.stderr
    assert verify(url)["reachable"] is False
