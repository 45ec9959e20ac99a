"""The one builder of a Locust command line, and the workers of Locust's distributed mode.

Every Locust the lab starts is `locust -f LOCUSTFILES OPTIONS... USER_CLASSES...`:
the measured load and its warm-up (benchmarks/run/runner.py), `lab up`'s web UI
(benchmarks/sockets_tab/web_ui.py), a finished stage's Sockets tab
(benchmarks/sockets_tab/stage_shot.py) and the check of `--locust-args`. The
locustfile comes from the user classes (benchmarks/stages.py), and the Sockets
tab is a second locustfile, loaded by path after it.
"""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Iterable
from pathlib import Path

from benchmarks import stages
from benchmarks.run import results
from benchmarks.run.options import OptionsError, RunOptions
from benchmarks.sandbox import procs
from benchmarks.stages import ROOT

SOCKETS_TAB = "benchmarks/sockets_tab/plugin.py"  # the Sockets tab, a Locust plugin
SOCKETIO_CLASS = "SocketIOChatUser"
ARRIVAL_CLASS = "ArrivalUser"  # the open model (benchmarks/arrivals.py)
ARRIVALS_JSON = "arrivals.json"  # its schedule's counts, in the stage folder
WORKERS_TXT = "locust-workers.txt"  # the workers' command lines, in the stage folder
# What Locust logs as its run's timer starts (locust/main.py), once it has imported its
# locustfiles and, as a master, its workers have joined: the measured run begins here
RUN_STARTED = "Run time limit set to"


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


def hidden(folders: Iterable[Path], cmd: list[str]) -> list[str]:
    """`cmd` in a mount namespace of its own with an empty tmpfs over each of `folders`
    (those inside another are hidden with it): it sees none of the files there, as a
    worker on another machine would not (DESIGN.md, "Load from other machines")."""
    folders = sorted({Path(f).resolve() for f in folders if Path(f).is_dir()})
    outer = [f for f in folders if not any(o != f and o in f.parents for o in folders)]
    mounts = "".join(f"mount -t tmpfs ftl-hidden {shlex.quote(str(f))} && " for f in outer)
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c",
            mounts + 'exec "$@"', "sh", *cmd]


def start_workers(prefixes: dict[str, list[str]], master_host: str | None, log_dir: Path,
                  user_classes) -> dict[str, subprocess.Popen]:
    """A worker on each client host (host -> the argv prefix that runs a command there),
    connecting to the master at `master_host`, blind to the results (the project's and
    the stage folder `log_dir`: everything comes in Locust's messages); logs
    `locust-<host>.log`, the commands `locust-workers.txt`."""
    started, shown = {}, []
    for role, prefix in prefixes.items():
        cmd = [*prefix, *hidden((results.RESULTS, log_dir), command(
            (), ["--worker", "--master-host", master_host], files=user_classes))]
        shown.append(shlex.join(cmd))
        started[role] = procs.start(cmd, log=log_dir / f"locust-{role}.log",
                                    env=procs.child_env(), cwd=ROOT)
    if shown:
        (log_dir / WORKERS_TXT).write_text("\n".join(shown) + "\n")
    return started


def components(master: subprocess.Popen, workers: dict) -> dict[str, list[int]]:
    """The sampler's Locust components, one per client host: `locust` (the client host's:
    the only Locust, or the master and its worker), `locust_client2`, ..."""
    found = {"locust": [master.pid]}
    for role, worker in workers.items():
        found.setdefault(results.locust_component(role), []).append(worker.pid)
    return found


def socketio_users(opts: RunOptions, user_classes) -> int:
    """The Socket.IO users that run beside the HTTP users (0 where the stage has none)."""
    return opts.socketio_users if SOCKETIO_CLASS in user_classes else 0


def locust_users(opts: RunOptions, user_classes) -> int:
    """Locust's `-u`: Socket.IO users come on top, so every stage has the same HTTP users;
    the open model has one ArrivalUser in their place, starting requests at the rate."""
    arrivals = ARRIVAL_CLASS in user_classes
    return (1 if arrivals else opts.users) + socketio_users(opts, user_classes)


def locust_command(url: str, opts: RunOptions, seconds: float, user_classes,
                   csv_prefix: Path | None, users_file: Path | None = None,
                   chat_settings: dict | None = None) -> list[str]:
    arrivals = ARRIVAL_CLASS in user_classes
    cmd = ["--headless", "-u", str(locust_users(opts, user_classes)),
           "-r", str(opts.spawn_rate), "-t", f"{max(1, round(seconds))}s", "--host", url,
           "--only-summary", "--stop-timeout", "5"]
    if arrivals:
        cmd += ["--arrival-rate", f"{opts.arrival_rate:g}"]
        if csv_prefix:
            cmd += ["--arrival-file", str(csv_prefix.parent / ARRIVALS_JSON)]
    if stages.locustfile(user_classes) in (stages.LOCUSTFILE, stages.ARRIVALS_LOCUSTFILE):
        # the lab wants the server saturated: almost no think time between tasks
        cmd += ["--chat-wait-min", "0", "--chat-wait-max", f"{opts.wait_max:g}",
                "--chat-socketio-users", str(socketio_users(opts, user_classes)),
                *chat_options(chat_settings or {})]
        if users_file:
            cmd += ["--chat-users-file", str(users_file)]
    if csv_prefix:  # the CSVs for their history, the JSON for exact totals, Locust's report
        cmd += ["--csv", str(csv_prefix), "--json-file", str(csv_prefix),
                "--html", str(csv_prefix.parent / results.LOCUST_HTML)]
        if socketio_users(opts, user_classes):
            cmd += ["--chat-sessions-file", str(csv_prefix.parent / results.SESSIONS_JSON)]
    return command(user_classes, [*cmd, *opts.locust_args])


def load_classes(user_classes, opts: RunOptions) -> tuple[str, ...]:
    """The user classes that load a stage: its own, or with --arrival-rate the open model
    in place of its HTTP users (its Socket.IO users stay beside it)."""
    if opts.arrival_rate is None:
        return tuple(user_classes)
    return (ARRIVAL_CLASS, *(c for c in user_classes if c == SOCKETIO_CLASS))


def check_locust_args(opts: RunOptions) -> None:
    """Locust's own parser on --locust-args, before anything starts (`--list` exits at once)."""
    if not opts.locust_args:
        return
    cmd = command((), [*opts.locust_args, "--list"],
                  files=(ARRIVAL_CLASS,) if opts.arrival_rate else None)
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=procs.child_env(),
                          timeout=60)
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines() or ["(no message)"]
        last = " ".join(ln for ln in lines if "error" in ln) or lines[-1]
        raise OptionsError(f"Locust rejects --locust-args {shlex.join(opts.locust_args)!r}: "
                           f"{last}")
