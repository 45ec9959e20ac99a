"""What run.json records about where a run's numbers were taken: the packages' and
servers' versions, the commit, the kernel, the cores, Python, and what else ran on the
lab's CPUs before it started (the pre-flight)."""

from __future__ import annotations

import functools
import json
import os
import platform
import shutil
import subprocess
from datetime import datetime
from importlib import metadata
from pathlib import Path

from benchmarks import stages
from benchmarks.capture import cpu_sets
from benchmarks.sandbox import hosts, nginx_conf, procs
from benchmarks.servers import worker_class
from benchmarks.stages import ROOT, Stage


def versions() -> dict:
    pkgs = {}
    for name in ("flask", "werkzeug", "redis", "gunicorn", "eventlet", "gevent", "granian",
                 "flask-socketio", "python-socketio", "locust", "psutil"):
        try:
            pkgs[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pkgs[name] = None
    try:
        redis_v = subprocess.run([procs.require_binary("redis-server", procs.REDIS_HINT),
                                  "--version"], capture_output=True, text=True).stdout.split()
        redis_v = next((w.split("=", 1)[1] for w in redis_v if w.startswith("v=")), None)
    except procs.ServiceError:
        redis_v = None
    return {"packages": pkgs, "redis-server": redis_v, "nginx": nginx_conf.version(),
            "chromium": chromium_version(), "system": system_name()}


def chromium_version() -> str | None:
    """The screenshots' browser, as it names itself ("Chromium 156.0.8078.73 built on
    Debian ..."), or None where there is none."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if not found:
        return None
    try:
        out = subprocess.run([found, "--version"], capture_output=True, text=True,
                             timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out or None


def system_name() -> str | None:
    """The distribution, as /etc/os-release names it ("Debian GNU/Linux 13 (trixie)")."""
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            key, _, value = line.partition("=")
            if key == "PRETTY_NAME":
                return value.strip().strip('"')
    except OSError:
        pass
    return None


# asked of a server environment's own Python: what it would run, and every package in it
_ASK = ("import json, platform\nfrom importlib import metadata\nfound = {}\n"
        "for name in ('gunicorn', 'eventlet', 'gevent', 'granian', 'flask-socketio',\n"
        "             'werkzeug'):\n"
        "    try:\n        found[name] = metadata.version(name)\n"
        "    except metadata.PackageNotFoundError:\n        found[name] = None\n"
        "every = {d.metadata['Name']: d.version for d in metadata.distributions()}\n"
        "print(json.dumps({'python': platform.python_version(), **found,\n"
        "                  'installed': dict(sorted(every.items(), key=lambda i: i[0].lower()))}))")
WORKER_LIBRARY = {"eventlet": "eventlet", "gevent": "gevent"}  # gunicorn worker -> library


@functools.cache
def environment_versions(name: str) -> dict:
    """Server environment `name`'s Python and package versions, from its own Python."""
    python = procs.environment_bin(name) / "python"
    out = subprocess.run([str(python), "-c", _ASK], capture_output=True, text=True, timeout=60)
    return json.loads(out.stdout) if out.returncode == 0 else {"error": out.stderr[-300:]}


def environments(used: set[str]) -> dict:
    """run.json `environments`: every installed package (name: version) and the Python of
    the current environment (Locust, the lab) and of each server environment in `used`."""
    found = {}
    for name in sorted({stages.CURRENT, *used}):
        asked = environment_versions(name)
        found[name] = {"venv": stages.ENVIRONMENTS[name].venv, "python": asked.get("python"),
                       "packages": asked.get("installed")}
        if "error" in asked:  # a venv that would not answer: say why, record the rest
            found[name]["error"] = asked["error"]
    return found


def servers(stage: Stage) -> dict:
    """run.json's record of what served a stage, per app host: the environment, its
    Python, the server (gunicorn's, granian's or Werkzeug's version), the worker class and
    the library under it (eventlet, gevent; none for sync, gthread and granian); in a
    stage with a Socket.IO server of its own (stage 9 and its twins), that one's as
    `socketio`, from its own environment (9e's from eventlet's)."""
    record = server_record(stage, "http")
    if stage.socketio_server:
        record["socketio"] = server_record(stage, "socketio")
    return {role: record for role in stage.app_roles}


def server_record(stage: Stage, server: str) -> dict:
    """What one of the stage's servers (`http`, `socketio`) runs: `environment`, `python`,
    `server`, `worker_class`, `worker_library`."""
    command = stage.commands()[server]
    name = stage.server_environment(server)
    found = environment_versions(name)
    worker = worker_class(command)
    record = {"environment": name, "python": found.get("python"), "worker_class": worker,
              "worker_library": None}
    if command[0] == "gunicorn":
        library = WORKER_LIBRARY.get(worker)
        return {**record, "server": f"gunicorn {found.get('gunicorn')}",
                "worker_library": library and f"{library} {found.get(library)}"}
    if command[0] == "granian":
        return {**record, "server": f"granian {found.get('granian')}"}
    return {**record, "server": f"flask run (werkzeug {found.get('werkzeug')})"}


def git_commit() -> str | None:
    out = subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty",
                          "--abbrev=40"], capture_output=True, text=True)
    return out.stdout.strip() or None


def environment(used: tuple[Stage, ...] = ()) -> dict:
    """What run.json records about where the numbers were taken; `environments` for the
    current environment and those the stages `used` serve from."""
    return {"started": datetime.now().isoformat(timespec="seconds"),
            "git_commit": git_commit(), "versions": versions(),
            "kernel": platform.release(), "cores": os.cpu_count(),
            "python": platform.python_version(),
            "environments": environments({e for s in used for e in s.environments})}


PREFLIGHT_S = 1.0  # seconds the box is watched at rest before the first stage


def at_rest(placement: hosts.Placement) -> tuple[dict, str]:
    """The pre-flight: how busy the server's and the client's CPU sets were with the lab
    idle, and the busiest other processes (run.json `at_rest`); and a line saying so."""
    found = cpu_sets.at_rest(PREFLIGHT_S, {"server": placement.server,
                                           "client": placement.client})
    busy = found["busy_pct"]
    names = ", ".join(f"{p['name'][:40]} (pid {p['pid']}) {p['cpu_pct']:g}%"
                      for p in found["busiest"][:3]) or "none"
    return found, (f"pre-flight, {found['seconds']:g} s at rest: the server's CPUs "
                   f"({hosts.format_cpus(placement.server)}) {busy['server']:g}% busy, the "
                   f"client's ({hosts.format_cpus(placement.client)}) {busy['client']:g}%; "
                   f"busiest other processes: {names}")
