"""The stage's servers on their hosts: Redis, the app server (stage 9: two, granian for
HTTP and gunicorn for Socket.IO), Nginx; started in order, each waited for, stopped in
reverse. The lab runner (benchmarks/run/runner.py) and `lab up` use it.
"""

from __future__ import annotations

import secrets
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.analysis import access_logs
from benchmarks.run import prometheus, results, spans
from benchmarks.run.cli import StageFailed, say
from benchmarks.sandbox import nginx_conf, procs, python_root, sandbox
from benchmarks.stages import ROOT, Stage


class Stack:
    """The stage's servers (Redis, the app, Nginx), each on its host, started in order,
    stopped in reverse."""

    def __init__(self, stage: Stage, box: sandbox.Sandbox, stage_dir: Path,
                 python_root: Path | None = None):
        self.stage, self.box, self.dir = stage, box, stage_dir
        self.python_root = python_root  # its real-time server's, if not its venv's
        self.procs: dict[str, subprocess.Popen] = {}
        self.roles: dict[str, str] = {}  # process name -> its host's role
        self.programs: dict[str, str] = {}  # process name -> its program (granian, nginx)
        self.secret = secrets.token_hex(16)
        # --metrics: Prometheus and its exporters, watchers of the stage, not its servers:
        # neither among the processes the sampler and the profile take as the stage's
        self.watchers: dict[str, subprocess.Popen] = {}
        self.prometheus = prometheus.Prometheus(self) if getattr(box, "metrics", False) else None
        self.spans: dict | None = None  # a stage that traces: what its sink received, as it stops
        self.servers_up_s: float | None = None  # start: its app servers' start, to /healthz 200

    @property
    def url(self) -> str:
        return self.box.entry_url

    def app_env(self, role: str = "app", server: str = "http") -> dict:
        """The environment of app host `role`'s `server` (Stage.commands: `http`, or
        `socketio`, the Socket.IO server of a stage that has one)."""
        # The lab measures connection handling, not the password hash: seeded users get
        # a cheap one, so their logins at the start of a run don't fill the latency tail
        # (the app's default, scrypt, costs tens of ms of CPU per login).
        # gunicorn reads GUNICORN_CMD_ARGS besides its command line, so the stage's command
        # stays the one the docs show: an access log in the shape access_logs.REQUEST_LINE reads
        # (the lab's independent count of answered requests).
        # The request time closes each line (%(L)s, seconds): the server's own latency.
        # `flask run` and granian log no times, so under them the app writes the same lines
        # itself. A Socket.IO server of its own has its own log.
        # And no control socket (gunicorn 25+): every gunicorn would make the same
        # ~/.gunicorn/gunicorn.ctl, the lab's servers and the tests' at once.
        log_name = (results.socketio_access_log(role) if server == "socketio"
                    else results.app_access_log(role))
        log_path = str(self.dir / log_name)
        access_log = shlex.join([*access_logs.gunicorn_args(log_path), "--no-control-socket"])
        command = self.stage.commands()[server]
        timed = {} if command[0] == "gunicorn" else {"FLASK_ACCESS_LOG": log_path}
        redis = f"redis://{self.box.address('redis')}:{self.box.port('redis')}/0"
        watched = self.prometheus.app_env(role, server) if self.prometheus else {}
        watched |= spans.app_env(self.box) if self.stage.traced else {}
        return procs.child_env(procs.environment_bin(self.stage.server_environment(server)),
                               FLASK_REDIS_URL=redis, **timed, FLASK_SECRET_KEY=self.secret,
                               FLASK_REDIS_MODE=self.stage.redis_mode,
                               FLASK_PASSWORD_HASH_METHOD="pbkdf2:sha256:1000",
                               GUNICORN_CMD_ARGS=access_log, **self.stage.env, **watched)

    def _start(self, name: str, role: str, cmd: list[str], env: dict | None = None,
               port: int | None = None, watcher: bool = False,
               program: str | None = None) -> None:
        """Start `cmd` on `role`'s host as process `name` (its log `name`.log), and wait
        until its port (the host's own, or `port`) answers. A `watcher` (--metrics) is
        kept apart from the stage's servers. `program`: what to call it, where `cmd`
        starts with a wrapper (python_root's)."""
        proc = procs.start([*self.box.prefix(role), *cmd], log=self.dir / f"{name}.log",
                           env=env or procs.child_env(), cwd=ROOT)
        if watcher:
            self.watchers[name] = proc
        else:
            self.procs[name], self.roles[name] = proc, role
        self.programs[name] = Path(program or cmd[0]).name
        try:
            procs.wait_for_port(port or self.box.port(role), host=self.box.address(role),
                                proc=proc, timeout=30, netns=self.box.namespace(role))
        except procs.ServiceError as e:
            log = (self.dir / f"{name}.log").read_text(errors="replace")[-2000:]
            raise StageFailed(f"{name} did not start: {e}\n--- {name}.log (end) ---\n{log}") from e

    def start(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        redis_dir = self.dir / "redis"
        redis_dir.mkdir(exist_ok=True)
        self._start("redis", "redis", procs.redis_command(
            self.box.port("redis"), redis_dir, host=self.box.address("redis")))
        if self.stage.traced:  # its span sink, before the servers that export to it
            spans.start(self)
        apps = self.stage.app_roles
        begun = time.monotonic()
        for role in apps:  # `app`, and `app2` in a stage that scales out: logs app2.log
            servers = self.stage.commands(self.box.address(role), self.box.port(role),
                                          self.box.port("socketio"))
            for server, cmd in servers.items():  # and app_socketio (.log) beside its app
                self._start(socketio_name(role) if server == "socketio" else role, role,
                            self._server_argv(server, cmd), self.app_env(role, server),
                            self.box.port("socketio") if server == "socketio" else None,
                            program=cmd[0])
        for role in apps:
            self.wait_for_health(f"{self.box.url(role)}/healthz")
            if self.stage.socketio_server:
                self.wait_for_health(f"{self.box.socketio_url(role)}/healthz")
        self.servers_up_s = time.monotonic() - begun  # this box's start-up (crash.limit_for)
        if self.stage.front:
            socketio = [(self.box.address(r), self.box.port("socketio")) for r in apps
                        if self.stage.socketio_server]
            conf = nginx_conf.render(self.stage.front, self.dir / results.NGINX_DIR,
                                     apps=[(self.box.address(r), self.box.port(r)) for r in apps],
                                     socketio=socketio,
                                     front=(self.box.address("proxy"), self.box.port("proxy")),
                                     balance=self.stage.balance,
                                     size=self.stage.nginx)
            checked = nginx_conf.check(conf, self.box.prefix("proxy"))
            if checked.returncode != 0:
                raise StageFailed(f"nginx -t rejected {conf}:\n{checked.stderr}")
            self._start("nginx", "proxy", nginx_conf.command(conf))
        if self.prometheus:
            self.prometheus.start()

    def _server_argv(self, server: str, cmd: list[str]) -> list[str]:
        """A server's command as started: its program from its environment's venv, or, with
        a Python root, the real-time server's (the one that serves Socket.IO) chrooted in
        that root with the stage's folder (its logs) bound in."""
        realtime = "socketio" if self.stage.socketio_server else "http"
        if self.python_root and server == realtime:
            return python_root.command(self.python_root, cmd, [self.dir])
        exe = procs.tool(cmd[0], procs.environment_bin(self.stage.server_environment(server)))
        return [exe, *cmd[1:]]

    # How long a server may take to answer /healthz: QUIET_S while its processes sit idle
    # (a server that will not come up, an app answering 503), and while they keep working
    # (its workers importing the app: seconds each on an emulated VM, 4 workers on stage
    # 2) up to BOOTING_S, each PROBE_S slice extending the wait by what it saw.
    QUIET_S, BOOTING_S, PROBE_S, BUSY_CPU_S = 30.0, 300.0, 5.0, 0.5

    def wait_for_health(self, url: str) -> None:
        """Until the app answers /healthz 200 to the client host: the port opens before
        the workers boot. Probes of PROBE_S; the wait ends QUIET_S after the servers
        last used BUSY_CPU_S of CPU in a slice, at BOOTING_S in all, or when one exits."""
        probe = ("import sys, time, urllib.request\n"
                 f"end = time.monotonic() + {self.PROBE_S}\n"
                 "while time.monotonic() < end:\n"
                 "    try:\n"
                 "        if urllib.request.urlopen(sys.argv[1], timeout=2).status == 200:\n"
                 "            sys.exit(0)\n"
                 "    except OSError:\n"
                 "        time.sleep(0.2)\n"
                 "sys.exit(1)\n")
        waited = quiet = 0.0
        cpu = self._servers_cpu()
        while waited < self.BOOTING_S and quiet < self.QUIET_S:
            # A session of its own: a terminal's Ctrl-C reaches the lab, which stops it,
            # not the probe (which would print its own KeyboardInterrupt traceback).
            if subprocess.run([*self.box.prefix("client"), sys.executable, "-c", probe, url],
                              timeout=self.PROBE_S + 10, start_new_session=True).returncode == 0:
                return
            if gone := self.down():
                raise StageFailed(gone)
            waited, before, cpu = waited + self.PROBE_S, cpu, self._servers_cpu()
            quiet = 0.0 if cpu - before >= self.BUSY_CPU_S else quiet + self.PROBE_S
        raise StageFailed(f"{url} did not answer 200 within {waited:.0f}s (its servers "
                          f"{'idle' if quiet else 'still busy'}); see {self.dir / 'app.log'}")

    def _servers_cpu(self) -> float:
        """CPU seconds the stage's server processes and their children have used."""
        import psutil

        total = 0.0
        for proc in self.procs.values():
            try:
                tree = psutil.Process(proc.pid)
                for p in (tree, *tree.children(recursive=True)):
                    times = p.cpu_times()
                    total += times.user + times.system
            except psutil.Error:  # a process that just exited: down() says so
                continue
        return total

    def down(self) -> str | None:
        """What says the stage is down: the first of its servers that has exited (a
        master, say granian's after its worker died, or gunicorn's), or None while every
        one runs. The lab started each as the process it watches (`ip netns exec` and
        `taskset` become the program)."""
        for name, proc in {**self.procs, **self.watchers}.items():
            code = proc.poll()
            if code is not None:
                how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"code {code}"
                return (f"{self.programs[name]} (stage {self.stage.key}'s {self._part(name)}) "
                        f"exited ({how}): the stage is down; see {self.dir / f'{name}.log'}")
        return None

    def _part(self, name: str) -> str:
        """What process `name` is to its stage: its Redis, app server, Socket.IO server,
        front."""
        host = f" on {self.roles[name]}" if len(self.stage.app_roles) > 1 else ""
        if name in self.stage.app_roles:
            return f"app server{host}"
        if name in map(socketio_name, self.stage.app_roles):
            return f"Socket.IO server{host}"
        return {"redis": "Redis", "nginx": "front (Nginx)", "prometheus": "Prometheus",
                "nginx_exporter": "Nginx's exporter",
                "redis_exporter": "Redis's exporter",
                spans.NAME: "span sink"}.get(name, name)

    def watching(self, say):
        """Around a measured window: with --metrics, what Prometheus saw of it, kept in
        the stage's folder (prometheus.window); nothing without."""
        return prometheus.window(self, say)

    def pids(self) -> dict[str, int]:
        return {name: p.pid for name, p in self.procs.items()}

    def stop(self) -> None:
        # gunicorn's TERM is a graceful stop, which waits out the eventlet worker's 1 s
        # ticks (3 s here); after the load nothing is in flight, so QUIT, its quick
        # shutdown (1 s). Flask's server and granian take TERM.
        # QUIT goes to gunicorn's master only, which hands it to its workers: a second QUIT
        # (the group's) arriving inside a gthread worker's first one's handler deadlocks in
        # ThreadPoolExecutor.shutdown (CPython issue 121649) until the KILL 10 s later.
        # The watchers first (--metrics): a server gone before its watcher would be a
        # scrape failure in Prometheus's last seconds. The span sink last: the servers
        # export what they queue as they exit, and then it counts (spans.record).
        with sandbox.uninterrupted():
            sink = self.watchers.pop(spans.NAME, None)
            procs.stop_all([(self.watchers.pop(name), signal.SIGTERM, False)
                            for name in reversed(list(self.watchers))])
            procs.stop_all([(self.procs.pop(name), *self._stop_signal(name))
                            for name in reversed(list(self.procs))])
            if sink is not None:
                if sink.poll() is None:
                    self.spans = spans.record(self)
                    spans.say_recorded(self.spans, self.dir, say)
                procs.stop_all([(sink, signal.SIGTERM, False)])
            if self.prometheus:
                self.prometheus.close()

    def _stop_signal(self, name: str) -> tuple[int, bool]:
        """(signal, to the group's leader only): QUIT to a gunicorn app server's master,
        TERM to the group of anything else."""
        commands = self.stage.commands()
        server = ("socketio" if name in map(socketio_name, self.stage.app_roles)
                  else "http" if name in self.stage.app_roles else None)
        gunicorn = server is not None and commands[server][0] == "gunicorn"
        return (signal.SIGQUIT, True) if gunicorn else (signal.SIGTERM, False)


def socketio_name(role: str) -> str:
    """The process name (and log, sampler component) of app host `role`'s Socket.IO
    server, in a stage that has one: `app_socketio`, counted in the app's CPU."""
    return f"{role}_socketio"
