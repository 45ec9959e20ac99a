"""The end of a stage: raw `ss -tanp`, `ss -s`, `netstat -tan` and sockstat, kept as text."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

SNAPSHOTS = {
    "ss-tanp.txt": ["ss", "-tanp"],
    "ss-s.txt": ["ss", "-s"],
    "netstat-tan.txt": ["netstat", "-tan"],
    "sockstat.txt": ["cat", "/proc/net/sockstat"],
}


def snapshot(out_dir: str | os.PathLike, netns: str | None = None,
             timeout: float = 120.0) -> dict[str, Path]:
    """Raw `ss -tanp`, `ss -s`, `netstat -tan` and /proc/net/sockstat into `out_dir`.

    Of the namespace this runs in, or of `netns` (through `ip netns exec`).
    A tool that is missing or fails leaves a `# ...` line saying so in its
    file. Returns file name -> path.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    prefix = ["ip", "netns", "exec", netns] if netns else []
    written = {}
    for name, cmd in SNAPSHOTS.items():
        path = out / name
        exe = shutil.which(cmd[0]) or shutil.which(cmd[0], path="/usr/sbin:/sbin:/usr/bin:/bin")
        if not exe:
            path.write_text(f"# {cmd[0]} not found; Debian/Ubuntu: apt-get install "
                            f"{'net-tools' if cmd[0] == 'netstat' else 'iproute2'}\n")
        else:
            try:
                done = subprocess.run([*prefix, exe, *cmd[1:]], capture_output=True,
                                      timeout=timeout)
                text = done.stdout
                if done.returncode:
                    text += (f"# {' '.join(cmd)} exited {done.returncode}: ".encode()
                             + done.stderr[-2000:])
            except subprocess.TimeoutExpired:
                text = f"# {' '.join(cmd)} took over {timeout:g} s\n".encode()
            path.write_bytes(text)
        written[name] = path
    return written


