"""`lab run --metrics` end to end (benchmarks/run/prometheus.py), on a stage that traces
(benchmarks/run/spans.py): one short run of stage 9o (granian and gunicorn, Nginx, Redis:
a target of each kind; every request traced) with a real Prometheus on the `metrics`
host, Debian's exporters beside Nginx and Redis, and the span sink beside Prometheus.
Every target was up through the measured window, the app's request rate answers above
zero, the app's own counter (granian's /metrics) agrees with the requests Locust made,
Prometheus's graph was drawn; the sink received a SERVER span for every request Flask
served, through the real OTLP exporter, none lost; and nothing of it is left: no
process, no namespace, no temporary database. Needs root (network namespaces) and the
three Debian packages (`make setup`); without them these tests are skipped with the reason.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

import pytest
from test_lab import lab, leftovers

from benchmarks import stages
from benchmarks.run import prometheus, results, spans

STAGE = stages.get("9o")


@pytest.fixture(scope="module")
def metrics_run(tmp_path_factory):
    """One short run of stage 9o with --metrics; its stage folder, the lab's result and
    how long it took."""
    if prometheus.missing_line():
        pytest.skip(prometheus.missing_line())
    out = tmp_path_factory.mktemp("metrics-results")
    started = time.monotonic()
    proc = lab("run", "--stages", STAGE.key, "--metrics", "--duration", "3", "--warmup", "0",
               "--users", "20", "--no-profile", "--no-screenshots", "--no-plots",
               "--results", str(out), timeout=300)
    (out / "lab-output.txt").write_text(proc.stdout + proc.stderr)
    return {"proc": proc, "dir": (out / "latest").resolve() / STAGE.dirname,
            "seconds": time.monotonic() - started}


def answer(stage_dir: Path, name: str) -> float | None:
    return json.loads((stage_dir / results.PROMETHEUS_QUERIES).read_text())[
        "queries"][name]["value"]


@pytest.mark.netns
def test_every_target_was_up_through_the_window(metrics_run):
    proc, stage_dir = metrics_run["proc"], metrics_run["dir"]
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    targets = json.loads((stage_dir / results.PROMETHEUS_TARGETS).read_text())
    health = prometheus.health(targets)
    wanted = {f"app/{stages.ADDRESS['app']}:{stages.APP_PORT}",
              f"nginx/{stages.ADDRESS['proxy']}:{stages.NGINX_EXPORTER_PORT}",
              f"redis/{stages.ADDRESS['redis']}:{stages.REDIS_EXPORTER_PORT}"}
    assert health == dict.fromkeys(wanted, "up"), health
    queries = json.loads((stage_dir / results.PROMETHEUS_QUERIES).read_text())
    throughout = queries["queries"]["targets_up_throughout"]["answer"]["data"]["result"]
    assert {f"{r['metric']['job']}/{r['metric']['instance']}": r["value"][1]
            for r in throughout} == dict.fromkeys(wanted, "1")
    # the exporters read what they sit beside: Nginx's requests and Redis's commands
    assert answer(stage_dir, "nginx_request_rate") > 0
    assert answer(stage_dir, "redis_command_rate") > 0


@pytest.mark.netns
def test_the_apps_counter_agrees_with_the_requests_the_load_made(metrics_run):
    """Prometheus's rate over the window is above zero, and what the app's counter grew
    by in the window is Locust's count of HTTP requests (each answered by the app: the
    stage has no failures), within a few in a hundred; its p99 is a time a request can
    take (1 ms to 10 s, the histogram's buckets)."""
    stage_dir = metrics_run["dir"]
    assert answer(stage_dir, "app_request_rate") > 0
    counted = json.loads((stage_dir / results.PROMETHEUS_QUERIES).read_text())[
        "app_requests_in_window"]
    made = json.loads((stage_dir / "metrics.json").read_text())["requests"]
    assert made > 0 and 0.95 <= counted / made <= 1.05, (counted, made)
    assert 0.001 <= answer(stage_dir, "app_p99_seconds") <= 10


@pytest.mark.netns
def test_the_sink_received_a_span_for_every_request_served(metrics_run):
    """At 100% sampling: a SERVER span for each request that reached Flask (the servers'
    own access logs, Prometheus's scrapes among them), each exported by the real OTLP
    exporter as the servers exited if not before, none dropped; Redis's CLIENT spans
    beside them; the count is the stage's check, and the lab said it."""
    stage_dir, proc = metrics_run["dir"], metrics_run["proc"]
    got = json.loads((stage_dir / results.SPANS_JSON).read_text())
    assert got["error"] is None, got
    made = json.loads((stage_dir / "metrics.json").read_text())["requests"]
    assert got["spans_requests"] >= made > 0, (got, made)
    assert got["spans_server"] == got["spans_requests"] and got["spans_lost"] == 0, got
    assert got["sink"]["by_kind"].get("CLIENT", 0) > 0 and got["sink"]["rejected"] == 0, got
    checks = {c["name"]: c for c in json.loads((stage_dir / "checks.json").read_text())}
    assert checks["spans_lost"]["passed"], checks["spans_lost"]
    assert f"{got['spans_requests']} requests served" in proc.stdout


@pytest.mark.netns
def test_the_graph_was_drawn(metrics_run):
    """Headless Chromium saved Prometheus's graph page, --no-screenshots (the Sockets
    tab's) notwithstanding (skipped without Chromium)."""
    stage_dir = metrics_run["dir"]
    output = metrics_run["proc"].stdout
    if "no screenshot of Prometheus's graph" in output and "not found" in output:
        pytest.skip("no Chromium here (make setup installs it)")
    picture = stage_dir / results.PROMETHEUS_GRAPH
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", output[-2000:]


@pytest.mark.netns
def test_nothing_of_it_is_left(metrics_run):
    """The run's own: its namespaces (the metrics host's among them), the processes it
    started (Prometheus, the exporters and the span sink carry its pid), its temporary
    database."""
    pid = metrics_run["proc"].pid
    assert not leftovers(pid)
    assert not list(Path(tempfile.gettempdir()).glob(prometheus.data_prefix(pid) + "*"))
    # and it ran where it should: a host of its own, on the client's CPUs
    info = json.loads((metrics_run["dir"].parent / "run.json").read_text())
    hosts = info["stages"][STAGE.key]["hosts"]
    assert hosts[stages.METRICS_ROLE]["address"] == stages.ADDRESS[stages.METRICS_ROLE]
    assert hosts[stages.METRICS_ROLE]["namespace"] == f"ftl-{pid}-{STAGE.key}-metrics"
    assert hosts[stages.METRICS_ROLE]["cpus"] == hosts["client"]["cpus"]
    assert "prometheus: targets up 3/3" in metrics_run["proc"].stdout
    # the sink ran there too, and stopped: its log says it listened on the host's address
    log = (metrics_run["dir"] / f"{spans.NAME}.log").read_text()
    assert f"{stages.ADDRESS[stages.METRICS_ROLE]}:{stages.OTLP_PORT}" in log, log
