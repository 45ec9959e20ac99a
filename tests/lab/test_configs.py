"""The lab runs exactly the configs a user copies to real machines (issue 16, part 6).

gunicorn/*.conf.py, nginx/conf.d/*.conf and sysctl/NN-*.conf are the files the
README says to take home. Nothing here trusts the lab's own readers of them:

- gunicorn: the command each app host gets, as benchmarks/run/runner.py's Stack
  starts it (with the lab's GUNICORN_CMD_ARGS), names the stage's config file,
  and gunicorn's own loader reads the settings back from that file.
- granian (stage 9's HTTP server): its settings are its command line, and
  granian's own option parser reads them back from the command Stack starts.
- Nginx: the rendered main file includes the stage's conf.d file, and the
  rendered conf.d file is the one under nginx/conf.d/ with only its placeholders
  filled; `nginx -t` passes (Stack.start runs it).
- sysctl: what the lab writes on each host is what `sysctl --system` would apply
  from that host's sysctl/NN-*.conf files, read here with a parser of this file's
  own, in file-name order. (On a machine too slow to fill stage 4's port range,
  fitting.fit_port_range narrows it further during the run: lab 05.)

Nothing is started: Stack._start, which would start a server, only records.
"""

from __future__ import annotations

import json
import os
import re
import runpy
import subprocess
from pathlib import Path
from types import ModuleType

import gunicorn.config
import pytest

from benchmarks import stages, sysctl_profiles
from benchmarks.run import results, runner
from benchmarks.sandbox import nginx_conf, procs, sandbox

ROOT = stages.ROOT
PROXIED = [s for s in stages.STAGES if s.front]

# What each gunicorn file must hold: the stages' settings from before the files
# (`gunicorn -w 4 -k eventlet --keep-alive 10 ...`), timeouts at gunicorn's defaults.
SETTINGS = {
    "gunicorn/sync.conf.py": dict(worker_class="sync", workers=4, keepalive=2),
    "gunicorn/eventlet.conf.py": dict(worker_class="eventlet", workers=4, keepalive=10),
    "gunicorn/gevent.conf.py": dict(worker_class="gevent", workers=4, keepalive=10),
    # stage 3t: threads enough for the lab's 10 websockets and 50 HTTP users
    "gunicorn/gthread.conf.py": dict(worker_class="gthread", workers=4, threads=16,
                                     worker_connections=1000, keepalive=10),
    # stage 8: what the measurements picked (lab 13): a worker per CPU it may run on
    # (its affinity, capped by its cgroup's quota: test_cpu_quota.py runs it in one)
    # (and its worker_connections past the capacity study's ~10,000 websockets: stage 9's
    # Socket.IO server, lab 16)
    "gunicorn/today.conf.py": dict(worker_class="gevent",
                                   workers=runpy.run_path(str(ROOT / "gunicorn/today.conf.py"))[
                                       "_cpus"](), worker_connections=20000, keepalive=10,
                                   max_requests=0),
    "gunicorn/eventlet-one-worker.conf.py": dict(worker_class="eventlet", workers=1,
                                                 keepalive=10),
    # the failure twin 2b: stage 2's settings and an accept queue of 16
    "gunicorn/sync-backlog-16.conf.py": dict(worker_class="sync", workers=4, keepalive=2,
                                             backlog=16),
    # the failure twin 5k: stage 5's settings and a keep-alive shorter than Nginx's
    "gunicorn/eventlet-short-keepalive.conf.py": dict(worker_class="eventlet", workers=4,
                                                      keepalive=1),
    # the realtime set (lab 16): stage 9's Socket.IO server on one worker of each model,
    # no silent cap below the capacity study's ~10,000 websockets (threads: its top step)
    "gunicorn/eventlet-realtime.conf.py": dict(worker_class="eventlet", workers=1,
                                               worker_connections=20000, keepalive=10),
    "gunicorn/gthread-realtime.conf.py": dict(worker_class="gthread", workers=1, threads=10500,
                                              worker_connections=20000, keepalive=10),
    # stage 10: stage 9's server set to hold users (lab 16), its settings of the
    # environment as the file gives them where the environment does not
    "gunicorn/realtime.conf.py": dict(worker_class="gevent", workers=1, worker_connections=20000,
                                      keepalive=10, max_requests=0,
                                      raw_env=["FLASK_GC_FREEZE_EVERY=5",
                                               "GEVENT_TRACK_GREENLET_TREE=false",
                                               "FLASK_WEBSOCKET_READER=handler",
                                               "FLASK_ENGINEIO_PING=timer",
                                               "FLASK_ENGINEIO_WRITER=direct"]),
}
TIMEOUTS = dict(timeout=30, graceful_timeout=30)
# every file: no control socket at $HOME/.gunicorn/gunicorn.ctl, one path for every gunicorn
NO_CONTROL_SOCKET = dict(control_socket_disable=True)


class Box:
    """What Stack needs of a sandbox: every host on 127.0.0.1 with a free port of its
    own (so that `nginx -t` can bind the proxy's), the Socket.IO server's and the span
    sink's too (a stage that traces), no prefix, and no --metrics."""

    metrics = False

    def __init__(self, stage: stages.Stage):
        self.ports = {role: procs.free_port() for role in (*stage.roles, "socketio", "otlp")}

    def address(self, role: str) -> str:
        return "127.0.0.1"

    def port(self, role: str) -> int:
        return self.ports[role]

    def url(self, role: str) -> str:
        return f"http://127.0.0.1:{self.ports[role]}"

    def socketio_url(self, role: str) -> str:
        return f"http://127.0.0.1:{self.ports['socketio']}"

    def prefix(self, role: str) -> list[str]:
        return []


def started(stage: stages.Stage, stage_dir: Path, monkeypatch) -> tuple[Box, dict]:
    """Stack.start for `stage`, with nothing started: name -> (role, argv, env) of every
    server it would start."""
    calls = {}
    monkeypatch.setattr(runner.Stack, "_start", lambda self, name, role, cmd, env=None,
                        port=None, watcher=False, program=None:
                        calls.__setitem__(name, (role, cmd, env)))
    monkeypatch.setattr(runner.Stack, "wait_for_health", lambda self, url: None)
    box = Box(stage)
    runner.Stack(stage, box, stage_dir).start()
    return box, calls


# gunicorn's own loader, in the environment that runs the stage: eventlet's configs are
# read by gunicorn 25.3 (.venv-eventlet), the others by gunicorn 27
READ = """
import json, sys
import gunicorn.app.wsgiapp
argv, names = json.loads(sys.argv[1]), json.loads(sys.argv[2])
sys.argv = ["gunicorn", *argv]
cfg = gunicorn.app.wsgiapp.WSGIApplication("%(prog)s [OPTIONS] [APP_MODULE]").cfg
print(json.dumps({"version": gunicorn.__version__, "bind": cfg.bind,
                  "accesslog": cfg.accesslog, "no_control": cfg.control_socket_disable,
                  **{n: getattr(cfg, n) for n in names},
                  "worker_class": cfg.worker_class_str}))
"""


def gunicorn_reads(argv: list[str], env: dict, names, environment: str) -> dict:
    """gunicorn's resolved config for this command line and environment, loaded the way
    `gunicorn` loads it (file, then GUNICORN_CMD_ARGS, then the command line), from the
    repository root, where the lab starts it, by the gunicorn of `environment`. The app
    is not imported."""
    python = procs.environment_bin(environment) / "python"
    names = [n for n in names if n != "worker_class"]
    done = subprocess.run([str(python), "-c", READ, json.dumps(argv), json.dumps(names)],
                          cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env={**os.environ,
                               "GUNICORN_CMD_ARGS": env.get("GUNICORN_CMD_ARGS", "")})
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


# --- gunicorn --------------------------------------------------------------------


def gunicorn_servers(stage: stages.Stage, calls: dict, box: Box):
    """(name, argv, env, the port it binds, its access log, its environment) of each
    gunicorn Stack starts on each app host: its app server, or its Socket.IO server
    (stage 9 and its twins)."""
    for role in stage.app_roles:
        for name, port, log, server in (
                (role, box.port(role), results.app_access_log(role), "http"),
                (runner.socketio_name(role), box.port("socketio"),
                 results.socketio_access_log(role), "socketio")):
            if name in calls and Path(calls[name][1][0]).name == "gunicorn":
                yield (name, calls[name][1], calls[name][2], port, log,
                       stage.server_environment(server))


@pytest.mark.parametrize("stage", stages.STAGES, ids=lambda s: s.key)
def test_the_app_server_runs_the_stages_gunicorn_file(stage, tmp_path, monkeypatch):
    box, calls = started(stage, tmp_path, monkeypatch)
    for role in stage.app_roles:
        _, cmd, env = calls[role]
        if stage.server[0] == "flask":
            assert Path(cmd[0]).name == "flask" and stage.gunicorn_config is None
        elif stage.server[0] == "granian":  # its settings: test_granian_reads_...
            assert Path(cmd[0]).name == "granian", cmd
            assert Path(cmd[0]).parent == procs.environment_bin(stage.environment), cmd
            # granian times nothing: the app writes the timed access log itself
            assert env["FLASK_ACCESS_LOG"] == str(tmp_path / results.app_access_log(role))
    served = list(gunicorn_servers(stage, calls, box))
    assert len(served) == (0 if stage.gunicorn_config is None else len(stage.app_roles))
    for name, cmd, env, port, log, environment in served:
        assert [cmd[i + 1] for i, a in enumerate(cmd) if a in ("-c", "--config")] == [
            stage.gunicorn_config], f"stage {stage.key}: {cmd}"
        assert (ROOT / stage.gunicorn_config).is_file()
        # the gunicorn of the server's environment (its venv's), which reads the file: 9e's
        # Socket.IO server from eventlet's, beside its granian from the current one
        assert Path(cmd[0]).parent == procs.environment_bin(environment), cmd
        assert Path(env["PATH"].split(os.pathsep)[0]) == procs.environment_bin(environment)
        wanted = {**SETTINGS[stage.gunicorn_config], **TIMEOUTS}
        cfg = gunicorn_reads(cmd[1:], env, wanted, environment)
        assert {name: cfg[name] for name in wanted} == wanted, f"stage {stage.key}: {name}"
        assert cfg["version"] == {stages.EVENTLET: "25.3.0"}.get(environment, "27.0.1")
        assert environment == stages.worker_environment(cfg["worker_class"])
        assert cfg["bind"] == [f"127.0.0.1:{port}"]  # the host's, from -b
        # the lab's own addition, GUNICORN_CMD_ARGS, is read too: each server its own log
        assert cfg["accesslog"] == str(tmp_path / log)
        assert cfg["no_control"] is True  # no ~/.gunicorn/gunicorn.ctl shared by every gunicorn


# --- granian ---------------------------------------------------------------------

# Stage 9's HTTP server: what the measurements picked (granian/README.md), as granian's
# parameters (the names its options bind to)
GRANIAN = dict(interface="wsgi", workers=1, blocking_threads=1, websockets=False,
               respawn_failed_workers=True)  # a killed worker comes back (test_crash.py)
# granian's own option parser (click's), reading a command line as `granian` would, with
# the environment's GRANIAN_* too; nothing is started
GRANIAN_READS = """
import json, sys
import granian, granian.cli
context = granian.cli.cli.make_context("granian", json.loads(sys.argv[1]))
print(json.dumps({"version": granian.__version__, **{k: v for k, v in context.params.items()
                  if isinstance(v, (str, int, float, bool, type(None)))}}))
"""


def granian_reads(argv: list[str], environment: str) -> dict:
    python = procs.environment_bin(environment) / "python"
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRANIAN_")}
    done = subprocess.run([str(python), "-c", GRANIAN_READS, json.dumps(argv)], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


@pytest.mark.parametrize("stage", [s for s in stages.STAGES if s.server[0] == "granian"],
                         ids=lambda s: s.key)
def test_granian_reads_the_stages_settings_from_the_command_the_lab_starts(
        stage, tmp_path, monkeypatch):
    box, calls = started(stage, tmp_path, monkeypatch)
    for role in stage.app_roles:
        _, cmd, _ = calls[role]
        cfg = granian_reads(cmd[1:], stage.environment)
        assert {name: cfg[name] for name in GRANIAN} == GRANIAN, cfg
        assert (cfg["host"], cfg["port"], cfg["app"]) == ("127.0.0.1", box.port(role),
                                                          "app.wsgi:app")
        assert cfg["version"] == "2.8.7"
        # every option the command gives is explained where the docs send a reader
        explained = (ROOT / "granian" / "README.md").read_text()
        for option in (a for a in cmd[1:] if a.startswith("--")):
            assert f"`{option}" in explained, option


# Stage 9a's Socket.IO server: python-socketio's AsyncServer (app/asgi.py) on granian's
# ASGI interface, one worker; websockets on (granian's default, which stage 9's WSGI server
# turns off), a killed worker replaced, a stopping one killed after 3 s
GRANIAN_ASGI = dict(interface="asgi", workers=1, websockets=True, respawn_failed_workers=True,
                    workers_kill_timeout=3)


@pytest.mark.parametrize("stage", [s for s in stages.STAGES if s.socketio_server
                                   and s.socketio_server[0] == "granian"], ids=lambda s: s.key)
def test_granian_reads_the_asyncio_socketio_servers_settings(stage, tmp_path, monkeypatch):
    box, calls = started(stage, tmp_path, monkeypatch)
    for role in stage.app_roles:
        _, cmd, _ = calls[runner.socketio_name(role)]
        assert Path(cmd[0]).parent == procs.environment_bin(stage.server_environment("socketio"))
        cfg = granian_reads(cmd[1:], stage.server_environment("socketio"))
        assert {name: cfg[name] for name in GRANIAN_ASGI} == GRANIAN_ASGI, cfg
        assert (cfg["host"], cfg["port"], cfg["app"]) == ("127.0.0.1", box.port("socketio"),
                                                          "app.asgi:app")
        explained = (ROOT / "granian" / "README.md").read_text()
        for option in (a for a in cmd[1:] if a.startswith("--")):
            assert f"`{option}" in explained, option


@pytest.mark.parametrize("path", sorted(SETTINGS))
def test_gunicorn_files_set_only_real_settings_and_say_how_to_run(path):
    """gunicorn skips a name it does not know (`keep_alive = 10` would be lost without a
    word), so every name a file sets must be a setting; and the file's values are the
    ones gunicorn reads in the test above."""
    text = (ROOT / path).read_text()
    # a name with a leading underscore is the file's own helper (today.conf.py's _cpus)
    names = {k: v for k, v in runpy.run_path(str(ROOT / path)).items()
             if not k.startswith("_") and not isinstance(v, ModuleType)}
    known = gunicorn.config.Config().settings
    assert sorted(set(names) - set(known)) == [], f"{path}: not gunicorn settings"
    values = {k: v for k, v in names.items() if not callable(v)}  # hooks are settings too
    assert values == {**SETTINGS[path], **TIMEOUTS, **NO_CONTROL_SOCKET}
    assert f"gunicorn -c {path} -b HOST:PORT app.wsgi:app" in text
    assignments = [n for n, line in enumerate(text.splitlines()) if re.match(r"\w+ = ", line)]
    lines = text.splitlines()
    uncommented = [lines[n] for n in assignments if not lines[n - 1].startswith("#")]
    assert not uncommented, f"{path}: every setting has its reason above it"


def test_stage_10t_turns_the_greenlet_tree_back_on_through_the_environment(tmp_path,
                                                                          monkeypatch):
    """gunicorn/realtime.conf.py's raw_env takes a value the environment gives: 10t's."""
    ten_t = stages.get("10t")
    box, calls = started(ten_t, tmp_path, monkeypatch)
    [(_, cmd, env, *_)] = gunicorn_servers(ten_t, calls, box)
    monkeypatch.setenv("GEVENT_TRACK_GREENLET_TREE", env["GEVENT_TRACK_GREENLET_TREE"])
    cfg = gunicorn_reads(cmd[1:], env, ["raw_env"], stages.CURRENT)
    assert cfg["raw_env"] == ["FLASK_GC_FREEZE_EVERY=5", "GEVENT_TRACK_GREENLET_TREE=true",
                              "FLASK_WEBSOCKET_READER=handler", "FLASK_ENGINEIO_PING=timer",
                              "FLASK_ENGINEIO_WRITER=direct"]


def test_stage_10l_brings_the_libraries_greenlets_back_through_the_environment(tmp_path,
                                                                              monkeypatch):
    ten_l = stages.get("10l")
    box, calls = started(ten_l, tmp_path, monkeypatch)
    [(_, cmd, env, *_)] = gunicorn_servers(ten_l, calls, box)
    for name in stages.LIBRARY_GREENLETS:
        monkeypatch.setenv(name, env[name])
    cfg = gunicorn_reads(cmd[1:], env, ["raw_env"], stages.CURRENT)
    assert cfg["raw_env"] == ["FLASK_GC_FREEZE_EVERY=5", "GEVENT_TRACK_GREENLET_TREE=false",
                              "FLASK_WEBSOCKET_READER=thread", "FLASK_ENGINEIO_PING=task",
                              "FLASK_ENGINEIO_WRITER=task"]


def test_every_gunicorn_file_is_a_stages():
    used = {s.gunicorn_config for s in stages.STAGES} - {None}
    # not __pycache__: gunicorn writes one there when it loads a config (a lab run on a
    # box without PYTHONDONTWRITEBYTECODE, as in the image)
    files = {str(p.relative_to(ROOT)) for p in (ROOT / "gunicorn").iterdir()
             if p.name != "__pycache__"}
    assert files == used == set(SETTINGS)


# --- Nginx -----------------------------------------------------------------------


def filled(template: str, rendered: str) -> dict[str, set[str]]:
    """The values the placeholders of `template` (`@NAME@`) took in `rendered`;
    AssertionError when anything else differs."""
    parts = re.split(r"@([A-Z_]+)@", template)
    names = parts[1::2]
    pattern = "".join(re.escape(p) if i % 2 == 0 else "(.*?)" for i, p in enumerate(parts))
    match = re.fullmatch(pattern, rendered, re.S)
    assert match, "the rendered file differs from its template beyond the placeholders"
    values: dict[str, set[str]] = {}
    for name, value in zip(names, match.groups(), strict=True):
        values.setdefault(name, set()).add(value)
    return values


@pytest.mark.parametrize("stage", PROXIED, ids=lambda s: s.key)
def test_nginx_runs_the_main_file_which_includes_the_stages_conf_d_file(
        stage, tmp_path, monkeypatch):
    box, calls = started(stage, tmp_path, monkeypatch)
    rendered = tmp_path / results.NGINX_DIR
    main, included = rendered / nginx_conf.MAIN, rendered / stage.front
    _, cmd, _ = calls["nginx"]
    assert cmd[cmd.index("-c") + 1] == str(main)
    assert stage.front.startswith("conf.d/") and (ROOT / "nginx" / stage.front).is_file()

    main_text = main.read_text()
    assert re.findall(r"^\s*include\s+(\S+);", main_text, re.M) == [str(included)]
    assert filled((ROOT / "nginx" / nginx_conf.MAIN).read_text(), main_text) == {
        "RUN_DIR": {str(rendered)}, "FRONT_CONF": {str(included)},
        "WORKER_PROCESSES": {stage.nginx.workers},
        "WORKER_RLIMIT_NOFILE": {str(stage.nginx.nofile)},
        "WORKER_CONNECTIONS": {str(stage.worker_connections)}}

    values = filled((ROOT / "nginx" / stage.front).read_text(), included.read_text())
    servers = values.pop("APP_SERVERS")
    socketio = values.pop("SOCKETIO_SERVERS", None)  # a Socket.IO upstream of its own
    assert values == {"FRONT_HOST": {"127.0.0.1"}, "FRONT_PORT": {str(box.port("proxy"))}}
    (lines,) = servers
    wanted = ([f"{stage.balance};"] if stage.balance else []) + [
        f"server 127.0.0.1:{box.port(role)};" for role in stage.app_roles]
    assert [ln.strip() for ln in lines.splitlines()] == wanted
    assert (socketio is not None) == bool(stage.socketio_server)
    if socketio:
        (lines,) = socketio
        assert [ln.strip() for ln in lines.splitlines()] == [
            f"server 127.0.0.1:{box.port('socketio')};" for _ in stage.app_roles]
    checked = nginx_conf.check(main)
    assert checked.returncode == 0, checked.stderr


def test_every_conf_d_file_is_a_stages():
    files = {f"conf.d/{p.name}" for p in (ROOT / "nginx" / "conf.d").iterdir()}
    assert files == {s.front for s in PROXIED}


def upstream_keepalive_timeout(front: str, upstream: str = "app") -> int:
    """Seconds Nginx keeps an idle upstream connection: `keepalive_timeout` inside the
    conf.d file's `upstream` block (Nginx's default, 60 s, where it says none)."""
    block = re.search(rf"upstream {upstream} \{{(.*?)\n\}}",
                      (ROOT / "nginx" / front).read_text(), re.S)
    found = re.search(r"^\s*keepalive_timeout (\d+)s;", block[1], re.M)
    return int(found[1]) if found else 60


@pytest.mark.parametrize("stage", [s for s in PROXIED if "keepalive" in s.front],
                         ids=lambda s: s.key)
def test_the_app_keeps_idle_connections_longer_than_nginx_but_in_the_race_twin(stage):
    """The keep-alive race (5k, lab 11) is the one stage where the app closes an idle
    connection before Nginx stops reusing it; everywhere else Nginx closes first."""
    app = runpy.run_path(str(ROOT / stage.gunicorn_config))["keepalive"]
    nginx = upstream_keepalive_timeout(stage.front)
    assert (app < nginx) == (stage.key == "5k"), f"stage {stage.key}: app {app} s, Nginx {nginx} s"


@pytest.mark.parametrize("stage", [s for s in PROXIED if s.socketio_server],
                         ids=lambda s: s.key)
def test_both_servers_keep_idle_connections_longer_than_nginx(stage, tmp_path, monkeypatch):
    """Stage 9: granian closes a connection that waited for its next request longer than
    its --http1-header-read-timeout (granian's own parser reads it: 30,000 ms), gunicorn
    after its keepalive; Nginx drops each upstream's idle connections before either (9a:
    both are granian)."""
    _, calls = started(stage, tmp_path, monkeypatch)
    granian_ms = granian_reads(calls["app"][1][1:], stage.environment)[
        "http1_header_read_timeout"]
    socketio = calls[runner.socketio_name("app")][1]
    socketio_s = (runpy.run_path(str(ROOT / stage.gunicorn_config))["keepalive"]
                  if Path(socketio[0]).name == "gunicorn" else
                  granian_reads(socketio[1:], stage.environment)["http1_header_read_timeout"]
                  / 1000)
    assert upstream_keepalive_timeout(stage.front, "app") < granian_ms / 1000
    assert upstream_keepalive_timeout(stage.front, "socketio") < socketio_s


# --- sysctl ----------------------------------------------------------------------


def read_sysctl_d(path: Path) -> dict[str, str]:
    """`key = value` lines as sysctl(8) reads a sysctl.d file (`#`, `;` comments)."""
    found = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and line[0] not in "#;":
            key, value = line.split("=", 1)
            found[key.strip()] = " ".join(value.split())
    return found


def host_files(stage: stages.Stage, role: str) -> list[Path]:
    """The sysctl/NN-*.conf files of a host, in the order the lab applies its profiles:
    the baseline, then the client's on a load host, the stage's on a connecting host."""
    names = (stages.CLIENT_SYSCTL if role in stages.CLIENT_ROLES
             else ("baseline", *stage.sysctl) if role in stage.connecting_roles
             else ("baseline",))
    return [next((ROOT / "sysctl").glob(f"[0-9][0-9]-{name}.conf")) for name in names]


@pytest.mark.parametrize("stage", stages.STAGES, ids=lambda s: s.key)
def test_each_host_gets_exactly_its_sysctl_d_files(stage):
    box = sandbox.Sandbox(stage, "netns", client_hosts=len(stages.CLIENT_ROLES))
    written = box.network.sysctls  # what hosts.Network writes inside each namespace
    assert set(written) == set(box.roles)
    for role, values in written.items():
        files = host_files(stage, role)
        # /etc/sysctl.d applies files in name order: the numbers keep the lab's order
        assert [f.name for f in files] == sorted(f.name for f in files), (stage.key, role)
        merged: dict[str, str] = {}
        for path in sorted(files):
            merged.update(read_sysctl_d(path))
        assert values == merged, (stage.key, role, [f.name for f in files])


def test_sysctl_d_files_are_named_and_say_how_to_install():
    profiles = {n for s in stages.STAGES for n in s.sysctl} | {"baseline",
                                                                *stages.CLIENT_SYSCTL}
    files = sorted(p.name for p in (ROOT / "sysctl").glob("*.conf") if p.name != "limits.conf")
    assert {re.fullmatch(r"\d\d-([a-z-]+)\.conf", f)[1] for f in files} == profiles, files
    for name in files:
        text = (ROOT / "sysctl" / name).read_text()
        assert f"sudo cp sysctl/{name} /etc/sysctl.d/ && sudo sysctl --system" in text
        assert "--apply-host-sysctls" in text  # the only way the lab touches the machine's


def test_stage_4s_narrowed_range_fills_whatever_rate_its_warm_up_saw():
    """fitting.ports_to_fill: the range stage 4 runs with. With no rate from a warm-up
    (--warmup 0, or one that answered nothing), the narrowest the lab makes."""
    from benchmarks.run import fitting
    starts = fitting.starting_requests(50)
    assert starts == 150 > fitting.MIN_PORTS
    for no_rate in (None, 0.0):
        assert fitting.ports_to_fill(no_rate, 3, 50) == fitting.MIN_PORTS
    assert fitting.ports_to_fill(165, 3, 50) == fitting.MIN_PORTS  # fills in 3/8 s at 165/s
    assert fitting.ports_to_fill(2000, 3, 50) == starts  # 750 by the rate, no more than starts
    assert fitting.ports_to_fill(2000, 3, 10) == 750  # too few starts to bound it


def test_the_lab_reads_a_profile_from_its_numbered_file(tmp_path, monkeypatch):
    assert stages.sysctl_file("tuned") == ROOT / "sysctl" / "70-tuned.conf"
    (tmp_path / "sysctl").mkdir()
    monkeypatch.setattr(sysctl_profiles, "ROOT", tmp_path)
    with pytest.raises(FileNotFoundError, match="sysctl/NN-tuned.conf, found none"):
        stages.sysctl_profile("tuned")
    for name in ("70-tuned.conf", "75-tuned.conf"):
        (tmp_path / "sysctl" / name).write_text("net.ipv4.tcp_tw_reuse = 1\n")
    with pytest.raises(FileNotFoundError, match="found"):
        stages.sysctl_profile("tuned")


def test_gunicorn_check_config_accepts_a_stage_command():
    """The real `gunicorn --check-config` on stage 5g's command (gevent: no deprecation
    noise), from the repository root; it imports the app, which needs a secret key but
    no Redis to load (nothing listens on port 1)."""
    cmd = stages.get("5g").server_command("127.0.0.1", procs.free_port())
    env = procs.child_env(FLASK_SECRET_KEY="check-config",
                          FLASK_REDIS_URL="redis://127.0.0.1:1/0")
    done = subprocess.run([procs.tool("gunicorn"), "--check-config", *cmd[1:]], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
