"""The study's load processes (client.py), on the stage's load hosts, driven step by step.

The users are split into whole rooms over `processes` processes, spread over the load
hosts in turn; each process reports a JSON line per event on its stdout and waits for
"go" on its stdin between a step's connects and its traffic, and after the traffic,
while the study reads the servers. Its stderr goes to `client-N.log`.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from pathlib import Path

from benchmarks import stages
from benchmarks.run.cli import StageFailed
from benchmarks.sandbox import procs

CLIENT_MODULE = "benchmarks.studies.capacity.client"


def split(users: int, room_size: int, processes: int) -> list[tuple[int, int]]:
    """(first, count) per process: whole rooms, as even as they go."""
    rooms = -(-users // room_size)
    per, extra = divmod(rooms, processes)
    out, first = [], 0
    for n in range(processes):
        count = min((per + (n < extra)) * room_size, users - first)
        if count > 0:
            out.append((first, count))
        first += count
    return out


def targets(steps: list[int], share: tuple[int, int], users: int) -> list[int]:
    """A process's own users connected at each step: its share of every step's total, in
    the order of the users file (process n holds users first..first+count)."""
    first, count = share
    return [max(0, min(count, step - first)) for step in steps]


def options(traffic: dict) -> list[str]:
    """client.py's options: `--name=value`, or `--name` for a flag (value "")."""
    return [f"--{k.replace('_', '-')}" + (f"={v}" if v != "" else "")
            for k, v in traffic.items()]


class Clients:
    """The load processes of one stage's run; a context manager that stops them all."""

    def __init__(self, prefixes: list[list[str]], url: str, users_file: Path, steps: list[int],
                 room_size: int, processes: int, traffic: dict, out_dir: Path, limit: float):
        self.procs: list[subprocess.Popen] = []
        self.logs = []
        users = steps[-1]
        for n, share in enumerate(split(users, room_size, processes)):
            cmd = [*prefixes[n % len(prefixes)], sys.executable, "-m", CLIENT_MODULE,
                   "--url", url, "--users-file", str(users_file), "--first", str(share[0]),
                   "--count", str(share[1]),
                   "--steps", ",".join(map(str, targets(steps, share, users))),
                   "--limit", str(limit), *options(traffic)]
            log = out_dir / f"client-{n + 1}.log"
            self.logs.append(log)
            with open(log, "ab") as err:
                self.procs.append(subprocess.Popen(
                    cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                    env=procs.child_env(), cwd=stages.ROOT, text=True, start_new_session=True))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()

    def events(self, expected: str, timeout: float) -> list[dict]:
        """Each process's next line, which must be a `expected` event."""
        found = [None] * len(self.procs)

        def read(n, proc):
            line = proc.stdout.readline()
            found[n] = json.loads(line) if line.strip() else None

        readers = [threading.Thread(target=read, args=(n, p), daemon=True)
                   for n, p in enumerate(self.procs)]
        for t in readers:
            t.start()
        for t in readers:
            t.join(timeout)
        for n, event in enumerate(found):
            if event is None or event.get("event") != expected:
                tail = self.logs[n].read_text(errors="replace")[-1500:]
                raise StageFailed(f"load process {n + 1} gave {event!r}, not its "
                                  f"`{expected}` line; see {self.logs[n]}:\n{tail}")
        return found

    def go(self) -> None:
        for proc in self.procs:
            proc.stdin.write("go\n")
            proc.stdin.flush()

    def stop(self) -> None:
        """Close their stdin (they stop at their next wait), then TERM any still there."""
        for proc in self.procs:
            try:
                proc.stdin.close()
            except OSError:
                pass
        procs.stop_all([(p, signal.SIGTERM, False) for p in self.procs], timeout=10)
