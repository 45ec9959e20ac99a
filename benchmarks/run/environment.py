"""What run.json records about where a run's numbers were taken: the packages' and
servers' versions, the commit, the kernel, the cores, Python."""

from __future__ import annotations

import os
import platform
import subprocess
from datetime import datetime
from importlib import metadata

from benchmarks.sandbox import nginx_conf, procs
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
