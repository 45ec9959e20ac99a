"""The one builder of a Locust command line.

Every Locust the lab starts is `locust -f LOCUSTFILES OPTIONS... USER_CLASSES...`:
the measured load and its warm-up (benchmarks/run/runner.py), `lab up`'s web UI
(benchmarks/sockets_tab/web_ui.py), a finished stage's Sockets tab
(benchmarks/sockets_tab/stage_shot.py) and the check of `--locust-args`. The
locustfile comes from the user classes (benchmarks/stages.py), and the Sockets
tab is a second locustfile, loaded by path after it.
"""

from __future__ import annotations

from collections.abc import Iterable

from benchmarks import stages
from benchmarks.sandbox import procs

SOCKETS_TAB = "benchmarks/sockets_tab/plugin.py"  # the Sockets tab, a Locust plugin


def locustfiles(user_classes: Iterable[str], sockets_tab: bool = False) -> str:
    """`-f`'s value: the locustfile of these user classes, then the Sockets tab if asked."""
    first = stages.locustfile(tuple(user_classes))
    return f"{first},{SOCKETS_TAB}" if sockets_tab else first


def command(user_classes: Iterable[str], options: Iterable[str],
            sockets_tab: bool = False) -> list[str]:
    """`locust -f ... OPTIONS USER_CLASSES`, Locust from the venv."""
    user_classes = tuple(user_classes)
    return [procs.tool("locust"), "-f", locustfiles(user_classes, sockets_tab), *options,
            *user_classes]
