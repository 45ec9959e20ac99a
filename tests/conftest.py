"""Shared fixtures for the chat service's tests: a real Redis, the app, users.

No mocks: a real redis-server (started with benchmarks/sandbox/procs.py) backs every
test, and the database is flushed before each test that uses the app.
"""

from __future__ import annotations

import itertools
import os
import shutil
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import psutil
import pytest
import redis

from app import create_app, redis_store, settings
from benchmarks import servers
from benchmarks.sandbox import hosts, nginx_conf, procs
from benchmarks.stages import ROOT

SECRET = "test-secret-key-not-for-production"


# The longest test files, longest first: `make test` runs a file per process at a time
# (`--dist loadfile --no-loadscope-reorder`), handing the next file in this order to
# whichever process is free, so the three start with the longest and end together on
# short files, instead of a 45 s file starting last and setting the suite's time alone.
# The order is by each file's tests summed (wall seconds under `make test`, 2026-11-27:
# the full run's file about 290 s, test_lab_stops about 100 s, then 58 s down to 20 s;
# the realtime twins' run 30 s, --metrics' run 33-37 s on a busy box (stage 9o since it
# checks the span sink too: 28 s at load average 3-6), the capacity study's
# about 20 s);
# the files not named take under 20 s each and follow in the order collected.
LONGEST_FIRST = ("tests/lab/test_lab.py", "tests/lab/test_lab_stops.py",
                 "tests/lab/test_locust_chat.py", "tests/app/test_durability.py",
                 "tests/lab/test_ui.py", "tests/lab/test_report.py",
                 "tests/lab/test_realtime_stages.py", "tests/lab/test_metrics_stack.py",
                 "tests/app/test_slowloris.py", "tests/lab/test_crosscheck.py",
                 "tests/lab/test_real_machines.py", "tests/lab/test_slo.py",
                 "tests/app/test_socketio_gunicorn.py", "tests/lab/test_client_hosts.py",
                 "tests/lab/test_neighbour.py", "tests/app/test_engineio_guard.py",
                 "tests/app/test_fuzz.py", "tests/lab/test_omission.py",
                 "tests/lab/test_fd_limit.py", "tests/lab/test_strict.py",
                 "tests/lab/test_capacity.py",
                 "tests/lab/test_book.py", "tests/lab/test_arrivals.py",
                 "tests/lab/test_sweep.py", "tests/lab/test_notebooks.py")


def pytest_collection_modifyitems(config, items):
    """The longest files first; skip `netns` tests, with the reason, where namespaces
    cannot be made."""
    def rank(item) -> int:
        path = item.nodeid.split("::")[0]
        return LONGEST_FIRST.index(path) if path in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=rank)  # stable: each file keeps its own order
    ok, why = hosts.netns_available()
    if ok:
        return
    skip = pytest.mark.skip(reason=f"network namespaces unavailable: {why}")
    for item in items:
        if item.get_closest_marker("netns"):
            item.add_marker(skip)
PASSWORD = "correct-horse-battery"


@pytest.fixture(scope="session")
def redis_port(tmp_path_factory):
    """Port of a real redis-server for the whole session (fails loudly without one)."""
    try:
        procs.require_binary("redis-server", procs.REDIS_HINT)
    except procs.ServiceError as e:
        pytest.fail(f"these tests need a real Redis: {e}", pytrace=False)
    with procs.redis_server(tmp_path_factory.mktemp("redis")) as port:
        yield port


@pytest.fixture(scope="session")
def redis_url(redis_port):
    return f"redis://127.0.0.1:{redis_port}/0"


@pytest.fixture
def redis_client(redis_url):
    """A direct client, for preparing and checking data behind the app's back."""
    client = redis.Redis.from_url(redis_url, decode_responses=True, socket_timeout=5)
    client.flushdb()
    yield client
    client.close()


class RedisProcess:
    """A private redis-server that a test may stop and restart on the same port."""

    def __init__(self, workdir):
        self.workdir, self.port, self.proc = workdir, procs.free_port(), None
        self.url = f"redis://127.0.0.1:{self.port}/0"

    def start(self):
        self.proc = procs.start(procs.redis_command(self.port, self.workdir),
                                log=self.workdir / "redis.log")
        procs.wait_for_redis(self.port, proc=self.proc, timeout=30)

    def stop(self):
        procs.stop(self.proc)
        self.proc = None


@pytest.fixture
def private_redis(tmp_path):
    server = RedisProcess(tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def make_config(redis_url: str, **overrides) -> dict:
    config = {
        "TESTING": True,
        "SECRET_KEY": SECRET,
        "REDIS_URL": redis_url,
        # Flask-SocketIO's test client refuses to run with a message queue;
        # the queue itself is tested against real gunicorn workers.
        "SOCKETIO_MESSAGE_QUEUE": False,
        # scrypt costs ~0.1 s per hash on a busy 2-core box; one test checks
        # that the default is scrypt.
        "PASSWORD_HASH_METHOD": "pbkdf2:sha256:1000",
    }
    config.update(overrides)
    return config


@pytest.fixture
def make_app(redis_url, redis_client):
    """``make_app(**config_overrides)``: apps on the flushed test database."""
    apps = []

    def make(redis_url=redis_url, **overrides):
        app = create_app(make_config(redis_url, **overrides))
        apps.append(app)
        return app

    yield make
    for app in apps:
        redis_store.close_pool(app)  # or its sockets linger until garbage collection


def stage_config(key: str) -> dict:
    """A stage's FLASK_* environment (its `env` in the registry) as app settings, parsed
    as Flask's from_prefixed_env parses them."""
    import json

    from benchmarks import stages

    def value(raw: str):
        try:
            return json.loads(raw)
        except ValueError:
            return raw

    return {name.removeprefix("FLASK_"): value(raw)
            for name, raw in stages.get(key).env.items()}


@pytest.fixture(params=["default", "stage 7"])
def code_path_app(request, make_app):
    """The app with the default code path, and with stage 7's (app/fast_path.py)."""
    return make_app(**(stage_config("7") if request.param == "stage 7" else {}))


@pytest.fixture(params=settings.JSON_PROVIDERS)
def contract_app(request, make_app):
    """The app under each JSON provider (settings.JSON_PROVIDER): the API contract's
    tests run under both, for it is one contract whichever decodes the body."""
    return make_app(JSON_PROVIDER=request.param)


@pytest.fixture
def app(make_app):
    """The app in its default (pool) mode, on a freshly flushed database."""
    return make_app()


@pytest.fixture
def client(app):
    return app.test_client()


class User:
    """A registered, logged-in user: ids and ready-made auth headers."""

    def __init__(self, id: int, email: str, username: str, token: str):
        self.id, self.email, self.username, self.token = id, email, username, token
        self.headers = {"Authorization": f"Bearer {token}"}


class AuthActions:
    """Register and log in users through the HTTP API (like flaskr's AuthActions)."""

    _numbers = itertools.count(1)
    password = PASSWORD

    def __init__(self, client):
        self._client = client

    def register(self, email: str, password: str = PASSWORD, username: str = "someone"):
        return self._client.post("/auth/register", json={
            "email": email, "password": password, "username": username})

    def login(self, email: str, password: str = PASSWORD):
        return self._client.post("/auth/login", json={"email": email, "password": password})

    def user(self, name: str | None = None) -> User:
        """A new user, registered and logged in."""
        name = name or f"user{next(self._numbers)}"
        email = f"{name}@example.test"
        response = self.register(email, username=name)
        assert response.status_code == 201, response.get_json()
        login = self.login(email)
        assert login.status_code == 200, login.get_json()
        return User(response.get_json()["id"], email, name, login.get_json()["access_token"])

    def friends(self, a: User, b: User) -> int:
        """Make a and b friends (a asks, b asks back) and return the id of their room."""
        asked = self._client.post("/users/friends", json={"friendId": b.id}, headers=a.headers)
        assert asked.status_code in (200, 202), asked.get_json()
        answered = self._client.post("/users/friends", json={"friendId": a.id},
                                     headers=b.headers)
        assert answered.status_code in (200, 201), answered.get_json()
        response = self._client.post("/rooms/find-or-create", json={"friendId": b.id},
                                     headers=a.headers)
        assert response.status_code == 200, response.get_json()
        return response.get_json()["roomId"]


@pytest.fixture
def auth(client):
    return AuthActions(client)


def _assert_error(response, status: int, code: str | None = None) -> dict:
    """The response is a JSON error {error, message} with this status."""
    assert response.status_code == status, (response.status_code, response.get_data(as_text=True))
    assert response.is_json, response.get_data(as_text=True)
    body = response.get_json()
    assert set(body) >= {"error", "message"}, body
    assert isinstance(body["error"], str) and isinstance(body["message"], str)
    if code:
        assert body["error"] == code, body
    return body


@pytest.fixture
def assert_error():
    """``assert_error(response, status, code=None)`` -> the error body."""
    return _assert_error


def skip_unless_a_git_clone() -> None:
    """Skip a test that needs this copy to be a git repository where it is none: an image
    built from a git worktree (its `.git` is a file naming a folder outside the image;
    an image built from a clone keeps its `.git`)."""
    if shutil.which("git") is None or subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
            timeout=30).returncode:
        pytest.skip("no git, or this copy of the repository is no git clone")


def run_module(module: str, *args: str, timeout: float,
               pids: list[int] | None = None) -> tuple[int, str]:
    """Run `python -m module args` from the repo root, as a user would; (exit code, output).

    Killed (and the test fails on its exit code) if it outlives `timeout`. `pids`, if
    given, receives the process's pid (the owner in its namespaces' names)."""
    proc = subprocess.Popen([sys.executable, "-m", module, *args], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if pids is not None:
        pids.append(proc.pid)
    try:
        output = proc.communicate(timeout=timeout)[0]
    except subprocess.TimeoutExpired:
        proc.kill()
        output = proc.communicate()[0] + f"\n(killed after {timeout:.0f} s)"
    return proc.returncode, output


def ctrl_c(proc: subprocess.Popen) -> str:
    """Send SIGINT as a terminal's Ctrl-C would; the rest of the output."""
    proc.send_signal(signal.SIGINT)
    try:
        return proc.communicate(timeout=60)[0]
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.communicate()[0]


def read_until(proc: subprocess.Popen, marker: str, seconds: float = 90) -> str:
    """A process's output up to the first line with `marker` (or its end)."""
    deadline, lines = time.monotonic() + seconds, []
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if marker in line:
            break
    return "".join(lines)


def running_with(marker: str) -> list[str]:
    """Processes whose command line mentions `marker` (a test's own tmp folder)."""
    found = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        cmdline = " ".join(p.info["cmdline"] or [])
        if marker in cmdline:
            found.append(f"{p.info['pid']} {cmdline}")
    return found


@contextmanager
def gunicorn_process(redis_url: str, workdir, worker_args: list[str], env: dict | None = None):
    """A real gunicorn serving the app on a free port (pool mode); yields (URL, process),
    logs to workdir/gunicorn.log, stopped on exit. `env`: more FLASK_* settings."""
    port = procs.free_port()
    env = {**os.environ, "FLASK_REDIS_URL": redis_url, "FLASK_SECRET_KEY": "test",
           "FLASK_REDIS_MODE": "pool", **(env or {})}
    worker = worker_args[worker_args.index("-k") + 1] if "-k" in worker_args else "sync"
    proc = procs.start([procs.gunicorn_for(worker), *worker_args, "-b", f"127.0.0.1:{port}",
                        "--no-control-socket", "app.wsgi:app"], log=workdir / "gunicorn.log",
                       env=env, cwd=ROOT)
    try:
        # serving, not only bound: a test's first request must not wait for a worker
        # that is still importing the app (over 5 s on an emulated arm64 box)
        procs.wait_until_serving(f"http://127.0.0.1:{port}/healthz", proc, timeout=120)
        yield f"http://127.0.0.1:{port}", proc
    finally:
        # quick shutdown (TERM waits ~3 s for eventlet), to the master alone (runner.Stack.stop);
        # every process must go by itself: a worker deadlocked by a second QUIT stops only
        # at a KILL (judged by who is left, not by seconds: a slow box takes 8 s to QUIT)
        left = quit_gunicorn(proc)
        procs.stop(proc)
        assert not left, f"gunicorn {worker_args}: {left} still up 30 s after QUIT"


def quit_gunicorn(master: subprocess.Popen, timeout: float = 30) -> list[int]:
    """QUIT to gunicorn's master alone; the pids of its processes still up `timeout` s
    later (none when it shut down as it should)."""
    try:
        group = [psutil.Process(master.pid), *psutil.Process(master.pid).children(True)]
    except psutil.NoSuchProcess:
        return []
    master.send_signal(signal.SIGQUIT)
    _, alive = psutil.wait_procs(group, timeout=timeout)
    return [p.pid for p in alive]


# The asyncio Socket.IO server (app/asgi.py) as the tests run it: granian's ASGI
# interface, as for stage 9's HTTP side (granian/README.md), with `--workers` added.
# A worker still holding a long-poll when told to stop is killed after 3 s (granian
# otherwise waits for it).
def asgi_command(port: int, workers: int) -> list[str]:
    """Stage 9a's Socket.IO server command (servers.GRANIAN_ASGI) on 127.0.0.1:`port` with
    `workers` workers."""
    cmd = [part.format(app_host="127.0.0.1", app_port=port) for part in servers.GRANIAN_ASGI]
    cmd[cmd.index("--workers") + 1] = str(workers)
    return [procs.tool(cmd[0]), *cmd[1:]]


@contextmanager
def asgi_process(redis_url: str, workdir, workers: int = 1, env: dict | None = None):
    """The asyncio Socket.IO server on granian, on a free port (pool mode); yields (URL,
    process), logs to workdir/granian.log, stopped on exit. `env`: more FLASK_* settings.
    It serves /socket.io/ and /healthz only: the HTTP API is the WSGI servers'."""
    port = procs.free_port()
    env = {**os.environ, "FLASK_REDIS_URL": redis_url, "FLASK_SECRET_KEY": "test",
           "FLASK_REDIS_MODE": "pool", **(env or {})}
    proc = procs.start(asgi_command(port, workers), log=workdir / "granian.log", env=env,
                       cwd=ROOT)
    try:
        procs.wait_until_serving(f"http://127.0.0.1:{port}/healthz", proc, timeout=120)
        yield f"http://127.0.0.1:{port}", proc
    finally:
        stopping = time.monotonic()
        procs.stop(proc, timeout=6, leader_only=True)  # granian stops its workers itself
        assert time.monotonic() - stopping < 6, "granian took 6 s to stop"


def mint_token(redis_url: str, secret: str, name: str) -> str:
    """A new user's token, registered and logged in through the app in this process (a
    server that serves Socket.IO only has no /auth routes)."""
    app = create_app(make_config(redis_url, SECRET_KEY=secret))
    try:
        client = app.test_client()
        email = f"{name}-{os.getpid()}-{time.monotonic_ns()}@example.test"
        body = {"email": email, "password": PASSWORD, "username": name}
        assert client.post("/auth/register", json=body).status_code == 201
        return client.post("/auth/login", json=body).get_json()["access_token"]
    finally:
        redis_store.close_pool(app)


@contextmanager
def gunicorn(redis_url: str, workdir, worker_args: list[str]):
    """gunicorn_process, for tests that need only the URL."""
    with gunicorn_process(redis_url, workdir, worker_args) as (url, _):
        yield url


@contextmanager
def nginx_in_front(url: str, workdir):
    """Stage 5's Nginx (upstream keep-alive) in front of the server at `url`, on a free
    port; yields its URL, stopped on exit."""
    front = ("127.0.0.1", procs.free_port())
    conf = nginx_conf.render("conf.d/upstream-keepalive.conf", workdir / "nginx",
                             apps=[("127.0.0.1", int(url.rsplit(":", 1)[1]))], front=front)
    nginx = procs.start(nginx_conf.command(conf), log=workdir / "nginx.out")
    try:
        procs.wait_for_port(front[1], proc=nginx, timeout=10)
        yield f"http://127.0.0.1:{front[1]}"
    finally:
        procs.stop(nginx)


def need_browser() -> None:
    """Headless Chromium or, without one, a skip with the install command; a failure in
    CI (`make test` installs it), so a browser test never passes there by being skipped."""
    from benchmarks.sockets_tab import headless

    try:
        headless.find_browser()
    except headless.BrowserMissing as e:
        if os.environ.get("CI"):
            pytest.fail(f"CI needs the browser test's browser: {e}", pytrace=False)
        pytest.skip(str(e))


class EngineIOServer:
    """A gunicorn serving the app with both Engine.IO transports, and a user's token (or
    the asyncio server, whose token the app in this process mints: `redis_url`)."""

    def __init__(self, worker: str, url: str, proc: subprocess.Popen, log: Path,
                 redis_url: str | None = None):
        self.worker, self.url, self.proc, self.log = worker, url, proc, log
        self.polling = f"{url}/socket.io/?EIO=4&transport=polling"
        self.token = mint_token(redis_url, "test", "eio") if redis_url else self.user_token()

    def user_token(self) -> str:
        import requests

        email = f"eio-{os.getpid()}-{time.monotonic_ns()}@example.test"
        body = {"email": email, "password": PASSWORD, "username": "eio"}
        assert requests.post(self.url + "/auth/register", json=body, timeout=10).status_code == 201
        login = requests.post(self.url + "/auth/login", json=body, timeout=10)
        return login.json()["access_token"]

    def handshake(self, session) -> str:
        """A new polling session's sid."""
        import json

        response = session.get(self.polling, timeout=5)
        assert response.status_code == 200 and response.text.startswith("0"), response.text
        return json.loads(response.text[1:])["sid"]


@pytest.fixture(scope="module", params=["eventlet", "gevent", "gthread", "asyncio"])
def eio_server(request, redis_url, tmp_path_factory):
    """One gunicorn worker (so every request of a session reaches it), polling allowed,
    a 1-second deadline to connect to Socket.IO; or one worker of the asyncio server."""
    workdir = tmp_path_factory.mktemp(f"eio-{request.param}")
    env = {"FLASK_SOCKETIO_TRANSPORTS": "polling,websocket", "FLASK_SOCKETIO_AUTH_TIMEOUT": "1"}
    if request.param == "asyncio":
        with asgi_process(redis_url, workdir, env=env) as (url, proc):
            yield EngineIOServer("asyncio", url, proc, workdir / "granian.log", redis_url)
        return
    args = ["-k", request.param, "-w", "1", "--no-control-socket", "--graceful-timeout", "3",
            *(["--threads", "16"] if request.param == "gthread" else [])]
    with gunicorn_process(redis_url, workdir, args, env=env) as (url, proc):
        yield EngineIOServer(request.param, url, proc, workdir / "gunicorn.log")


class RealClient:
    """The calls of Flask-SocketIO's test client that the tests make (emit with a
    callback, get_received, is_connected, disconnect) over a real websocket to a running
    server, by python-socketio's client: the event tests run on the asyncio server so."""

    def __init__(self, url: str, auth=None, headers: dict | None = None,
                 query_string: str | None = None):
        import socketio

        self.received: list[dict] = []
        self.sio = socketio.Client(reconnection=False)
        self.sio.on("*", self.record)
        try:
            self.sio.connect(f"{url}?{query_string}" if query_string else url, auth=auth,
                             headers=headers or {}, transports=["websocket"], wait_timeout=5)
        except socketio.exceptions.ConnectionError as e:
            # refused by Socket.IO: is_connected() says so, as the test client's does; a
            # server that does not answer is an error
            if "namespaces failed to connect" not in str(e):
                raise

    def record(self, event, *args) -> None:
        self.received.append({"name": event, "args": list(args)})

    def is_connected(self) -> bool:
        return self.sio.connected

    def emit(self, event: str, *args, callback: bool = False):
        data = args[0] if len(args) == 1 else (args or None)
        if callback:
            return self.sio.call(event, data, timeout=5)
        return self.sio.emit(event, data)

    def get_received(self) -> list[dict]:
        events, self.received = self.received, []
        return events

    def disconnect(self) -> None:
        self.sio.disconnect()
