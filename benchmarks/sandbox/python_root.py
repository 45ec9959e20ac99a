"""A server from a Python root of its own: Debian forky's python3.14 in a root made by
setup/python314-root.sh (debootstrap, and a venv of the real-time server's packages at
/opt/venv), for the capacity study's --realtime-python.

The server runs chrooted in the root, in a mount namespace of its own (`unshare
--mount`), where the repository's app/ and gunicorn/ (read-only) and the stage's folder
(its logs) are bound at their own paths, and /proc is mounted: the server starts from
the repository's root as it does from the venv, and the lab still reads it from
outside (its PID, PSS, CPU and sockets in /proc). Nothing is mounted anywhere else:
the mounts go with the namespace, when its last process (the server's) exits, whatever
ends it. What stays in the root is the empty folders they were mounted on.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from benchmarks.stages import ROOT

VENV = "/opt/venv"  # in the root: setup/python314-root.sh's VENV
SETUP = "sh setup/python314-root.sh results/python-roots"  # makes one, prints its folder
SHARED = ("app", "gunicorn")  # the repository's folders the server reads, read-only


def problem(root: Path) -> str | None:
    """What is wrong with `root` as a Python root, in one line with the command that
    makes one; None when it is one."""
    if not root.is_dir():
        return f"{root} is not a folder: make the Python root with `{SETUP}` (it prints its folder)"
    if not (root / VENV.lstrip("/") / ".installed").is_file():
        return (f"{root} is not a finished Python root (no {VENV}/.installed in it): make one "
                f"with `{SETUP}` (it prints its folder)")
    return None


def command(root: Path, argv: list[str], writable: list[Path]) -> list[str]:
    """`argv`, its program from the root's venv (`gunicorn`: /opt/venv/bin/gunicorn), run
    chrooted in `root` from the repository's folder, with app/ and gunicorn/ and the
    `writable` folders (the stage's) bound in (module docstring)."""
    root = root.resolve()
    binds = [(ROOT / name, True) for name in SHARED] + [(Path(p).resolve(), False)
                                                       for p in writable]
    steps = [f"mount -t proc proc {shlex.quote(str(root / 'proc'))}"]
    for path, read_only in binds:
        inside = shlex.quote(str(root / path.relative_to("/")))
        steps += [f"mkdir -p {inside}", f"mount --bind {shlex.quote(str(path))} {inside}"]
        if read_only:
            steps.append(f"mount -o remount,bind,ro {inside}")
    program = [f"{VENV}/bin/{Path(argv[0]).name}", *argv[1:]]
    steps.append(f"exec unshare --root={shlex.quote(str(root))} --wd={shlex.quote(str(ROOT))} "
                 f"-- {shlex.join(program)}")
    return ["unshare", "--mount", "--propagation", "private", "--",
            "sh", "-c", " && ".join(steps)]
