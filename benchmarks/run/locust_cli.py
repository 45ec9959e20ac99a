"""The one builder of a Locust command line, and the workers of Locust's distributed mode.

Every Locust the lab starts is `locust -f LOCUSTFILES OPTIONS... USER_CLASSES...`:
the measured load and its warm-up (benchmarks/run/runner.py), `lab up`'s web UI
(benchmarks/sockets_tab/web_ui.py), a finished stage's Sockets tab
(benchmarks/sockets_tab/stage_shot.py) and the check of `--locust-args`. The
locustfile comes from the user classes (benchmarks/stages.py), and the Sockets
tab is a second locustfile, loaded by path after it.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterable
from pathlib import Path

from benchmarks import stages
from benchmarks.run import results
from benchmarks.sandbox import procs
from benchmarks.stages import ROOT

SOCKETS_TAB = "benchmarks/sockets_tab/plugin.py"  # the Sockets tab, a Locust plugin


def locustfiles(user_classes: Iterable[str], sockets_tab: bool = False) -> str:
    """`-f`'s value: the locustfile of these user classes, then the Sockets tab if asked."""
    first = stages.locustfile(tuple(user_classes))
    return f"{first},{SOCKETS_TAB}" if sockets_tab else first


def command(user_classes: Iterable[str], options: Iterable[str],
            sockets_tab: bool = False, files: Iterable[str] | None = None) -> list[str]:
    """`locust -f ... OPTIONS USER_CLASSES`, Locust from the venv. `files`: the user
    classes whose locustfile to load, when none are named (a worker: its master names
    them)."""
    user_classes = tuple(user_classes)
    chosen = tuple(files) if files is not None else user_classes
    return [procs.tool("locust"), "-f", locustfiles(chosen, sockets_tab), *options,
            *user_classes]


def chat_options(settings: dict[str, object]) -> list[str]:
    """A stage's chat settings (Stage.chat_settings) as Locust options: `--chat-NAME VALUE`."""
    return [part for name, value in settings.items()
            for part in (f"--chat-{name}", f"{value:g}" if isinstance(value, float) else value)]


def chat_env(settings: dict[str, object]) -> dict[str, str]:
    """The same as Locust's environment variables (`LOCUST_CHAT_NAME`), for `lab exec`."""
    return {f"LOCUST_CHAT_{name.upper().replace('-', '_')}": str(value)
            for name, value in settings.items()}


def start_workers(prefixes: dict[str, list[str]], master_host: str | None, log_dir: Path,
                  user_classes) -> dict[str, subprocess.Popen]:
    """A worker on each client host (host -> the argv prefix that runs a command there),
    connecting to the master at `master_host`; logs `locust-<host>.log`."""
    started = {}
    for role, prefix in prefixes.items():
        cmd = command((), ["--worker", "--master-host", master_host], files=user_classes)
        started[role] = procs.start([*prefix, *cmd], log=log_dir / f"locust-{role}.log",
                                    env=procs.child_env(), cwd=ROOT)
    return started


def components(master: subprocess.Popen, workers: dict) -> dict[str, list[int]]:
    """The sampler's Locust components, one per client host: `locust` (the client host's:
    the only Locust, or the master and its worker), `locust_client2`, ..."""
    found = {"locust": [master.pid]}
    for role, worker in workers.items():
        found.setdefault(results.locust_component(role), []).append(worker.pid)
    return found
