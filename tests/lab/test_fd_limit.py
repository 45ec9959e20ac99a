"""fd_limit for real: one gunicorn worker under `ulimit -n 256` cannot hold 400 sockets.

Redis and the app run in a network namespace (as root; else on free loopback
ports), the probe opens 400 authenticated Socket.IO connections; under 256
descriptors some fail and the worker's log says `Too many open files`, under
4096 all connect. Then nothing the tool started may still run.
"""

from __future__ import annotations

import json
import shutil

import psutil
import pytest
from conftest import run_module, running_with

from benchmarks import stages
from benchmarks.sandbox import hosts
from benchmarks.studies import fd_limit

ROOT = stages.ROOT
pytestmark = pytest.mark.skipif(not shutil.which("prlimit"), reason="prlimit (util-linux) missing")



def test_limited_stage_is_stage_3_on_one_worker_under_prlimit():
    stage = fd_limit.limited_stage(stages.get("3"), 1024)
    assert stage.server_command()[:4] == ["prlimit", "--nofile=1024:1024", "--", "gunicorn"]
    cmd = " ".join(stage.server_command())
    assert "-c gunicorn/eventlet.conf.py -w 1 " in cmd  # stage 3's file, one worker
    assert f"--worker-connections {fd_limit.WORKER_CONNECTIONS}" in cmd
    assert "-w" not in stages.get("3").server_command()  # registry untouched
    assert stage.env["FLASK_REDIS_CONNECT_TIMEOUT"] == "5"  # Redis's wait is not the study's


@pytest.mark.slow
def test_256_descriptors_fail_and_4096_hold_them_all(tmp_path):
    out = tmp_path / "fd.json"
    started: list[int] = []
    # --timeout 5, the study's default (3 once left an upgrade unanswered on a half-speed box)
    code, output = run_module(
        "benchmarks.studies.fd_limit", "--nofile", "256,4096", "--connections", "400",
        "--hold", "2", "--timeout", "5", "--results", str(tmp_path / "results"), "--json", str(out),
        timeout=70, pids=started)
    (pid,) = started
    assert code == 0, output[-3000:]
    low, high = json.loads(out.read_text())

    assert low["nofile"] == 256 and low["worker_nofile"] == [256, 256]
    assert low["failed"] > 0 and low["ok"] < 256, low
    # the worker ran into its limit: its log says EMFILE, or its descriptors were seen at
    # it (sampled every 0.2 s, the peak may fall between samples: 229 held, 2 EMFILE lines)
    assert low["emfile_lines"] > 0 or low["worker_fds_peak"] >= 250, low
    assert low["emfile_lines"] > 0 or {"refused", "closed"} & set(low["reasons"]), low

    assert high["nofile"] == 4096 and high["worker_nofile"] == [4096, 4096]
    assert high["ok"] == 400 and high["failed"] == 0, high
    assert high["emfile_lines"] == 0 and high["worker_fds_peak"] > 400
    assert high["worker_rss_held_mb"] > high["worker_rss_idle_mb"]

    assert "probe: 400 connected" in output and "holding them for 2 s" in output  # as it holds
    header = next(ln for ln in output.splitlines() if ln.split()[:2] == ["nofile", "tried"])
    assert header.split()[2:4] == ["ok", "failed"] and "EMFILE" in header
    # nothing left: no namespace this run made (named with its pid: another lab may
    # run beside it), no worker, no Redis or probe
    assert hosts.owned_namespaces(pid) == []
    for r in (low, high):
        assert not psutil.pid_exists(r["worker_pid"]) or \
            psutil.Process(r["worker_pid"]).status() == psutil.STATUS_ZOMBIE
    assert running_with(str(tmp_path)) == []
