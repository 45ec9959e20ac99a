"""The app's own timed access log (app/access_log.py), which `flask run` stages use for
the server's latency (benchmarks/analysis/access_logs.py: server_latency)."""

from __future__ import annotations

from benchmarks.analysis import access_logs


def test_each_request_gets_a_timed_line_the_lab_reads(make_app, tmp_path):
    log = tmp_path / "access.log"
    client = make_app(ACCESS_LOG=str(log)).test_client()
    assert client.get("/healthz").status_code == 200
    assert client.get("/users/me").status_code == 401  # refused requests are timed too
    assert client.post("/auth/login", data="{", content_type="application/json"
                       ).status_code == 400
    lines = log.read_text().splitlines()
    assert len(lines) == 3, lines
    parsed = [access_logs.REQUEST_LINE.search(line) for line in lines]
    assert [(p["method"], p["path"], p["status"]) for p in parsed] == [
        ("GET", "/healthz", "200"), ("GET", "/users/me", "401"), ("POST", "/auth/login", "400")]
    seconds = [float(line.split()[-1]) for line in lines]
    assert all(0 < s < 5 for s in seconds), seconds
    assert access_logs.count_answered(log)["responses"] == 3
    latency = access_logs.server_latency(log)
    assert latency["server_p99_ms"] == round(max(seconds) * 1000, 1), (latency, seconds)


def test_without_the_setting_no_file_and_no_hook(make_app, tmp_path):
    app = make_app()
    assert app.test_client().get("/healthz").status_code == 200
    assert not list(tmp_path.iterdir())
    assert not any(f.__module__ == "app.access_log"
                   for f in app.before_request_funcs.get(None, []))
