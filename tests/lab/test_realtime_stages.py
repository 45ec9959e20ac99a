"""The realtime set's twins of stage 9 (9e, 9t, 9a, 10; lab 16), end to end: one short `lab
run` of 9a and 10 in network namespaces (test_lab.py's full run leaves the set out),
then their checks (stage 9's), which server held their websockets, and a message posted
over HTTP reaching a websocket there. 10t is 10's config with one setting of its
environment changed (test_configs.py reads it). So that `make test` stays within its 8
minutes (it took 8 min 1 s with 9e here too), the others are run elsewhere: 9t's server
by the capacity study's test (tests/lab/test_capacity.py: 150 websockets on its threads,
every count held to the server's); 9e's eventlet Socket.IO server by the app's suite
(test_socketio_gunicorn.py, test_engineio_guard.py on eventlet), and the environment it
comes from (eventlet's, beside granian from .venv) by test_environments.py. Needs root
(network namespaces); without it these tests are skipped with the reason.
"""

from __future__ import annotations

import json
import re
import time

import pytest
from test_lab import lab, leftovers

from benchmarks import stages
from benchmarks.sandbox import nginx_conf

TWINS = [s for s in stages.STAGES if s.set_name == "realtime"]
RUN = [s for s in TWINS if s.key in ("9a", "10")]  # the lab run's (others: the docstring)
# What each twin's Socket.IO server is: run.json's record (the environment, the server and
# its version as that environment's own Python reads it, the worker class and library),
# and what the server's own log says it started (gunicorn names its version and worker;
# granian its start and the worker it spawns)
SERVED = {
    "9a": ({"environment": stages.CURRENT, "server": "granian 2.8.7",
            "worker_class": "asgi", "worker_library": None},
           [r"Starting granian"],
           r"Spawning worker-1 with PID: (\d+)"),
    # stage 10: stage 9's gevent worker on gunicorn/realtime.conf.py
    "10": ({"environment": stages.CURRENT, "server": "gunicorn 27.0.1",
            "worker_class": "gevent", "worker_library": "gevent 26.9.0"},
           [r"Starting gunicorn 27\.0\.1", r"Using worker: gevent"],
           r"Booting worker with pid: (\d+)"),
}


@pytest.fixture(scope="module")
def realtime_run(tmp_path_factory):
    """One short run of 9a and 10, 50 users (10 of them on Socket.IO), as the full
    run takes its stages; the results folder, and how long the run took."""
    out = tmp_path_factory.mktemp("realtime-results")
    started = time.monotonic()
    proc = lab("run", "--no-plots", "--stages", ",".join(s.key for s in RUN), "--duration", "3",
               "--warmup", "1", "--users", "50", "--no-screenshots", "--results", str(out),
               timeout=600)
    (out / "lab-output.txt").write_text(proc.stdout + proc.stderr)
    return {"proc": proc, "run_dir": (out / "latest").resolve(),
            "seconds": time.monotonic() - started}


def test_the_set_is_stage_9_and_twins_that_change_its_socketio_server_alone():
    """9e, 9t, 9a and 10 change stage 9's Socket.IO server; 10t is stage 10 with one
    setting of its environment back as stage 9 has it."""
    assert [s.key for s in stages.select("realtime")] == ["9", "9e", "9t", "9a", "10", "10t",
                                                          "10l"]
    assert set(SERVED) == {s.key for s in RUN}
    nine, ten = stages.get("9"), stages.get("10")
    for key, setting in (("10t", stages.GREENLET_TREE), ("10l", stages.LIBRARY_GREENLETS)):
        twin = stages.get(key)
        assert (twin.twin_of, twin.socketio_server) == ("10", ten.socketio_server)
        assert twin.env == {**ten.env, **setting}
    for twin in [t for t in TWINS if t.key not in ("10t", "10l")]:
        assert twin.twin_of == "9" and twin.socketio_server != nine.socketio_server
        assert (twin.server, twin.front, twin.sysctl, twin.users, twin.checks, twin.nginx,
                twin.redis_mode) == (nine.server, nine.front, nine.sysctl, nine.users,
                                     nine.checks, nine.nginx, nine.redis_mode), twin.key
        # its app settings are stage 9's; 9t states the threading mode it runs
        threading = stages.THREADING if twin.key == "9t" else {}
        assert twin.env == {**nine.env, **threading}, twin.key


@pytest.mark.netns
@pytest.mark.slow
def test_each_twin_passes_stage_9s_checks(realtime_run):
    proc, run_dir = realtime_run["proc"], realtime_run["run_dir"]
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert not leftovers(proc.pid)
    for twin in RUN:
        checks = json.loads((run_dir / twin.dirname / "checks.json").read_text())
        assert {c["name"] for c in checks} == {c.metric for c in stages.get("9").checks}
        failed = [c for c in checks if not c["passed"]]
        assert not failed, (twin.key, failed)


@pytest.mark.netns
@pytest.mark.slow
def test_the_window_begins_after_the_warm_ups_upstream_connections_closed(realtime_run):
    """The warm-up goes through Nginx, which closes each of its upstream connections the
    load does not take up keepalive_timeout (5 s) after its last request: the sampler's
    first row comes later, so those TIME_WAIT are not the load's (once, 9a's
    `tw_upstream_per_request` read 0.072 here: benchmarks/run/runner.py warm_up)."""
    run_dir = realtime_run["run_dir"]
    idle = nginx_conf.upstream_idle_s(stages.get("9").front)
    assert idle == 5.5  # keepalive_timeout 5s, and the margin
    for twin in RUN:
        d = run_dir / twin.dirname
        warmed = (d / "locust-warmup.json").stat().st_mtime
        first = float((d / "sampler.csv").read_text().splitlines()[1].split(",")[0])
        assert first >= warmed + idle, (twin.key, first - warmed)


@pytest.mark.netns
@pytest.mark.slow
def test_each_socketio_server_is_the_one_named(realtime_run):
    """run.json says what served /socket.io/ on the app host, from the environment that
    has it (9e's gunicorn 25.3 from .venv-eventlet, beside granian from .venv); the
    server's own log says it started as that; the app host's socket table shows that
    program listening on the Socket.IO port; and the probe's websocket was held by the
    worker that log names."""
    run_dir = realtime_run["run_dir"]
    info = json.loads((run_dir / "run.json").read_text())
    assert set(info["environments"]) == {stages.CURRENT}
    for twin in RUN:
        wanted, log_lines, worker_line = SERVED[twin.key]
        served = info["stages"][twin.key]["servers"]["app"]
        assert (served["environment"], served["server"], served["worker_class"]) == (
            stages.CURRENT, "granian 2.8.7", "wsgi"), twin.key  # the HTTP API, as in 9
        socketio = served["socketio"]
        for name, value in wanted.items():
            if isinstance(value, re.Pattern):
                assert value.search(socketio[name] or ""), (twin.key, name, socketio)
            else:
                assert socketio[name] == value, (twin.key, name, socketio)
        d = run_dir / twin.dirname
        log = (d / "app_socketio.log").read_text(errors="replace")
        for line in log_lines:
            assert re.search(line, log), (twin.key, line)
        program = wanted["server"].split()[0]
        table = (d / "snapshots" / "app" / "ss-tanp.txt").read_text()
        listening = [row for row in table.splitlines() if row.startswith("LISTEN")
                     and f":{stages.SOCKETIO_PORT} " in row]
        assert listening and all(f'(("{program}",' in row for row in listening), listening
        workers = {int(pid) for pid in re.findall(worker_line, log)}
        delivered = json.loads((d / "delivery.json").read_text())
        assert delivered["member_pid"] in workers, (twin.key, delivered, workers)


@pytest.mark.netns
@pytest.mark.slow
def test_a_message_posted_over_http_reached_the_websockets_of_each(realtime_run):
    """DELIVERED_OVER_HTTP: every message posted to granian reached the member's websocket
    on the twin's Socket.IO server, live and in order (benchmarks/run/delivery.py)."""
    run_dir = realtime_run["run_dir"]
    for twin in RUN:
        delivered = json.loads((run_dir / twin.dirname / "delivery.json").read_text())
        assert delivered["over"] == "http", twin.key
        assert delivered["to"].endswith(f":{stages.SOCKETIO_PORT}"), delivered
        assert delivered["sent"] == delivered["received"] == delivered["asked"] == 20, delivered
        assert delivered["seq_gaps"] == delivered["missing"] == 0, delivered
        m = json.loads((run_dir / twin.dirname / "metrics.json").read_text())
        assert m["cross_host_delivered"] == 1 and m["sio_sessions"] >= 10, (twin.key, m)
