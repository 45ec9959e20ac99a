"""The attendee's screen: Locust's web UI with the Sockets tab, in a real browser.

The derivations (benchmarks/sockets_tab/stats.py) on a sampler CSV written here; the
plugin in a real Locust (headless lines, a stage that is not up); `lab up`'s UI
port check; then headless Chromium against `lab up 0` and `lab up 2`: start a
swarm through the UI, open the Sockets tab, read TIME_WAIT toward Redis twice.
Each test judges only the lab it started (another may run on the machine).
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from conftest import ctrl_c, need_browser, read_until

from benchmarks import stages
from benchmarks.capture import tables
from benchmarks.run import locust_cli, results, runner
from benchmarks.sandbox import hosts, port_forward, procs
from benchmarks.sockets_tab import headless, stats

ROOT = stages.ROOT
HOSTS = ("client", "app", "redis")
CLASSES = {"redis": ("app", "redis", 6379), "front": ("client", "app", 8000)}
PROCS = ("redis", "app", "locust")  # the sampler adds itself


def write_stage_folder(folder: Path, rows: list[dict], partial: str = "") -> Path:
    """A stage folder as `lab up` leaves it: sockets.json and the sampler's CSV (the
    sampler's own header), `partial` as a row still being written."""
    folder.mkdir(parents=True, exist_ok=True)
    results.write_json(folder / results.SOCKETS_JSON, {
        "classes": CLASSES,
        "port_ranges": {"client": "32768 60999", "app": "50000 50999", "redis": "32768 60999"}})
    header = tables.columns(CLASSES, PROCS, HOSTS)
    lines = [",".join(header)]
    lines += [",".join(str(row.get(c, "")) for c in header) for row in rows]
    (folder / results.SAMPLER_CSV).write_text("\n".join(lines) + "\n" + partial)
    return folder / results.SAMPLER_CSV


ROW = {"ts": 1000.0, "elapsed_s": 12.0, "tw_redis": 900, "tw_redis_client": 880,
       "tw_redis_server": 20, "estab_redis": 7, "tw_front": 300, "tw_front_client": 0,
       "tw_front_server": 300, "estab_front": 40, "tw_total_app": 1200, "estab_total_app": 54,
       "tw_total_client": 0, "tw_total_redis": 20, "cpu_app": 87.5, "cpu_redis": 4.0,
       "cpu_locust": 31.25}


def test_snapshot_derives_holder_per_request_ports_and_cpu(tmp_path):
    csv_path = write_stage_folder(tmp_path / "up" / "00-builtin",
                                  [{**ROW, "elapsed_s": 11.0, "tw_redis": 1}, ROW],
                                  partial="1001.0,13.0,99")  # a row being written
    rows = stats.read_rows(csv_path)
    assert [r["elapsed_s"] for r in rows] == [11.0, 12.0]  # the partial row left out
    snap = stats.snapshot(rows[-1], stats.read_layout(csv_path), 1000)
    redis = next(c for c in snap["classes"] if c["class"] == "redis")
    front = next(c for c in snap["classes"] if c["class"] == "front")
    assert (redis["time_wait"], redis["established"]) == (900, 7)
    assert redis["held_by"] == "app 880, redis 20"  # the connecting side closed first
    assert front["held_by"] == "app 300"  # the app (listening) closed first
    assert redis["tw_per_request"] == 0.9 and front["tw_per_request"] == 0.3
    app = next(h for h in snap["hosts"] if h["host"] == "app")
    # the app connects to Redis: its TIME_WAIT there plus its open connections
    assert (app["ports_in_use"], app["port_range"]) == (887, 1000)
    assert app["ports_share"] == 0.887
    assert snap["cpu"] == {"client": 31.2, "app": 87.5, "redis": 4.0}
    line = stats.line(snap)
    assert "redis TW 900 (app 880, redis 20) 0.9/req EST 7" in line, line
    assert "app ports 887/1000" in line and "app 88%" in line, line
    names = [r["name"] for r in stats.table_rows(snap)]
    assert names[0] == "class redis: app -> redis:6379" and "host app" in names


def test_no_requests_yet_means_no_per_request_figure(tmp_path):
    csv_path = write_stage_folder(tmp_path / "s", [ROW])
    snap = stats.snapshot(stats.read_rows(csv_path)[-1],
                                 stats.read_layout(csv_path), 0)
    assert all(c["tw_per_request"] is None for c in snap["classes"])
    empty = stats.snapshot(None, stats.read_layout(csv_path), 0)
    assert stats.line(empty) == "sockets: (sampler starting)"


def test_request_window_counts_the_last_60_seconds():
    window = stats.RequestWindow()
    for t, total in ((0, 0), (30, 3000), (59, 5900), (90, 9000), (120, 12000)):
        window.add(total, now=t)
    assert window.recent() == 12000 - 5900  # what was sent after t=60 (from the t=59 point)


def test_time_wait_left_by_an_earlier_run_is_kept_out_until_it_expires(tmp_path):
    window = stats.RequestWindow()
    window.add(5000, now=0, time_wait={"redis": 900})
    window.add(0, now=10, time_wait={"redis": 800})  # a new swarm: Locust's count restarts
    assert window.left_over("redis", now=10) == 800
    assert window.left_over("redis", now=40) == 400  # half of its minute gone
    assert window.left_over("redis", now=70) == 0
    window.add(300, now=40)
    csv_path = write_stage_folder(tmp_path / "s", [{**ROW, "tw_redis": 700}])
    snap = stats.snapshot(stats.read_rows(csv_path)[-1],
                                 stats.read_layout(csv_path), window.recent(),
                                 lambda cls: window.left_over(cls, now=40))
    redis = next(c for c in snap["classes"] if c["class"] == "redis")
    assert redis["tw_per_request"] == 1.0  # (700 - 400 left over) / 300 requests


def locust(*args, timeout=60) -> subprocess.CompletedProcess:
    return subprocess.run([str(procs.VENV_BIN / "locust"), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout,
                          env=procs.child_env())


def test_headless_run_prints_a_sockets_line_per_interval(tmp_path):
    csv_path = write_stage_folder(tmp_path / "up" / "00-builtin", [ROW])
    done = locust("-f", f"{stages.KV_LOCUSTFILE},{locust_cli.SOCKETS_TAB}", "--headless",
                  "-u", "0", "-t", "5s", "--host", "http://127.0.0.1:9",
                  "--sockets-csv", str(csv_path), "--sockets-every", "1")
    out = done.stdout + done.stderr
    lines = [ln for ln in out.splitlines() if ln.startswith("sockets 12s:")]
    assert len(lines) >= 2, out
    assert "redis TW 900 (app 880, redis 20)" in lines[0]


def test_plugin_refuses_a_stage_that_is_not_up(tmp_path):
    done = locust("-f", f"{stages.KV_LOCUSTFILE},{locust_cli.SOCKETS_TAB}", "--headless",
                  "-u", "0", "-t", "2s", "--sockets-csv", str(tmp_path / "gone" / "s.csv"))
    assert done.returncode == 2
    assert "no stage is up there" in done.stderr and "lab up 0" in done.stderr


def test_a_taken_ui_port_is_refused_before_anything_starts(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        # --ui-address: where FTL_UI_ADDRESS=0.0.0.0 is set (the image) the default is
        # every address, and this test is about the machine's 127.0.0.1
        proc = subprocess.Popen([sys.executable, "-m", "benchmarks.lab", "up", "0",
                                 "--ui-port", str(port), "--ui-address", "127.0.0.1",
                                 "--results", str(tmp_path)],
                                cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)
        out = proc.communicate(timeout=60)[0]
    assert proc.returncode == 2, out
    assert f"port {port} on 127.0.0.1 is taken" in out and "--ui-port " in out, out
    suggested = int(out.rsplit("--ui-port ", 1)[1].split()[0])
    assert suggested != port and not procs.port_is_taken(suggested)
    assert not (tmp_path / results.UP).exists(), "nothing of the stage was made"
    assert hosts.owned_namespaces(proc.pid) == []


def test_forward_copies_both_ways_and_stop_releases_the_port():
    """The forward on the machine's loopback (namespace None: the same code path but the
    setns, which the browser test covers)."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        listener = port_forward.listen(0)
        port = listener.getsockname()[1]
        forward = port_forward.Forward(listener, None, server.getsockname()).start()
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as client:
                upstream, _ = server.accept()
                with upstream:
                    client.sendall(b"GET /sockets/stats")
                    assert upstream.recv(100) == b"GET /sockets/stats"
                    upstream.sendall(b"200 OK")
                    assert client.recv(100) == b"200 OK"
        finally:
            forward.stop()
    assert not procs.port_is_taken(port)
    with pytest.raises(port_forward.PortTaken), socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port_forward.listen(taken.getsockname()[1])


# --- in a browser ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def browser():
    """Headless Chromium (conftest.need_browser: skipped without one, failed in CI)."""
    need_browser()
    with headless.chromium() as driver:
        yield driver


def read_line(proc: subprocess.Popen, marker: str, seconds: float = 120) -> str:
    seen = read_until(proc, marker, seconds)
    assert marker in seen, f"`lab up` never said {marker!r}:\n{seen}"
    return seen


# stage -> how TIME_WAIT toward Redis must move while the swarm runs
GROWS, STAYS_LOW = "grows", "stays low"
REDIS_TW_BOUND = 10  # stage 2: the pool's few connections; seeding leaves a handful


def redis_time_wait(browser, url: str, load: str) -> int:
    """TIME_WAIT toward Redis as the tab shows it: in the browser, or its JSON."""
    if load == "button":
        return headless.redis_time_wait(browser)
    snap = json.load(urllib.request.urlopen(f"{url}/sockets/stats", timeout=10))
    return next(c["time_wait"] for c in snap["classes"] if c["class"] == "redis")


# stage 0's load comes from the UI's Start button; stage 2's from `lab exec -- locust
# --headless`, as every exercise loads: the tab's per-request figures count the server's
# requests, so they must work either way
@pytest.mark.netns
@pytest.mark.slow
@pytest.mark.parametrize("stage, expect, load", [("0", GROWS, "button"), ("2", STAYS_LOW, "exec")])
def test_sockets_tab_shows_time_wait_toward_redis(browser, tmp_path, stage, expect, load):
    port = procs.free_port()
    lab = subprocess.Popen([sys.executable, "-m", "benchmarks.lab", "up", stage,
                            "--ui-port", str(port), "--results", str(tmp_path)],
                           cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    stage_dir = results.up_dir(tmp_path, stages.get(stage))
    locust = None
    try:
        said = read_line(lab, "web UI")
        url = f"http://127.0.0.1:{port}"
        assert url in said, said
        if load == "button":
            headless.start_swarm(browser, url, users=20, spawn_rate=10)
            headless.open_sockets_tab(browser)
        else:  # the UI shows its tabs once its own swarm runs: read the tab's JSON
            locust = subprocess.Popen(
                [sys.executable, "-m", "benchmarks.lab", "exec", "--results", str(tmp_path),
                 "--", "locust", "--headless", "-u", "20", "-r", "10", "-t", "14s"],
                cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        time.sleep(4)  # the users log in and start their tasks
        first = redis_time_wait(browser, url, load)
        time.sleep(6)
        second = redis_time_wait(browser, url, load)
        stats = json.load(urllib.request.urlopen(f"{url}/sockets/stats", timeout=10))
        if load == "button":
            browser.save_screenshot(str(stage_dir / results.SOCKETS_SCREENSHOT))
            chart = browser.find_element("id", "sockets-chart-svg").get_attribute("innerHTML")
            headless.stop_swarm(browser)
    finally:
        if locust:
            locust.wait(timeout=30)
        rest = ctrl_c(lab)
    redis = next(c for c in stats["classes"] if c["class"] == "redis")
    front = next(c for c in stats["classes"] if c["class"] == "front")
    assert stats["requests_last_60s"] > 50, stats  # the server's count, whoever loads
    if expect == GROWS:
        assert second > first + 20, (first, second)
        # about one TIME_WAIT per request, held by the app (it closes first)
        assert redis["time_wait_client"] > 0 and redis["tw_per_request"] > 0.5, redis
    else:
        assert first <= REDIS_TW_BOUND and second <= REDIS_TW_BOUND, (first, second)
        assert redis["established"] > 0, redis  # the pool's connections, reused
        # gunicorn's sync workers close every client connection: ~1 TIME_WAIT a request
        assert front["tw_per_request"] > 0.5, front
    assert stats["cpu"].get("client") is not None and stats["cpu"].get("app") is not None
    assert 0 <= stats["foreign_cpu"]["server"] <= 100, stats  # what else ran, live
    if load == "button":
        assert "polyline" in chart and "TIME_WAIT redis" in chart
        assert (stage_dir / results.SOCKETS_SCREENSHOT).stat().st_size > 10_000
    assert lab.returncode == 130 and "everything it started is stopped" in rest, rest
    assert hosts.owned_namespaces(lab.pid) == [] and runner.started_by(lab.pid) == []
    assert not procs.port_is_taken(port), "the forward's port was released"

