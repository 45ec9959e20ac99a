"""The factory's settings: defaults, FLASK_* environment, start-up errors."""

from __future__ import annotations

import json
import logging
import os
import platform
import re
import subprocess
import sys
import time

import pytest
import redis

from app import create_app
from app.settings import INSECURE_DEV_SECRET_KEY, ConfigError
from benchmarks.stages import ROOT


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    """No FLASK_* setting from the caller's shell may leak into these tests."""
    for name in list(os.environ):
        if name.startswith("FLASK_"):
            monkeypatch.delenv(name)


def test_missing_secret_key_is_a_clear_error():
    with pytest.raises(ConfigError, match="FLASK_SECRET_KEY"):
        create_app()


@pytest.mark.parametrize("value", ["1", "true", "yes"])
def test_dev_mode_uses_labelled_insecure_key(monkeypatch, caplog, value):
    monkeypatch.setenv("FLASK_DEV_MODE", value)
    with caplog.at_level(logging.WARNING):
        app = create_app()
    assert app.config["SECRET_KEY"] == INSECURE_DEV_SECRET_KEY
    assert "insecure" in app.config["SECRET_KEY"].lower()
    assert any("INSECURE" in r.getMessage() for r in caplog.records)


def test_dev_mode_off_still_requires_key(monkeypatch):
    monkeypatch.setenv("FLASK_DEV_MODE", "0")
    with pytest.raises(ConfigError, match="FLASK_SECRET_KEY"):
        create_app()


def test_settings_come_from_prefixed_env(monkeypatch):
    monkeypatch.setenv("FLASK_SECRET_KEY", "12345")  # JSON-parsed to an int by Flask
    monkeypatch.setenv("FLASK_REDIS_URL", "redis://127.0.0.1:1/3")
    monkeypatch.setenv("FLASK_REDIS_MODE", "per-request")
    monkeypatch.setenv("FLASK_REDIS_POOL_SIZE", "7")
    monkeypatch.setenv("FLASK_MESSAGE_MAX_LENGTH", "99")
    config = create_app().config
    assert config["SECRET_KEY"] == "12345"
    assert config["REDIS_URL"] == "redis://127.0.0.1:1/3"
    assert config["REDIS_MODE"] == "per-request"
    assert config["REDIS_POOL_SIZE"] == 7
    assert config["MESSAGE_MAX_LENGTH"] == 99


def test_test_config_wins_over_env(monkeypatch):
    monkeypatch.setenv("FLASK_SECRET_KEY", "from-env")
    monkeypatch.setenv("FLASK_REDIS_MODE", "per-request")
    app = create_app({"REDIS_MODE": "pool"})
    assert app.config["REDIS_MODE"] == "pool" and app.config["SECRET_KEY"] == "from-env"


def test_defaults():
    config = create_app({"SECRET_KEY": "k"}).config
    assert config["REDIS_URL"] == "redis://127.0.0.1:6379/0"
    assert config["REDIS_MODE"] == "pool"
    assert config["REDIS_POOL_SIZE"] == 50
    assert config["MESSAGE_MAX_LENGTH"] == 2000
    assert config["MAX_CONTENT_LENGTH"] == 64 * 1024
    assert config["PASSWORD_HASH_METHOD"] == "scrypt"
    assert config["SOCKETIO_TRANSPORTS"] == ["websocket"]  # what the stages' clients use


def test_transports_come_from_a_comma_separated_setting(monkeypatch):
    monkeypatch.setenv("FLASK_SOCKETIO_TRANSPORTS", "polling, websocket")
    app = create_app({"SECRET_KEY": "k"})
    assert app.extensions["socketio"].server.eio.transports == ["polling", "websocket"]


@pytest.mark.parametrize("overrides, match", [
    ({"REDIS_MODE": "shared"}, "REDIS_MODE"),
    ({"REDIS_MODE": None}, "REDIS_MODE"),
    ({"REDIS_POOL_SIZE": 0}, "REDIS_POOL_SIZE"),
    ({"REDIS_POOL_SIZE": "many"}, "REDIS_POOL_SIZE"),
    ({"REDIS_SOCKET_TIMEOUT": -1}, "REDIS_SOCKET_TIMEOUT"),
    ({"MESSAGE_MAX_LENGTH": True}, "MESSAGE_MAX_LENGTH"),
    ({"PASSWORD_HASH_METHOD": "plain"}, "PASSWORD_HASH_METHOD"),
    ({"REDIS_URL": ""}, "REDIS_URL"),
    ({"SOCKETIO_TRANSPORTS": "carrier-pigeon"}, "SOCKETIO_TRANSPORTS"),
    ({"SOCKETIO_TRANSPORTS": ""}, "SOCKETIO_TRANSPORTS"),
    ({"SOCKETIO_AUTH_TIMEOUT": 0}, "SOCKETIO_AUTH_TIMEOUT"),
    ({"SOCKETIO_PING_TIMEOUT": "soon"}, "SOCKETIO_PING_TIMEOUT"),
    ({"LOGIN_FAILURES_PER_ACCOUNT": "often"}, "LOGIN_FAILURES_PER_ACCOUNT"),
    ({"GC_LOG_MS": -1}, "GC_LOG_MS"),
    ({"GC_LOG_MS": "slow"}, "GC_LOG_MS"),
    ({"GC_FREEZE_EVERY": -5}, "GC_FREEZE_EVERY"),
    ({"GC_FREEZE_EVERY": "often"}, "GC_FREEZE_EVERY"),
    ({"GC_THRESHOLDS": "700,10"}, "GC_THRESHOLDS"),
    ({"GC_THRESHOLDS": "0,10,10"}, "GC_THRESHOLDS"),
    ({"GC_THRESHOLDS": "a,b,c"}, "GC_THRESHOLDS"),
    ({"GC_CENSUS_DIR": "census"}, "GC_CENSUS_DIR.*absolute path of a directory"),
    ({"GC_CENSUS_DIR": str(ROOT / "README.md" / "census")}, "GC_CENSUS_DIR"),  # no folder
    ({"GC_CENSUS_DIR": str(ROOT / "README.md")}, "GC_CENSUS_DIR"),  # a file
    ({"GC_CENSUS_DIR": 5}, "GC_CENSUS_DIR"),
    ({"WEBSOCKET_READER": "greenlet"}, "WEBSOCKET_READER.*thread .*, handler .*"),
    ({"WEBSOCKET_READER": ""}, "WEBSOCKET_READER"),
    ({"ENGINEIO_PING": "1"}, "ENGINEIO_PING.*task .*, timer .*"),
    ({"ENGINEIO_PING": None}, "ENGINEIO_PING"),
    ({"ENGINEIO_WRITER": "inline"}, "ENGINEIO_WRITER.*task .*, direct .*"),
    ({"ENGINEIO_WRITER": "direct"}, "ENGINEIO_WRITER=direct needs WEBSOCKET_READER=handler"),
])
def test_bad_settings_fail_at_start_up(overrides, match):
    with pytest.raises(ConfigError, match=match):
        create_app({"SECRET_KEY": "k", **overrides})


def test_async_mode_is_threading_when_nothing_is_patched():
    app = create_app({"SECRET_KEY": "k"})
    assert app.extensions["socketio"].async_mode == "threading"


def test_the_greenlet_settings_are_said_to_be_for_gevent_only(caplog):
    """WEBSOCKET_READER and ENGINEIO_PING change gevent mode alone (tests/app/
    test_inline_websocket.py runs them); elsewhere the log says they are not used."""
    with caplog.at_level(logging.WARNING):
        create_app({"SECRET_KEY": "k", "WEBSOCKET_READER": "handler", "ENGINEIO_PING": "timer"})
    assert ("WEBSOCKET_READER=handler, ENGINEIO_PING=timer: for gevent mode only; this "
            "process runs 'threading'") in caplog.text


def test_the_census_is_said_to_be_for_gevent_only(caplog, tmp_path):
    """GC_CENSUS_DIR (app/watchers/gc_census.py) installs its signal handler in gevent mode alone
    (tests/app/test_gc_census.py); elsewhere the log says it writes none."""
    with caplog.at_level(logging.WARNING):
        create_app({"SECRET_KEY": "k", "GC_CENSUS_DIR": str(tmp_path)})
    assert "GC_CENSUS_DIR: for gevent mode only; this process runs 'threading'" in caplog.text


def test_socketio_uses_the_redis_message_queue_by_default(redis_url, redis_client):
    """By default every broadcast goes through Redis pub/sub (all workers see it)."""
    from socketio import RedisManager
    app = create_app({"SECRET_KEY": "k", "REDIS_URL": redis_url})
    manager = app.extensions["socketio"].server.manager
    assert isinstance(manager, RedisManager) and manager.redis_url == redis_url
    listener = redis.Redis.from_url(redis_url, decode_responses=True, socket_timeout=5)
    pubsub = listener.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(manager.channel)
    try:
        with app.app_context():
            from app.rooms import broadcast_message
            broadcast_message({"id": 1, "roomId": 7, "userId": 1, "username": "u",
                               "content": "queued", "ts": 0})
        deadline, message = time.monotonic() + 5, None
        while message is None and time.monotonic() < deadline:
            # None also for the (ignored) subscribe confirmation: keep reading.
            message = pubsub.get_message(timeout=1)
        assert message and "queued" in message["data"] and "room:7" in message["data"]
    finally:
        pubsub.close()
        listener.close()
        if manager.redis is not None:
            manager.redis.close()


def test_a_slow_collection_is_logged_when_asked():
    """FLASK_GC_LOG_MS: a collection at least that long is a line on stderr (a process of
    its own: the callback stays for the process's life)."""
    script = ("import gc; from app import create_app; create_app(); "
              "junk = [[i] for i in range(200000)]; gc.collect()")
    env = {**os.environ, "FLASK_SECRET_KEY": "k"}
    said = {ms: subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                               cwd=ROOT, timeout=60, env={**env, "FLASK_GC_LOG_MS": ms}).stderr
            for ms in ("0.001", "0", "600000")}
    assert re.search(r"^gc: generation 2 took \d+ ms, \d+ objects tracked$", said["0.001"],
                     re.M), said["0.001"]
    # first, the Python and the thresholds it collects with (the capacity study's label)
    assert said["0.001"].startswith(f"gc: {platform.python_implementation()} "
                                    f"{platform.python_version()}, thresholds ("), said
    assert re.match(r"gc: .*, thresholds \(\d+, \d+, \d+\)\n", said["0.001"]), said
    assert "gc:" not in said["0"] and "gc: generation" not in said["600000"], said


# A process of its own, as a server is: the policy acts once a process, the first app made.
POLICY = """
import gc, json, time
from app import create_app
before = gc.get_threshold()
create_app()
at_start = gc.get_freeze_count()
made = [[i] for i in range(5000)]
time.sleep(0.7)
print(json.dumps({"before": before, "after": gc.get_threshold(), "at_start": at_start,
                  "later": gc.get_freeze_count()}))
"""


def policy_run(**settings) -> dict:
    env = {**os.environ, "FLASK_SECRET_KEY": "k", **settings}
    done = subprocess.run([sys.executable, "-c", POLICY], capture_output=True, text=True,
                          cwd=ROOT, timeout=60, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def test_the_collector_is_frozen_at_start_and_every_period_when_asked():
    """FLASK_GC_FREEZE_EVERY (app/gc_policy.py): what lives at start-up is frozen at once,
    what the process makes after it at the next period; FLASK_GC_THRESHOLDS set too."""
    found = policy_run(FLASK_GC_FREEZE_EVERY="0.2", FLASK_GC_THRESHOLDS="5000,20,30")
    assert found["at_start"] > 10_000, found  # the app and its libraries
    assert found["later"] >= found["at_start"] + 5000, found  # the lists made after it
    assert found["after"] == [5000, 20, 30], found


def test_without_the_settings_the_collector_is_as_python_has_it():
    found = policy_run()
    assert found["at_start"] == found["later"] == 0, found
    assert found["after"] == found["before"], found


# A garbage cycle made after start-up, with the automatic collections held off (a first
# threshold no allocation here reaches): only the policy's period can find it.
CYCLE = """
import gc, json, time, weakref
from app import create_app
create_app()
class Node: pass
node = Node(); node.self = node; ref = weakref.ref(node); del node
dropped = ref() is not None
time.sleep(0.7)
print(json.dumps({"alive_when_dropped": dropped, "alive_after_freezes": ref() is not None,
                  "frozen": gc.get_freeze_count()}))
"""


def test_a_cycle_dropped_before_a_freeze_is_collected_not_frozen():
    """The freeze's period collects first (app/gc_policy.py): garbage is not frozen with
    the live objects, where nothing would ever collect it."""
    env = {**os.environ, "FLASK_SECRET_KEY": "k", "FLASK_GC_FREEZE_EVERY": "0.2",
           "FLASK_GC_THRESHOLDS": "1000000,10,10"}
    done = subprocess.run([sys.executable, "-c", CYCLE], capture_output=True, text=True,
                          cwd=ROOT, timeout=60, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout)
    assert found["alive_when_dropped"] and found["frozen"] > 10_000, found
    assert not found["alive_after_freezes"], found
