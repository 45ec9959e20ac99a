"""benchmarks/run/delivery.py, the probe behind stage 6's cross-host checks, against two
real gunicorns sharing one real Redis: with Socket.IO's Redis message queue every
message reaches the member on the other server; without it, none does (the
failure people meet when they add a second app server)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from contextlib import ExitStack

import pytest
from conftest import gunicorn_process, run_module

from benchmarks.stages import ROOT

MESSAGES = 10


def seed(redis_url: str, out) -> None:
    env = {**os.environ, "FLASK_REDIS_URL": redis_url, "FLASK_SECRET_KEY": "test",
           "FLASK_PASSWORD_HASH_METHOD": "pbkdf2:sha256:1000"}
    subprocess.run([sys.executable, "-m", "flask", "--app", "app", "seed-users", "--count", "4",
                    "--friends", "1", "--out", str(out)], env=env, cwd=ROOT, check=True,
                   capture_output=True, timeout=60)


@pytest.mark.parametrize("queue,code,received", [("1", 0, MESSAGES), ("0", 1, 0)],
                         ids=["message-queue", "no-queue"])
def test_a_message_crosses_app_servers_only_through_the_queue(private_redis, tmp_path, queue,
                                                              code, received):
    users = tmp_path / "users.json"
    seed(private_redis.url, users)
    env = {"FLASK_SOCKETIO_MESSAGE_QUEUE": queue,
           "FLASK_PASSWORD_HASH_METHOD": "pbkdf2:sha256:1000"}
    with ExitStack() as servers:
        urls = []
        for name in ("one", "two"):
            (tmp_path / name).mkdir()
            url, _ = servers.enter_context(gunicorn_process(
                private_redis.url, tmp_path / name, ["-k", "eventlet", "-w", "1"], env))
            urls.append(url)
        out = tmp_path / "delivery.json"
        exit_code, output = run_module("benchmarks.run.delivery", *urls, "--users-file",
                                       str(users), "--messages", str(MESSAGES),
                                       "--json", str(out), timeout=60)
    assert exit_code == code, output
    result = json.loads(out.read_text())
    assert result["sent"] == MESSAGES, result
    assert result["received"] == received, result
    assert result["seq_gaps"] == 0, result
    assert f"{received} of {MESSAGES} messages" in output
    # what did not arrive live, the member fetched from the history (joinRoom {after})
    missed = MESSAGES - received
    assert (result["missed_live"], result["caught_up"], result["missing"]) == (missed, missed, 0)


@pytest.mark.parametrize("args,message", [
    (["--messages", "0"], "--messages must be 1-1000"),
    ([], "198.18.0.30 is in the lab's range"),
], ids=["no-messages", "lab-range-from-outside"])
def test_bad_input_is_refused_before_anything_is_sent(tmp_path, args, message):
    users = tmp_path / "users.json"
    users.write_text("[]")
    code, output = run_module("benchmarks.run.delivery", "http://198.18.0.30:8000",
                              "http://198.18.0.31:8000", "--users-file", str(users), *args,
                              timeout=30)
    assert code == 2, output
    assert message in output, output
