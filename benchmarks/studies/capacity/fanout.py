"""Fan-out: the real-time server on several processes, and what the message queue costs them.

With one process, a message is emitted to the members it holds. With several, every
emit goes through the Redis message queue (Flask-SocketIO's and python-socketio's
`message_queue`) to every process, and each decodes it whether it holds a member of
the room or not: the CPU a delivered message costs grows with the processes. On the
websocket transport alone a connection stays with the process that accepted it, so
no sticky sessions are needed (polling would need them: lab 10).

`with_processes` gives a stage's variant whose real-time server runs N processes: for
gunicorn `-w N` on the command line (it overrides the config file's `workers`), for
granian `--workers N`. `listener_share` reads, from py-spy's samples of the real-time
server (benchmarks/profile/record.py), the share spent under the queue's listener:
receiving and decoding every message, and emitting it to the members this process
holds (python-socketio's `PubSubManager._thread`, asyncio's alike).
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from benchmarks.profile import folded
from benchmarks.stages import Stage

LISTENER = re.compile(r"^(Async)?PubSubManager\._thread \(socketio/(async_)?pubsub_manager\.py\)$")


def with_processes(stage: Stage, n: int) -> Stage:
    """`stage` with its real-time server (the Socket.IO one, else the app's) on `n`
    processes; the stage itself for 1."""
    if n == 1:
        return stage
    field = "socketio_server" if stage.socketio_server else "server"
    cmd = list(getattr(stage, field))
    if cmd[0] == "granian":
        cmd[cmd.index("--workers") + 1] = str(n)
    elif cmd[0] == "gunicorn":
        cmd[cmd.index("-b"):cmd.index("-b")] = ["-w", str(n)]
    else:
        raise ValueError(f"stage {stage.key}: its real-time server ({cmd[0]}) has no "
                         "worker count to set")
    return dataclasses.replace(stage, **{field: tuple(cmd)})


def label(stage: Stage, n: int, python: str | None = None) -> str:
    """`9a`, or `9a x3` for its variant on three processes; with `python`, the version
    of a Python root's its server said it runs (the study's --realtime-python): `10
    py3.14.8`, `10 py3.14.8 x3`."""
    key = f"{stage.key} py{python}" if python else stage.key
    return key if n == 1 else f"{key} x{n}"


def listener_share(stacks: Path) -> float | None:
    """Share of the samples under the message queue's listener; None without samples."""
    if not stacks.exists():
        return None
    found = folded.read(stacks)
    total = sum(count for _frames, count in found)
    under = sum(count for frames, count in found if any(LISTENER.match(f) for f in frames))
    return round(under / total, 3) if total else None
