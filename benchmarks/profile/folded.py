"""Collapsed stacks, as py-spy's `--format raw` writes them (`frame;frame;... count`).

One reader for the flame graph and the buckets. With `--subprocesses` each stack
starts with its processes, `process PID:"command line"`, outermost first; a
frame is `function (file)` (`--nolineno`), file shortened to its package path.
"""

from __future__ import annotations

import re
from pathlib import Path

PROCESS = re.compile(r'process \d+:"')


def read(path: Path) -> list[tuple[list[str], int]]:
    """(frames, outermost first; samples) per line; lines without a count are skipped
    (a command line with a line break in it)."""
    found = []
    for line in Path(path).read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            found.append((stack.split(";"), int(count)))
    return found


def is_process(frame: str) -> bool:
    return PROCESS.match(frame) is not None
