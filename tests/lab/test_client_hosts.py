"""`--client-hosts 2`: the load from two client hosts in Locust's own distributed mode,
against a real stage (its own file: the suite runs two files at a time, and
test_lab.py is long already)."""

from __future__ import annotations

import json
import re

import pytest
from test_lab import lab, leftovers

from benchmarks import latency_log, stages
from benchmarks.analysis import metrics
from benchmarks.run import results


@pytest.mark.netns
@pytest.mark.slow
def test_two_client_hosts_run_locusts_distributed_mode(tmp_path):
    """`--client-hosts 2`: Locust's master on `client`, a worker on each client host; both
    workers load the stage, each host's Locust CPU is reported, the counts agree. With
    `--app-hosts 2` stage 5's Nginx sends requests to both app hosts, each on the CPU
    set `--app-cpus` gave it. The workers cannot see the results folder, as on other
    machines: what they count reaches the master in Locust's messages."""
    result = lab("run", "--no-plots", "--stages", "5", "--client-hosts", "2", "--app-hosts", "2",
                 "--app-cpus", "1/0", "--duration", "5", "--warmup", "1", "--users", "20",
                 "--no-screenshots", "--results", str(tmp_path), timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    run_dir = next(p for p in tmp_path.iterdir() if p.name[:1].isdigit())
    stage_dir = run_dir / stages.get("5").dirname
    info = json.loads((run_dir / "run.json").read_text())
    assert info["parameters"]["client_hosts"] == 2
    assert info["parameters"]["app_hosts"] == {"5": 2}  # stage 5 on two app hosts
    placed = {role: host["cpus"] for role, host in info["stages"]["5"]["hosts"].items()}
    assert (placed["app"], placed["app2"], info["parameters"]["cpus"]["app_cpus"]) == (
        "1", "0", "1/0"), placed  # --app-cpus: each app host its own set
    split = json.loads((stage_dir / "count.json").read_text())["app_hosts"]
    assert set(split) == {"app", "app2"} and min(split.values()) > 0, split
    assert {"client", "client2"} <= set(info["stages"]["5"]["hosts"])
    assert "2 workers connected" in (stage_dir / "locust.log").read_text()
    for host in ("client", "client2"):
        assert "Got quit message from master" in (stage_dir / f"locust-{host}.log").read_text()
    per_host = metrics.client_cpu(stage_dir / "sampler.csv")
    assert set(per_host) == {"locust", "locust_client2"}
    assert all(cpu["mean"] > 0 for cpu in per_host.values()), per_host
    m = json.loads((stage_dir / "metrics.json").read_text())
    assert m["client_cpu_p95"] == max(cpu["p95"] for cpu in per_host.values())
    assert m["rps_gap"] <= metrics.COUNT_GAP_LIMIT, m
    assert "Locust CPU per client host (mean, p95): client " in result.stdout
    # the entry class counts both hosts' connections: 20 HTTP users and 10 Socket.IO
    # users, each with a connection of its own (one host alone holds about half)
    layout = json.loads((stage_dir / "sockets.json").read_text())
    assert layout["classes"]["front"][0] == "client+client2"
    assert m["estab_front_peak"] >= 30, m["estab_front_peak"]
    # each worker in a mount namespace of its own, an empty tmpfs over the stage folder:
    # it reads no accounts there and writes no figures there, yet the master's
    # sessions.json is the sum of what each worker says it counted
    commands = (stage_dir / "locust-workers.txt").read_text().splitlines()
    assert len(commands) == 2 and all(
        f"mount -t tmpfs ftl-hidden {stage_dir}" in c for c in commands), commands
    own = workers_own(stage_dir)
    sessions = json.loads((stage_dir / "sessions.json").read_text())
    assert len(own) == 2
    assert sessions["created"] == sum(o["sessions"]["created"] for o in own) == 10, own
    stats = (stage_dir / "locust_stats.csv").read_text()
    assert "/auth/login" in stats and "/auth/register" not in stats  # the master's accounts
    assert sorted(p.name for p in stage_dir.glob("sessions*")) == ["sessions.json"]
    # every request's time reached the master's .hlog, each worker's histograms added up:
    # as many as Locust counted (HTTP and Socket.IO acks)
    hlog = latency_log.read(stage_dir / results.LATENCY_HLOG)
    assert hlog[None].get_total_count() == sum(o["latency"]["requests"] for o in own) == (
        m["requests"] + m["sio_requests"]), (own, m["requests"], m["sio_requests"])
    assert leftovers(result.pid) == []


def workers_own(stage_dir) -> list[dict]:
    """What each worker says it sent its master as the test stopped (worker_messages.py)."""
    said = [(stage_dir / f"locust-{host}.log").read_text() for host in ("client", "client2")]
    return [json.loads(re.search(r"final figures sent to the master: (.*)", s)[1]) for s in said]
