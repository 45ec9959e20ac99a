"""py-spy on the app server while a stage is measured: where its CPU goes.

Purpose: the sampler says how much CPU the app server used; this says on what.
`recording` runs `py-spy record` on the first app host's server process and its
children (`--subprocesses`: gunicorn's workers; `flask run` is one process) for
the measured window, then draws the flame graph. A stage with two app hosts is
profiled on `app` only.

Requirements: py-spy (`make setup` installs it; `.venv/bin/pip install py-spy`)
and permission to ptrace the server (root, or kernel.yama.ptrace_scope 0). Without
either the run says so once and goes on without profiles.

Overhead: py-spy reads the workers' memory RATE_HZ times a second, pausing each
for the read; at 50 Hz stage 2's requests a second stayed within the run-to-run
noise (docs/numbers.md, "Where the CPU goes"). It runs on the client's CPUs, like the
sampler, so its own work does not land on the server's core.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from benchmarks.profile import flamegraph
from benchmarks.run import results
from benchmarks.run.cli import say
from benchmarks.sandbox import procs, sandbox
from benchmarks.stages import ROOT

PY_SPY = "py-spy"
RATE_HZ = 50  # samples a second of each process (py-spy's default is 100)
INSTALL = ".venv/bin/pip install py-spy"
# py-spy writes its file after the last sample; with several workers that takes a moment.
WRITE_TIMEOUT_S = 20
_said: set[str] = set()  # what this lab process has said already: once a run


def say_once(message: str) -> None:
    if message not in _said:
        _said.add(message)
        say(message)


def command(pid: int, out: Path, seconds: float, rate: int = RATE_HZ) -> list[str]:
    """`py-spy record` of `pid` and its children for `seconds`, collapsed stacks to `out`.

    Idle threads are left out (py-spy's default): a worker waiting in accept() or
    epoll is not CPU. No line numbers: a frame is `function (file)`, so one
    function is one box in the flame graph."""
    return [procs.tool(PY_SPY), "record", "--pid", str(pid), "--subprocesses",
            "--rate", str(rate), "--duration", str(max(1, int(seconds))),
            "--format", "raw", "--nolineno", "--output", str(out)]


def found() -> bool:
    """Is py-spy there (the venv's, or on PATH)? Says once how to install it if not."""
    if shutil.which(procs.tool(PY_SPY), path=procs.child_env()["PATH"]):
        return True
    say_once(f"  note: py-spy not found, so no profiles this run; install it with "
             f"`{INSTALL}` (or `make setup`)")
    return False


def _drawn(stage_dir: Path, proc: subprocess.Popen) -> None:
    """The flame graph of what py-spy wrote; what went wrong, once, if it wrote nothing."""
    stacks = stage_dir / results.PROFILE_STACKS
    if stacks.exists() and stacks.stat().st_size > 0:
        flamegraph.write(stacks, stage_dir / results.PROFILE_SVG)
        return
    log = stage_dir / results.PROFILE_LOG
    lines = log.read_text(errors="replace").strip().splitlines() if log.exists() else []
    why = lines[-1] if lines else f"exit {proc.returncode}"
    say_once(f"  note: py-spy recorded nothing ({why}), so no profiles this run; it needs "
             f"permission to ptrace the server (root, or kernel.yama.ptrace_scope=0), and "
             f"installed: `{INSTALL}`")


@contextmanager
def recording(pid: int, prefix: list[str], stage_dir: Path, seconds: float,
              on: bool = True) -> Iterator[None]:
    """py-spy on `pid` while the block runs (at most `seconds`), then its flame graph.

    `prefix` runs it (the sampler's: the client's CPUs). Stopped in every case: it
    ends by itself after `seconds`; on an error or Ctrl-C it gets SIGINT, on which
    it writes what it has, then KILL."""
    proc = None
    if on and found():
        proc = procs.start([*prefix, *command(pid, stage_dir / results.PROFILE_STACKS,
                                              seconds)],
                           log=stage_dir / results.PROFILE_LOG, env=procs.child_env(), cwd=ROOT)
    try:
        yield
        if proc is not None:
            try:
                proc.wait(timeout=WRITE_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                pass
    finally:
        with sandbox.uninterrupted():
            procs.stop(proc, sig=signal.SIGINT)
    if proc is not None:
        _drawn(stage_dir, proc)
