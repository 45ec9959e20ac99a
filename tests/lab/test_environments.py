"""The two server environments (benchmarks/servers.py ENVIRONMENTS, `make setup`): the
current one on gunicorn 27 without eventlet, the eventlet one with only what the book's
eventlet servers need; a stage whose environment is missing is refused before anything
starts, with the command that makes it."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import stages
from benchmarks.run import environment, options
from benchmarks.sandbox import procs

ROOT = stages.ROOT


def pip(environment: str, *args: str) -> subprocess.CompletedProcess:
    python = procs.environment_bin(environment) / "python"
    return subprocess.run([str(python), "-m", "pip", *args], capture_output=True, text=True,
                          timeout=120)


def test_nothing_in_the_current_environment_imports_eventlet():
    assert importlib.util.find_spec("eventlet") is None
    assert "eventlet" not in sys.modules


@pytest.mark.parametrize("environment", list(stages.ENVIRONMENTS))
def test_each_environment_is_consistent(environment):
    done = pip(environment, "check")
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_eventlet_environment_holds_only_its_servers():
    frozen = pip(stages.EVENTLET, "freeze").stdout.lower()
    assert "gunicorn==25.3.0" in frozen and "eventlet==" in frozen
    for tool in ("locust", "gevent", "pytest", "pandas"):
        assert f"\n{tool}==" not in f"\n{frozen}", tool


def test_a_missing_environment_is_refused_before_anything_starts(monkeypatch):
    gone = dataclasses.replace(stages.ENVIRONMENTS[stages.EVENTLET], venv=".venv-not-made")
    monkeypatch.setitem(stages.ENVIRONMENTS, stages.EVENTLET, gone)
    with pytest.raises(options.OptionsError) as raised:
        options.RunOptions(stages=tuple(stages.select("3,3g,5,9,9e")))
    message = str(raised.value)
    # 9e: its Socket.IO server's (its HTTP server, granian, is the current one's)
    assert message.startswith("stage(s) 3, 5, 9e serve from the eventlet environment "
                              "(.venv-not-made")
    assert "make setup" in message and "requirements-eventlet.txt" in message
    # a stage of the current environment needs nothing more
    options.RunOptions(stages=(stages.get("3g"),))


def test_lab_run_says_which_environment_is_missing(tmp_path):
    """The command line, end to end: exit 2 and one message, no results folder."""
    code = ("import dataclasses, sys; from benchmarks import lab, stages; "
            "e = stages.ENVIRONMENTS['eventlet']; "
            "stages.ENVIRONMENTS['eventlet'] = dataclasses.replace(e, venv='.venv-not-made'); "
            "sys.exit(lab.main(sys.argv[1:]))")
    done = subprocess.run([sys.executable, "-c", code, "run", "--no-plots", "--stages", "3t,3",
                           "--results", str(tmp_path)], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2, done.stdout + done.stderr
    said = done.stdout + done.stderr
    assert "stage(s) 3 serve from the eventlet environment" in said and "make setup" in said
    assert "Traceback" not in said and not any(tmp_path.iterdir())


def test_run_json_records_every_package_of_each_environment_a_run_used():
    """run.json `environments`: the current one always (Locust runs from it), the eventlet
    one when a stage serves from it; each with its Python and every installed package, as
    that environment's own pip lists them."""
    record = environment.environment((stages.get("3g"),))["environments"]
    assert set(record) == {stages.CURRENT}
    # 9e: granian from the current one, its Socket.IO server from eventlet's
    assert set(environment.environment((stages.get("9e"),))["environments"]) == {
        stages.CURRENT, stages.EVENTLET}
    record = environment.environment((stages.get("3g"), stages.get("3")))["environments"]
    assert set(record) == {stages.CURRENT, stages.EVENTLET}
    for name, found in record.items():
        assert found["venv"] == stages.ENVIRONMENTS[name].venv and "error" not in found
        listed = json.loads(pip(name, "list", "--format", "json").stdout)
        assert found["packages"] == {p["name"]: p["version"] for p in listed}, name
    assert record[stages.EVENTLET]["packages"]["gunicorn"] == "25.3.0"
    assert "eventlet" not in record[stages.CURRENT]["packages"]
    assert record[stages.CURRENT]["packages"]["locust"]


def test_run_json_names_both_servers_of_stage_9_with_their_versions():
    """run.json `servers` of stage 9: granian's version (as its environment's own Python
    reads it) for the HTTP API, and gunicorn's with gevent for Socket.IO; one server for
    a stage without a Socket.IO server of its own. Its twins (the realtime set): each
    Socket.IO server from its own environment, 9e's from eventlet's."""
    served = environment.servers(stages.get("9"))["app"]
    granian = subprocess.run([str(procs.environment_bin(stages.CURRENT) / "granian"),
                              "--version"], capture_output=True, text=True, timeout=60)
    assert served["server"] == f"granian {granian.stdout.split()[-1]}" == "granian 2.8.7"
    python = environment.environment_versions(stages.CURRENT)["python"]
    assert served["socketio"] == {"environment": stages.CURRENT, "python": python,
                                  "server": "gunicorn 27.0.1", "worker_class": "gevent",
                                  "worker_library": "gevent 26.9.0"}
    assert "socketio" not in environment.servers(stages.get("8"))["app"]
    eventlet = environment.environment_versions(stages.EVENTLET)
    wanted = {"9e": (stages.EVENTLET, "gunicorn 25.3.0", "eventlet",
                     f"eventlet {eventlet['eventlet']}"),
              "9t": (stages.CURRENT, "gunicorn 27.0.1", "gthread", None),
              "9a": (stages.CURRENT, "granian 2.8.7", "asgi", None)}
    for key, (env, server, worker, library) in wanted.items():
        served = environment.servers(stages.get(key))["app"]
        assert (served["environment"], served["server"], served["worker_class"]) == (
            stages.CURRENT, "granian 2.8.7", "wsgi"), key
        socketio = served["socketio"]
        assert (socketio["environment"], socketio["server"], socketio["worker_class"],
                socketio["worker_library"]) == (env, server, worker, library), key


def test_run_json_names_the_system_and_the_browser_it_ran_on():
    """run.json's versions: the distribution (Debian 12 or 13 differ in Python, Redis,
    Nginx and Chromium) and the browser that took the screenshots, as they name
    themselves; Python's is run.json's `python`."""
    found = environment.versions()
    release = dict(line.split("=", 1) for line in
                   Path("/etc/os-release").read_text().splitlines() if "=" in line)
    assert found["system"] == release["PRETTY_NAME"].strip('"')
    browser = shutil.which("chromium")
    if browser is None:
        assert found["chromium"] is None
    else:
        said = subprocess.run([browser, "--version"], capture_output=True, text=True,
                              timeout=30).stdout.strip()
        assert found["chromium"] == said and said.startswith("Chromium ")
    assert found["redis-server"] and found["nginx"]
