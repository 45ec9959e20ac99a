"""benchmarks/studies/slow_call.py on the real servers (issue 43, point 2): with one
blocking thread granian runs one request at a time, so requests that wait are served
one after another (at most 1 / SLOW_S a second) and a fast request waits behind them;
with 8 threads, and on gevent's and gthread's workers, the waits overlap."""

from __future__ import annotations

import json
import shutil

import pytest

from benchmarks.studies import slow_call


def test_wrk_output_is_read_in_milliseconds():
    text = ("  Latency Distribution\n     50%  802.33ms\n     75%  1.20s\n"
            "     99%  378.00us\n  1000 requests in 10.0s\nRequests/sec:     24.03\n")
    assert slow_call.parse_wrk(text) == {"rps": 24.03, "p50_ms": 802.33, "p99_ms": 0.38}


@pytest.mark.slow
@pytest.mark.skipif(not shutil.which("wrk"), reason="needs wrk (make setup installs it)")
def test_one_blocking_thread_serves_the_waits_one_at_a_time(tmp_path):
    out = tmp_path / "runs.json"
    assert slow_call.main(["--seconds", "3", "--repeats", "1", "--json", str(out)]) == 0
    runs = {r["server"]: r for r in json.loads(out.read_text())}
    serial = 1 / slow_call.SLOW_S
    one = runs["granian, 1 blocking thread (stage 9)"]
    assert one["slow_rps"] <= serial * 1.1, one
    assert one["fast_p50_ms"] >= slow_call.SLOW_S * 1000 / 2, one
    for name in ("granian, 8 blocking threads", "gunicorn gevent (stage 8)",
                 "gunicorn gthread (stage 3t)"):
        # four connections waiting at once: well above one at a time
        assert runs[name]["slow_rps"] >= 2 * serial, runs[name]
