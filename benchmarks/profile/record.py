"""py-spy on the app server while a stage is measured: where its CPU goes.

Purpose: the sampler says how much CPU the app server used; this says on what.
`recording` runs `py-spy record` on the first app host's server process and its
children (`--subprocesses`: gunicorn's workers; `flask run` is one process) for
the measured window, then draws the flame graph. A stage with two app hosts is
profiled on `app` only. A stage with two servers on its app host (stage 9: granian
for HTTP, gunicorn for Socket.IO) gets a py-spy on each, their stacks in one file.

granian's HTTP work is Rust on a thread with no Python frame (`tokio-rt-worker`):
py-spy, which reads Python stacks, sees the app's code in granian's blocking threads
(and granian's Python glue, granian/wsgi.py), not the HTTP parsing and socket I/O,
which the sampler's CPU still counts (about a tenth of granian's CPU in lab 15).

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
from collections.abc import Iterator, Sequence
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
def recording(pids: int | Sequence[int], prefix: list[str], stage_dir: Path, seconds: float,
              on: bool = True) -> Iterator[None]:
    """py-spy on each of `pids` while the block runs (at most `seconds`), then one flame
    graph of them all.

    `prefix` runs it (the sampler's: the client's CPUs). Stopped in every case: it
    ends by itself after `seconds`; on an error or Ctrl-C it gets SIGINT, on which
    it writes what it has, then KILL."""
    pids = [pids] if isinstance(pids, int) else list(pids)
    stacks = stage_dir / results.PROFILE_STACKS
    # the first server's stacks go to profile.folded, another's beside it until joined
    outs = [stacks, *(stacks.with_name(f"{stacks.name}.{k}") for k in range(1, len(pids)))]
    running = []
    if on and found():
        running = [procs.start([*prefix, *command(pid, out, seconds)],
                               log=stage_dir / results.PROFILE_LOG, env=procs.child_env(),
                               cwd=ROOT) for pid, out in zip(pids, outs, strict=True)]
    try:
        yield
        for proc in running:
            try:
                proc.wait(timeout=WRITE_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                pass
    finally:
        with sandbox.uninterrupted():
            for proc in running:
                procs.stop(proc, sig=signal.SIGINT)
    if running:
        joined(stacks, outs[1:])
        _drawn(stage_dir, running[0])


def joined(stacks: Path, parts: list[Path]) -> None:
    """Each part's stacks appended to `stacks` (a stack starts with its process, so the
    servers stay apart in the flame graph), and the part deleted."""
    for part in parts:
        if part.exists():
            text = part.read_text(errors="replace")
            before = stacks.read_text(errors="replace") if stacks.exists() else ""
            stacks.write_text(before + ("\n" if before and not before.endswith("\n") else "")
                              + text)
            part.unlink()
