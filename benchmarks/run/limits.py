"""The box's limits a stage's users run into before its CPU does: descriptors and threads.

Every websocket a server holds is a descriptor of its process, and a process may hold
at most its soft RLIMIT_NOFILE (`ulimit -Sn`, 1,024 by default on Debian and Ubuntu,
and so in a VM's `sudo lab`; lab 07). Any process may raise its soft limit up to its
hard one, and what the lab starts inherits the lab's: so every lab command raises its
own soft limit to the hard one as it starts (`raise_nofile`), and the servers it starts
hold as many websockets as the hard limit allows. Past the hard limit only root's
`ulimit -Hn` (or `nofile` in /etc/security/limits.conf) goes: a study that needs more
stops before it starts and says so (`check_nofile`).

A thread is a task of the kernel's and takes a pid: the box's `kernel.pid_max` (32,768
by default) and `kernel.threads-max` cap every thread of every process together, so a
server that spends threads on its users (the gthread worker, four a user) stops near a
quarter of pid_max whatever its own settings (`thread_cap`).
"""

from __future__ import annotations

import resource
from pathlib import Path

NOFILE_FIX = ("ulimit -Hn {n} as root before the command (or nofile in "
              "/etc/security/limits.conf; lab 07)")


def raise_nofile() -> tuple[int, int]:
    """This process's soft descriptor limit up to its hard one; (soft, hard) after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard, hard


def nofile() -> int:
    """This process's soft descriptor limit (what the processes it starts inherit)."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return 2**31 if soft == resource.RLIM_INFINITY else soft


def check_nofile(needed: int, what: str) -> str | None:
    """None when this process (and so what it starts) may hold `needed` descriptors, after
    raising its soft limit; else the one line that names the limit and its fix."""
    raise_nofile()
    if nofile() >= needed:
        return None
    return (f"{what} needs {needed:,} descriptors and this shell's hard limit (ulimit -Hn) is "
            f"{nofile():,}: {NOFILE_FIX.format(n=needed)}")


def kernel_number(name: str, root: Path = Path("/proc/sys/kernel")) -> int | None:
    try:
        return int((root / name).read_text())
    except (OSError, ValueError):
        return None


def thread_cap() -> int | None:
    """The threads the box may run at once, every process's together: the smaller of
    kernel.pid_max and kernel.threads-max."""
    found = [n for n in (kernel_number("pid_max"), kernel_number("threads-max")) if n]
    return min(found) if found else None
