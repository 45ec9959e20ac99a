"""The app's own timed access log (app/watchers/access_log.py), which `flask run` stages use for
the server's latency (benchmarks/analysis/access_logs.py: server_latency); and no token
in any log: the app's, werkzeug's, gunicorn's and Nginx's."""

from __future__ import annotations

import logging
import os

import requests
import websocket
from conftest import PASSWORD, gunicorn_process, nginx_in_front
from werkzeug._internal import _log as werkzeug_log

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
    assert not any(f.__module__ == "app.watchers.access_log"
                   for f in app.before_request_funcs.get(None, []))


def test_werkzeugs_request_line_gets_no_token(make_app):
    """`flask run`'s own line (stage 0), through werkzeug's real logging call."""
    make_app()  # registers the filter
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append
    logger = logging.getLogger("werkzeug")
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        werkzeug_log("info", '"%s" %s %s', "GET /socket.io/?EIO=4&token=SECRET-1 HTTP/1.1",
                     "200", "-")
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    assert [r.getMessage() for r in records] == [
        '"GET /socket.io/?EIO=4&token=[redacted] HTTP/1.1" 200 -']


def socketio_connects(port: int, query: str = "", header=(), auth: str = "") -> bool:
    """A raw websocket Socket.IO connection through `port`, with the token in the
    query, a header or the connect packet's auth dict; whether it was accepted."""
    ws = websocket.create_connection(
        f"ws://127.0.0.1:{port}/socket.io/?EIO=4&transport=websocket{query}",
        header=list(header), timeout=5)
    try:
        assert ws.recv().startswith("0")
        ws.send(f'40{{"token":"{auth}"}}' if auth else "40")
        return ws.recv().startswith('40{"sid"')
    finally:
        ws.close()


def test_a_token_sent_each_way_lands_in_no_log(redis_url, tmp_path):
    """gunicorn with the access log the lab passes it, the app's own log too, stage 5's
    Nginx in front: the token in the query, the Authorization header and the auth dict
    (and a REST call with the header); then every file the stage wrote is searched."""
    app_log, gunicorn_log = tmp_path / "app-access.log", tmp_path / "gunicorn-access.log"
    args = ["-k", "gevent", "-w", "1", "--no-control-socket",
            *access_logs.gunicorn_args(gunicorn_log)]
    with gunicorn_process(redis_url, tmp_path, args, env={"FLASK_ACCESS_LOG": str(app_log)}
                          ) as (url, _):
        body = {"email": f"redact-{os.getpid()}@example.test", "password": PASSWORD,
                "username": "redact"}
        assert requests.post(url + "/auth/register", json=body, timeout=10).status_code == 201
        token = requests.post(url + "/auth/login", json=body, timeout=10).json()["access_token"]
        with nginx_in_front(url, tmp_path) as front:
            # through Nginx, and not
            for port in (int(front.rsplit(":", 1)[1]), int(url.rsplit(":", 1)[1])):
                assert socketio_connects(port, query=f"&token={token}")
                assert socketio_connects(port, query=f"&x=1&%74oken={token}&token={token}")
                assert socketio_connects(port, header=[f"Authorization: Bearer {token}"])
                assert socketio_connects(port, auth=token)
                me = requests.get(f"http://127.0.0.1:{port}/users/me?token={token}",
                                  headers={"Authorization": f"Bearer {token}"}, timeout=5)
                assert me.status_code == 200
    logs = [p for p in tmp_path.rglob("*") if p.is_file() and p.suffix in (".log", ".out")]
    assert {"app-access.log", "gunicorn-access.log", "gunicorn.log", "access.log",
            "error.log", "nginx.out"} <= {p.name for p in logs}
    leaks = [p.name for p in logs if token.encode() in p.read_bytes()]
    assert not leaks, f"the token is in {leaks}"
    # The requests that carried it in the query are there, redacted (gunicorn writes no
    # line for a websocket: its worker hands the connection over).
    redacted = {"/users/me?token=[redacted] HTTP/1.1": (2, 2, 1),
                "transport=websocket&token=[redacted] HTTP/1.1": (0, 0, 1),
                "transport=websocket&x=1&%74oken=[redacted]&[redacted] HTTP/1.1": (0, 0, 1)}
    for n, log in enumerate((app_log, gunicorn_log, tmp_path / "nginx" / "access.log")):
        text = log.read_text()
        assert {k: text.count(k) for k in redacted} == {k: v[n] for k, v in redacted.items()}
        assert all(access_logs.REQUEST_LINE.search(line) for line in text.splitlines()), text
