"""benchmarks/studies/crosscheck.py: wrk sends Locust's request, and a real cross-check runs.

The request test captures, on a loopback port, what a real Locust KeyValueUser
and a real wrk with the cross-check's script send, and compares the header
lines. The stage test runs `python -m benchmarks.studies.crosscheck` for a few seconds
on stage 3 in network namespaces (root only).
"""

from __future__ import annotations

import csv
import os
import socket
import statistics
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from conftest import run_module

from benchmarks import stages
from benchmarks.run import results, runner
from benchmarks.sandbox import hosts, procs
from benchmarks.studies import crosscheck

ROOT = stages.ROOT
VENV_BIN = Path(sys.executable).parent


def first_request(send) -> dict[str, str]:
    """The header lines (name -> value, lower-case names) of the first request that
    `send(url)` makes to a one-shot loopback listener."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(20)
    got = {}

    def accept():
        while "raw" not in got:  # wrk first connects once without sending anything
            conn, _ = listener.accept()
            with conn:
                conn.settimeout(10)
                data = chunk = b"-"
                while chunk and b"\r\n\r\n" not in data:
                    chunk = conn.recv(4096)
                    data += chunk
                if b"\r\n\r\n" in data:
                    got["raw"] = data[1:].decode()
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n"
                                 b"Connection: close\r\n\r\n{}")

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        send(f"http://127.0.0.1:{listener.getsockname()[1]}")
        thread.join(20)
    finally:
        listener.close()
    lines = got["raw"].split("\r\n")
    assert lines[0] == f"GET /kv/{crosscheck.KEY} HTTP/1.1", lines[0]
    return {k.strip().lower(): v.strip()
            for k, v in (ln.split(":", 1) for ln in lines[1:] if ln)}


def test_wrk_sends_the_request_locust_sends(tmp_path):
    procs.require_binary("wrk", crosscheck.WRK_HINT)
    script = tmp_path / "wrk.lua"
    script.write_text(crosscheck.wrk_script(0))

    def locust(url):
        subprocess.run([str(VENV_BIN / "locust"), "-f", "benchmarks/kv.py", "--headless",
                        "-u", "1", "-r", "1", "-t", "2s", "--host", url, "--only-summary",
                        "KeyValueUser"], cwd=ROOT, capture_output=True, timeout=60,
                       env=procs.child_env())

    def wrk(url):
        subprocess.run(["wrk", "-t1", "-c1", "-d1s", "-s", str(script), f"{url}/kv/bench"],
                       capture_output=True, timeout=60)

    from_locust, from_wrk = first_request(locust), first_request(wrk)
    from_locust.pop("host"), from_wrk.pop("host")
    assert from_wrk == from_locust
    assert "user-agent" in from_locust  # not two empty sets


def test_wrk_script_pauses_only_when_asked():
    assert "delay" not in crosscheck.wrk_script(0)
    assert "function delay() return 1 end" in crosscheck.wrk_script(1)


def test_parse_wrk_reads_rate_median_and_timeouts():
    text = ("  Latency Distribution\n     50%  674.00us\n     75%  170.61ms\n"
            "  Socket errors: connect 0, read 0, write 0, timeout 227\n"
            "Requests/sec:   1497.45\n")
    assert crosscheck.parse_wrk(text) == {"rps": 1497.45, "p50_ms": 0.67, "timeouts": 227}
    with pytest.raises(Exception, match="no Requests/sec"):
        crosscheck.parse_wrk("unable to connect to 198.18.0.30:8000 Connection refused\n")


@pytest.mark.parametrize("args, says", [
    (["--stages", "99"], "99"),
    (["--duration", "0"], "at least 1"),
    (["--forms", "ab"], "choose among wrk, wrk-t1, wrk-paused"),
], ids=["unknown-stage", "zero-duration", "unknown-form"])
def test_bad_input_is_refused_before_anything_starts(args, says, tmp_path):
    code, out = run_module("benchmarks.studies.crosscheck", *args, "--results", str(tmp_path),
                           timeout=60)
    assert code == 2, out
    assert says in out
    assert not list(tmp_path.iterdir()), "a results run was made for bad input"


@pytest.mark.netns
@pytest.mark.slow
def test_a_short_crosscheck_on_stage_3(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "benchmarks.studies.crosscheck", "--stages", "3",
                             "--duration", "3", "--rounds", "2", "--pause", "0.5",
                             "--forms", "wrk", "--results", str(tmp_path)], cwd=ROOT,
                            text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = proc.communicate(timeout=240)[0]
    assert proc.returncode == 0, out
    assert not hosts.owned_namespaces(proc.pid) + runner.started_by(proc.pid)
    [run_dir] = tmp_path.glob("*-crosscheck")
    with open(run_dir / crosscheck.CROSSCHECK_CSV) as f:
        rows = list(csv.DictReader(f))
    assert [r["stage"] for r in rows] == ["3", "3"], rows
    for row in rows:
        for name in ("locust_rps", "wrk_rps"):
            assert float(row[name]) > 50, (name, row)  # every tool asked had answers
        assert row["wrk_t1_rps"] == row["wrk_paused_rps"] == "", row  # forms not asked for
        assert float(row["wrk_ratio"]) == pytest.approx(
            float(row["locust_rps"]) / float(row["wrk_rps"]), abs=0.01)
        # where the time went: the servers' CPU per request, each tool's own CPU
        for tool in ("locust", "wrk"):
            assert 0.05 < float(row[f"{tool}_server_ms"]) < 50, row
            assert 0 < float(row[f"{tool}_client_cpu"]) < 200, row
    with open(run_dir / crosscheck.RATIOS_CSV) as f:
        ratios = {r["form"]: r for r in csv.DictReader(f)}
    assert set(ratios) == {"wrk"}, ratios
    got = ratios["wrk"]
    ratio = [float(r["wrk_ratio"]) for r in rows]
    # the ratios' geometric mean (a ratio is a positive quantity: stats.interval's rule)
    assert float(got["ratio_gmean"]) == pytest.approx(statistics.geometric_mean(ratio),
                                                     abs=0.002)
    assert float(got["ratio_low"]) <= min(ratio) and float(got["ratio_high"]) >= max(ratio)
    assert f"Locust/wrk: {float(got['ratio_gmean']):.2f} [" in out
    assert "-t100 -c100" in (run_dir / "03-eventlet-keepalive" / "round-1" / "wrk.txt").read_text()


def test_refused_while_a_stage_is_up_in_the_same_results_folder(tmp_path):
    """Its stage would empty the folder `lab up` serves from; the state file names a live
    pid (this test's), as a running `lab up` writes it."""
    results.write_json(results.up_state(tmp_path), {"stage": "0", "pid": os.getpid()})
    code, out = run_module("benchmarks.studies.crosscheck", "--stages", "3", "--results",
                           str(tmp_path), timeout=60)
    assert code == 2, out
    assert "stage 0 is already up" in out
    assert not list(tmp_path.glob("*-crosscheck"))
