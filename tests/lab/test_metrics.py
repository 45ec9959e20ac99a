"""The metric catalogue and a golden test on the committed reference capture (no root).

`metrics.compute` and `metrics.evaluate` on notebooks/reference-run/ must give back
exactly the metrics.json and checks.json that were committed with it: a change to
how a number is computed shows here first, and the catalogue names every number.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from benchmarks import checks, stages
from benchmarks.analysis import access_logs, metrics, reference, stats
from benchmarks.run import results

REFERENCE = stages.ROOT / "notebooks" / "reference-run"
MEASURED = list(results.measured_stages(REFERENCE))


def test_reference_capture_has_every_stage_of_the_main_line_and_its_twins():
    assert [s.key for s, _ in MEASURED] == [s.key for s in reference.captured_stages()]
    assert {s.key for s in stages.MAIN} <= {s.key for s, _ in MEASURED}


@pytest.mark.parametrize("stage, folder", MEASURED, ids=[s.key for s, _ in MEASURED])
def test_compute_reproduces_the_committed_metrics(stage, folder):
    assert metrics.compute(folder, stage) == results.read_json(folder / results.METRICS_JSON)


@pytest.mark.parametrize("stage, folder", MEASURED, ids=[s.key for s, _ in MEASURED])
def test_evaluate_reproduces_the_committed_checks(stage, folder):
    computed = metrics.evaluate(stage, metrics.compute(folder, stage))
    assert computed == results.read_json(folder / results.CHECKS_JSON)


def test_stage_4_failure_count_comes_from_the_kept_error_summary():
    stage = stages.get("4")
    m = metrics.compute(results.stage_dir(REFERENCE, stage), stage)
    assert m["nginx_eaddrnotavail"] > 1000  # tens of thousands of connect() failures


def test_every_check_names_a_catalogued_metric():
    named = {c.metric for s in stages.STAGES for c in s.checks}
    assert named <= set(metrics.CATALOGUE), named - set(metrics.CATALOGUE)


@pytest.mark.parametrize("stage, folder", MEASURED, ids=[s.key for s, _ in MEASURED])
def test_catalogue_and_compute_name_the_same_metrics(stage, folder):
    assert set(metrics.compute(folder, stage)) == set(metrics.CATALOGUE)


def test_summary_columns_are_catalogued():
    assert set(metrics.SUMMARY_COLUMNS[1:]) <= set(metrics.CATALOGUE)


def test_a_stage_with_no_answered_request_fails_every_check():
    stage = stages.get("5")  # its checks are all "nothing went wrong": 0 failures, ...
    nothing = {"requests": 0, "failures": 0, "tw_upstream_per_request": 0.0,
               "nginx_eaddrnotavail": 0}
    checks = metrics.evaluate(stage, nothing)
    assert checks and not any(c["passed"] for c in checks)
    assert all("no request was answered" in c["why"] for c in checks)


def test_mean_cpu_is_weighted_by_each_samples_interval(tmp_path):
    path = tmp_path / results.SAMPLER_CSV
    # 1 s at 100%, then 3 s at 0%: the mean over the 4 s is 25%, not 50%
    path.write_text("elapsed_s,cpu_app\n0.0,\n1.0,100\n4.0,0\n")
    assert metrics.mean_cpu(path, "cpu_app") == 25.0
    assert metrics.mean_cpu(path, "cpu_nginx") is None


def test_client_bound_uses_the_one_limit():
    assert not metrics.client_bound({"client_cpu_peak": metrics.CLIENT_CPU_LIMIT})
    assert metrics.client_bound({"client_cpu_peak": metrics.CLIENT_CPU_LIMIT + 0.1})


def test_count_answered_reads_all_three_access_log_shapes(tmp_path):
    """Nginx's `counted` format, gunicorn's access log and werkzeug's (coloured) lines."""
    log = tmp_path / "access.log"
    log.write_text(
        "warm-up and set-up, before the measured run\n"
        '"GET /kv/a HTTP/1.1" 200\n'                                       # Nginx / gunicorn
        '"POST /rooms/3/messages HTTP/1.1" 201\n'
        '"GET /users/me HTTP/1.1" 502\n'                                   # not answered
        '"GET /socket.io/?EIO=4&transport=websocket HTTP/1.1" 101\n'       # not chat HTTP
        '"POST /rooms/3/messages HTTP/1.1" 502 0.000 0.021 0.020\n'         # the race (5k)
        '"GET /users/me HTTP/1.1" 200 0.000, 0.000 0.047, 0.015 0.061\n'    # sent twice
        '127.0.0.1 - - [22/Nov/2026 08:00:10] "GET /users/friends HTTP/1.1" 200 -\n'
        '127.0.0.1 - - [22/Nov/2026 08:00:10] "\x1b[35m\x1b[1mPOST /rooms/7/messages '
        'HTTP/1.1\x1b[0m" 201 -\n'
        " * Running on http://127.0.0.1:8000\n")
    start = len("warm-up and set-up, before the measured run\n")
    assert access_logs.count_answered(log, start) == {"responses": 7, "answered": 5,
                                                  "post_502": 1, "resent": 1}
    assert access_logs.count_answered(log, log.stat().st_size) == {
        "responses": 0, "answered": 0, "post_502": 0, "resent": 0}


def test_a_sampled_share_is_judged_allowing_for_its_sampling_error():
    """Stage 8's token share read 0.0301 of 166 samples in a 5 s run (0.02 in 30 s runs):
    within chance of 0.03. Stage 5's 0.0375 of 5,648 samples is not; nor is any figure
    past the threshold for a check that is not sampled."""
    token = checks.TOKEN_CPU_DOWN
    assert token.sampled and token.passes(0.0301, 166) and token.passes(0.02, 1547)
    assert not token.passes(0.0375, 5648) and not token.passes(0.08, 166)
    assert not token.passes(0.0301) and not checks.NO_400S.passes(1, 166)


def test_a_socketio_400_counts_only_for_a_session_the_host_never_held(tmp_path):
    """Round robin's misrouted poll counts; the last poll of a session this host served,
    racing its own close as Locust stops, does not (it flaked stage 6h's NO_400S)."""
    log = tmp_path / "access.log"
    log.write_text(
        '"GET /socket.io/?transport=polling&EIO=4&t=1 HTTP/1.1" 200 0.001\n'      # handshake
        '"POST /socket.io/?transport=polling&EIO=4&sid=Held HTTP/1.1" 200 0.001\n'
        "measured from here\n"
        '"GET /socket.io/?transport=polling&EIO=4&sid=Held&t=2 HTTP/1.1" 200 0.1\n'
        '"POST /socket.io/?transport=polling&EIO=4&sid=Other HTTP/1.1" 400 0.001\n'
        '"GET /socket.io/?transport=polling&EIO=4&sid=Held&t=3 HTTP/1.1" 400 0.001\n'
        '"GET /socket.io/?transport=polling&EIO=4&sid=Other&t=4 HTTP/1.1" 400 0.001\n'
        '"GET /kv/a HTTP/1.1" 400 0.001\n')
    start = log.read_text().index("measured from here")
    assert access_logs.count_socketio_400(log, start) == 2
    assert access_logs.count_socketio_400(log, log.stat().st_size) == 0


def test_socketio_sessions_are_the_masters_file_alone(tmp_path):
    """The master writes every worker's sessions added up (benchmarks/worker_messages.py);
    a file beside it (an older run's worker's) is not counted again."""
    assert metrics.sessions(tmp_path)["sio_sessions"] is None  # no Socket.IO users
    results.write_json(tmp_path / results.SESSIONS_JSON,  # the master's (or the only one)
                       {"created": 10, "completed": 8, "failed": 2,
                        "lengths": [20.0, 20.0, 20.0, 20.0, 20.0, 0.15, 19.5, 19.5, 19.5, 0.2]})
    results.write_json(tmp_path / "sessions.4242.json",  # an older run's worker's
                       {"created": 4, "completed": 3, "failed": 1,
                        "lengths": [19.5, 19.5, 19.5, 0.2]})
    assert metrics.sessions(tmp_path) == {
        "sio_sessions": 10, "sio_sessions_failed": 2, "sio_sessions_completed": 8,
        "sio_session_p50_ms": 20000, "sio_session_p95_ms": 20000}  # Locust's rule: rank 6


def locusts_percentiles(histograms: list[dict], fractions: list[float]) -> list[list]:
    """locust.stats.calculate_response_time_percentile on each histogram, run in a
    subprocess: importing locust here would monkey-patch this test process (gevent)."""
    code = ("import json, sys; from locust.stats import calculate_response_time_percentile as p; "
            "h, f = json.load(sys.stdin); print(json.dumps([[p({int(k): v for k, v in t.items()},"
            " sum(t.values()), q) for q in f] for t in h]))")
    out = subprocess.run([sys.executable, "-c", code], input=json.dumps([histograms, fractions]),
                         capture_output=True, text=True, check=True, timeout=60)
    return json.loads(out.stdout)


def test_the_one_percentile_rule_is_locusts_own():
    """stats.percentile against Locust's function on Locust's histograms: the reference
    capture's own (every stage's locust.json) and small ones where nearest rank differs
    (100 requests: p99 is the slowest)."""
    histograms = [{1: 90, 5: 9, 1500: 1}, {3: 1}, {10: 2, 20: 2}, {7: 5, 130: 3, 1100: 2}]
    for _, folder in MEASURED:
        for e in results.read_json(folder / results.LOCUST_JSON):
            histograms.append({int(float(ms)): n for ms, n in e["response_times"].items()})
    fractions = [0.5, 0.9, 0.95, 0.99, 0.999, 0.9999]
    ours = [[stats.percentile(h, q) for q in fractions] for h in histograms if h]
    assert ours == locusts_percentiles([h for h in histograms if h], fractions)
    assert ours[0][3] == 1500 and stats.percentile({}, 0.5) is None


def test_a_percentile_needs_ten_requests_beyond_it():
    assert [stats.needed(q) for q in (0.5, 0.95, 0.99, 0.999, 0.9999)] == [
        20, 200, 1000, 10_000, 100_000]
    assert stats.too_few(0.99, 1000) is None
    assert stats.too_few(0.9999, 5809) == "p99.99: too few requests (5,809; needs 100,000)"
    assert stats.too_few(0.99, 0) == "p99: too few requests (none; needs 1,000)"


def test_server_latency_reads_the_time_that_closes_each_line(tmp_path):
    """Nginx's $request_time (after its upstream times) and gunicorn's %(L)s; Socket.IO
    requests and lines without a time (werkzeug's `-`) left out; the lab's one rule."""
    log = tmp_path / "access.log"
    log.write_text(
        "before the measured run\n"
        '"GET /users/me HTTP/1.1" 200 0.000 0.010 0.011\n'                 # Nginx: 11 ms
        '"GET /users/me HTTP/1.1" 200 0.000, 0.000 0.047, 0.015 0.061\n'   # resent: 61 ms
        '"GET /socket.io/?EIO=4&transport=websocket HTTP/1.1" 101 0.000 19.322 19.321\n'
        '"POST /rooms/3/messages HTTP/1.1" 201 0.002500\n'                  # gunicorn: 2.5 ms
        '127.0.0.1 - - [22/Nov/2026 08:00:10] "GET /users/friends HTTP/1.1" 200 -\n')
    start = len("before the measured run\n")
    assert access_logs.server_latency(log, start) == {
        "server_p50_ms": 11.0, "server_p95_ms": 61.0, "server_p99_ms": 61.0}
    assert access_logs.server_latency(log, log.stat().st_size) == dict.fromkeys(
        ("server_p50_ms", "server_p95_ms", "server_p99_ms"))


def entry(method, name, requests, failures, times, start=100.0, last=110.0):
    """One entry of Locust's --json-file, in its own shape."""
    return {"name": name, "method": method, "num_requests": requests,
            "num_failures": failures, "start_time": start, "last_request_timestamp": last,
            "response_times": {str(ms): n for ms, n in times.items()}}


def test_locust_totals_keep_socketio_acks_beside_the_http_headline(tmp_path):
    results.write_json(tmp_path / results.LOCUST_JSON, [
        entry("GET", "/users/me", 60, 0, {10: 30, 20: 30}),
        entry("POST", "/rooms/[id]/messages", 40, 10, {30: 40}),
        entry(metrics.SOCKETIO_TYPE, "sendMessage", 500, 0, {2: 500}),
    ])
    totals = metrics.locust_totals(tmp_path)
    assert (totals["requests"], totals["failures"]) == (100, 10)
    assert totals["locust_rps"] == 10.0 and totals["rps"] == 9.0  # 100 in 10 s, 90 answered
    assert totals["p50_ms"] == 20.0 and totals["p99_ms"] == 30.0  # the acks' 2 ms left out
    assert (totals["sio_requests"], totals["sio_p50_ms"]) == (500, 2.0)



MERGE = """
import json, locust  # locust first: it patches the standard library for gevent
from benchmarks import worker_messages
one = {"intended": 100, "late": 2, "not_started": 0, "worst_lateness_ms": 12.5,
       "rate": 40.0, "lengths": [1.0]}
two = {"intended": 90, "late": 0, "not_started": 3, "worst_lateness_ms": 30.0,
       "rate": 40.0, "lengths": [2.0, 3.0]}
print(json.dumps(worker_messages.merge(one, two, highest=("worst_lateness_ms", "rate"))))
"""


def test_workers_figures_merge_as_locust_merges_its_stats():
    """Counts summed, lists joined, the worst lateness and the rate the highest: two
    workers' open-model figures (benchmarks/worker_messages.py) as the master adds them
    (in a process of its own: importing Locust here would patch the suite's)."""
    ran = subprocess.run([sys.executable, "-c", MERGE], capture_output=True, text=True,
                         timeout=60, cwd=stages.ROOT)
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout) == {"intended": 190, "late": 2, "not_started": 3,
                                      "worst_lateness_ms": 30.0, "rate": 40.0,
                                      "lengths": [1.0, 2.0, 3.0]}


def late_locust_capture(folder, late_s: float):
    """Stage 0's reference folder with a fabricated 10 s load: the sampler starts at
    t = 1000 with Locust's process, Locust's test `late_s` later and then runs 10 s; 100
    requests end each second, each leaving a TIME_WAIT toward Redis, and the app takes
    50% of its core while they run: 1 TIME_WAIT and 5 ms of app CPU a request."""
    start, rate = 1000.0 + late_s, 100
    per_sec = {}
    for k in range(1000, 1000 + int(late_s) + 11):  # each second's share of the load
        share = max(0.0, min(k + 1, start + 10) - max(k, start))
        if share:
            per_sec[str(k)] = round(rate * share)
    results.write_json(folder / results.LOCUST_JSON, [
        {**entry("GET", "/users/me", sum(per_sec.values()), 0, {10: sum(per_sec.values())},
                 start=start, last=start + 10), "num_reqs_per_sec": per_sec,
         "num_fail_per_sec": {}}])
    lines = ["ts,elapsed_s,tw_total,tw_redis,tw_redis_client,tw_redis_server,estab_redis,"
             "cpu_app,cpu_locust,cpu_sampler"]
    for i in range(1, 11):  # the sampler's rows: 9.5 s, as the runner runs it
        t = 1000.0 + min(i, 9.5)
        tw = round(rate * max(0.0, t - start))
        busy = 50 * max(0.0, min(1.0, t - start))  # the load's share of the row's second
        lines.append(f"{t},{t - 1000},{tw},{tw},{tw},0,0,{busy},20,1")
    (folder / results.SAMPLER_CSV).write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("late_s, whole", [(0.4, 0.85), (3.0, 0.65)])
def test_per_request_figures_are_counted_over_the_samplers_own_window(tmp_path, late_s,
                                                                       whole):
    """Locust's test starting 3 s after the sampler (a crowded box) used to halve stage
    0's TIME_WAIT per request (the sampler saw 6.5 s of a 10 s load; Locust's totals
    held all of it); counted over the sampler's rows from Locust's per-second counts,
    it reads 1 however late Locust starts, and so does the app's CPU per request."""
    folder = tmp_path / "00-builtin"
    shutil.copytree(REFERENCE / "00-builtin", folder)
    late_locust_capture(folder, late_s)
    stage = stages.get("0")
    m = metrics.compute(folder, stage)
    assert m["requests"] == 1000
    assert m["tw_redis_per_request"] == pytest.approx(1.0, abs=0.01)
    assert m["app_cpu_ms_per_request"] == pytest.approx(5.0, abs=0.1)
    churn = [c for c in metrics.evaluate(stage, m) if c["name"] == "tw_redis_per_request"]
    assert churn and churn[0]["passed"]
    # over Locust's whole test instead, what the crowded box read
    first_tw = round(100 * max(0.0, 1001 - (1000 + late_s)))
    assert (m["tw_redis_peak"] - first_tw) / m["requests"] == pytest.approx(whole, abs=0.001)


# What a check may compare, whatever the box's speed: a ratio or share of what the
# stage did (per request, of the port range, of the requests, of messages), a time, a
# yes/no of the server, or whether an event happened at all (at least 1, exactly 0). A
# count of the window's events against a threshold above 1 would need a box as fast as
# the one it was tuned on: a box half as fast makes half the events in 3 s.
SPEED_FREE = ("_per_request", "_share_min", "_share_max", "_in_time_wait", "_ms", "_s",
              "cpu_share_", "server_keepalive", "cross_host_delivered")


def counts_of_events(pairs) -> list[str]:
    """Of (stage key, check) pairs, those that want a count of events above 1."""
    return [f"{key} {check.expected()}" for key, check in pairs
            if check.op == ">=" and check.threshold > 1
            and not any(part in check.metric for part in SPEED_FREE)]


def test_no_check_wants_a_count_of_events_a_slower_box_may_not_reach():
    every = [(stage.key, check) for stage in stages.STAGES for check in stage.checks]
    assert len(every) > 60 and counts_of_events(every) == [], counts_of_events(every)
    # the rule catches one: ten 502s in the window, where one says the ports ran out
    made_up = [("4", checks.Check("nginx_eaddrnotavail", ">=", 10, "")), *every]
    assert counts_of_events(made_up) == ["4 nginx_eaddrnotavail >= 10"]
