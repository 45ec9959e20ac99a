"""What run.json records about where a run's numbers were taken: the packages' and
servers' versions, the commit, the kernel, the cores, Python, and what else ran on the
lab's CPUs before it started (the pre-flight)."""

from __future__ import annotations

import os
import platform
import subprocess
from datetime import datetime
from importlib import metadata

from benchmarks.capture import cpu_sets
from benchmarks.sandbox import hosts, nginx_conf, procs
from benchmarks.stages import ROOT


def versions() -> dict:
    pkgs = {}
    for name in ("flask", "werkzeug", "redis", "gunicorn", "eventlet", "gevent",
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
    return {"packages": pkgs, "redis-server": redis_v, "nginx": nginx_conf.version()}


def git_commit() -> str | None:
    out = subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty",
                          "--abbrev=40"], capture_output=True, text=True)
    return out.stdout.strip() or None


def environment() -> dict:
    """What run.json records about where the numbers were taken."""
    return {"started": datetime.now().isoformat(timespec="seconds"),
            "git_commit": git_commit(), "versions": versions(),
            "kernel": platform.release(), "cores": os.cpu_count(),
            "python": platform.python_version()}


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
