"""The app's Prometheus metrics (app/watchers/metrics.py): off by default; on, each request counted
by its route's pattern (bounded labels whatever a client sends) and timed; /metrics in
Prometheus's text format, never a 5xx; several worker processes summed through
PROMETHEUS_MULTIPROC_DIR under a real gunicorn (stage 8's config) and a real granian
(stage 9's command)."""

from __future__ import annotations

import os
import signal
import time
import urllib.request
from pathlib import Path

import psutil
import pytest
from conftest import gunicorn_process
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from app.settings import ConfigError
from app.watchers import metrics
from benchmarks import servers
from benchmarks.analysis import access_logs
from benchmarks.sandbox import procs
from benchmarks.stages import ROOT


def samples(text: str) -> list:
    """Every sample of a /metrics answer, parsed by prometheus_client's own parser."""
    return [s for family in text_string_to_metric_families(text) for s in family.samples]


def count(text: str, **labels) -> float:
    """chat_http_requests_total summed over the samples with these labels."""
    return sum(s.value for s in samples(text) if s.name == metrics.REQUESTS
               and all(s.labels.get(k) == v for k, v in labels.items()))


@pytest.fixture
def metered(make_app):
    return make_app(METRICS="1")


def test_off_by_default_no_route_and_no_hook(app):
    assert app.config["METRICS"] is False
    assert access_logs.SCRAPE_PATH == metrics.PATH  # the lab leaves the scrapes uncounted
    assert not access_logs.of_the_api("/metrics") and access_logs.of_the_api("/users/me")
    assert app.test_client().get(metrics.PATH).status_code == 404
    assert not any(r.rule == metrics.PATH for r in app.url_map.iter_rules())


def test_each_request_counted_by_its_routes_pattern_and_timed(metered, auth):
    client = metered.test_client()
    before = client.get(metrics.PATH).get_data(as_text=True)
    user = auth.user("metered")
    for _ in range(3):
        assert client.get("/users/me", headers=user.headers).status_code == 200
    assert client.get("/rooms/12345/messages", headers=user.headers).status_code == 404
    assert client.get("/no/such/path/1").status_code == 404
    answer = client.get(metrics.PATH)
    assert answer.status_code == 200
    assert answer.content_type.startswith("text/plain; version=0.0.4")
    after = answer.get_data(as_text=True)

    def grew(**labels):
        return count(after, **labels) - count(before, **labels)

    assert grew(method="GET", route="/users/me", status="200") == 3
    # the rule's pattern, never the path a client typed: bounded whatever is asked for
    assert grew(method="GET", route="/rooms/<room_id>/messages", status="404") == 1
    assert grew(method="GET", route="other", status="404") == 1
    assert not any("12345" in str(s.labels) or "/no/such" in str(s.labels)
                   for s in samples(after))
    assert count(after, route=metrics.PATH) == 0  # scrapes count nowhere
    hist = {s.labels["le"]: s.value for s in samples(after)
            if s.name == metrics.DURATION + "_bucket" and s.labels["route"] == "/users/me"}
    assert float(max(hist, key=float)) == float("inf") and hist["+Inf"] >= 3
    assert [float(le) for le in hist if le != "+Inf"] == list(metrics.BUCKETS)


def test_a_made_up_method_and_a_413_are_counted_with_bounded_labels(metered):
    client = metered.test_client()
    client.open("/users/me", method="BREW")
    too_big = client.post("/auth/login", data=b"x" * (metered.config["MAX_CONTENT_LENGTH"] + 1),
                          headers={"Content-Type": "application/json"})
    assert too_big.status_code == 413
    text = client.get(metrics.PATH).get_data(as_text=True)
    assert "BREW" not in text
    assert count(text, method="other") >= 1
    assert count(text, method="POST", route="/auth/login", status="413") >= 1


@pytest.mark.parametrize("value", ["1", "true", "on", True])
def test_the_setting_reads_as_the_others(make_app, value):
    assert make_app(METRICS=value).config["METRICS"] is True


def test_a_multiprocess_folder_that_does_not_exist_is_said_at_start(make_app, tmp_path,
                                                                    monkeypatch):
    monkeypatch.setenv(metrics.MULTIPROC_ENV, str(tmp_path / "missing"))
    with pytest.raises(ConfigError, match="no such folder"):
        make_app(METRICS="1")


@given(path=st.text(max_size=40).map(lambda t: "/metrics" + t.replace("\x00", "")),
       method=st.sampled_from(["GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "BREW"]),
       accept=st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=255),
                      max_size=60))
@settings(max_examples=150, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_metrics_never_answers_5xx(metered, path, method, accept):
    response = metered.test_client().open(path, method=method, headers={"Accept": accept})
    assert response.status_code < 500, response.data


def scrape(url: str) -> str:
    with urllib.request.urlopen(f"{url}{metrics.PATH}", timeout=10) as answer:
        return answer.read().decode()


def hit(url: str, times: int) -> None:
    for _ in range(times):
        with urllib.request.urlopen(f"{url}/healthz", timeout=10) as answer:
            assert answer.status == 200


def wait_until_booted(master, seconds: float = 60) -> None:
    """Until every worker of gunicorn's `master` has its own signal handlers: a forked
    worker keeps the master's until it has booted, and a QUIT then is lost (the worker
    stays up until gunicorn's KILL 30 s later). A booted worker no longer catches
    SIGHUP, which only the master handles (its SigCgt mask in /proc)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        children = psutil.Process(master.pid).children()
        masks = []
        for child in children:
            status = Path(f"/proc/{child.pid}/status").read_text()
            masks.append(int(status.split("SigCgt:")[1].split()[0], 16))
        if len(children) == 3 and not any(m & (1 << (signal.SIGHUP - 1)) for m in masks):
            return
        time.sleep(0.1)
    raise AssertionError(f"gunicorn's workers did not boot within {seconds:g} s")


# slow: several workers each importing the app; under qemu-user (the arm64 image's
# app tests, -m 'not slow') their boot outlasted 60 s. make test runs it natively.
@pytest.mark.slow
def test_gunicorn_workers_are_summed_and_an_exited_worker_is_folded(redis_url, tmp_path):
    """Stage 8's config with 3 workers: /metrics answers for every worker's requests,
    whichever serves the scrape, those of a worker that has exited too (the config's
    child_exit hook folds its files into one a type, app/watchers/metrics_exit.py, in the master,
    without an error)."""
    folder = tmp_path / "prom"
    folder.mkdir()
    env = {"FLASK_METRICS": "1", metrics.MULTIPROC_ENV: str(folder)}
    with gunicorn_process(redis_url, tmp_path, ["-c", "gunicorn/today.conf.py", "-w", "3"],
                          env) as (url, master):
        hit(url, 30)
        served = {int(p.stem.split("_")[1]) for p in folder.glob("counter_*.db")}
        for pid in served:  # the worker(s) that served: gone, and replaced by the master
            os.kill(pid, signal.SIGTERM)
        gone = psutil.wait_procs([psutil.Process(pid) for pid in served], timeout=60)[1]
        assert not gone, f"workers {gone} still up 60 s after TERM"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                hit(url, 10)
                break
            except OSError:  # a connection the exiting worker had accepted
                time.sleep(0.2)
        assert count(scrape(url), route="/healthz", status="200") >= 40
        # the config's child_exit folded each exited worker's files into the archives: in the
        # master, as it reaps the worker, which may come after the others answer (under
        # load it had not yet when the test looked at once)
        exited = {str(pid) for pid in served}
        deadline = time.monotonic() + 30
        while True:
            left = {p.stem.split("_")[1] for p in folder.glob("counter_*.db")}
            if ("archive" in left and not left & exited) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert "archive" in left and not left & exited, left
        wait_until_booted(master)  # a QUIT to a worker still booting is lost (below)
    log = (tmp_path / "gunicorn.log").read_text()
    assert "Traceback" not in log, log[-3000:]


# slow: several workers each importing the app; under qemu-user (the arm64 image's
# app tests, -m 'not slow') their boot outlasted 60 s. make test runs it natively.
@pytest.mark.slow
def test_granian_workers_are_summed(redis_url, tmp_path):
    """Stage 9's granian command with 2 workers (processes): one folder, both counted."""
    folder = tmp_path / "prom"
    folder.mkdir()
    port = procs.free_port()
    cmd = [p.format(app_host="127.0.0.1", app_port=port) for p in servers.GRANIAN_TODAY]
    cmd[cmd.index("--workers") + 1] = "2"
    env = {**os.environ, "FLASK_REDIS_URL": redis_url, "FLASK_SECRET_KEY": "test",
           "FLASK_METRICS": "1", metrics.MULTIPROC_ENV: str(folder)}
    proc = procs.start([procs.tool(cmd[0]), *cmd[1:]], log=tmp_path / "granian.log", env=env,
                       cwd=ROOT)
    url = f"http://127.0.0.1:{port}"
    try:
        procs.wait_until_serving(f"{url}/healthz", proc, timeout=120)
        hit(url, 40)
        assert count(scrape(url), route="/healthz", status="200") >= 40
    finally:
        procs.stop(proc, timeout=6, leader_only=True)
