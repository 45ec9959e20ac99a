"""The VM pages' commands typed in a real VM, as its default user over SSH: the part of
`make vm-test` (setup/vm-test.sh) that types. One list serves it and the suite:
test_typed.py's REGISTRY. Typed here:

- every command REGISTRY has typed as "a VM's user" (docs/laptops.md's "Into the lab
  on a VM": `sudo lab`, a command in its shell, `exit`), in one bash over ssh, as
  test_typed.typed types them locally: same status and output checks;
- the InVM commands: the page's `ssh -L ...` tunnel to the VM (the laptop's side on a
  free port), in which `sudo lab up 2` is typed on a terminal (ssh -tt), its banner
  read, Locust's page fetched through the tunnel, then Ctrl-C, as a reader stops it.

    python tests/lab/vm_typed.py --ssh-config FILE [--host vm]   # exit 0: all passed
    python tests/lab/vm_typed.py --list                          # the commands, no VM
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

# as pytest finds them: this folder's modules, tests/conftest.py, the repository
sys.path[:0] = [str(Path(__file__).parent), str(Path(__file__).parents[1]),
                str(Path(__file__).parents[2])]
import test_typed as t  # noqa: E402

PAGE = t.ROOT / "docs" / "laptops.md"
VM_READER = "a VM's user"
TIMEOUT = 900  # seconds for a session: under emulation `lab list` alone takes a minute
UP_MARK = "Ctrl-C stops it"  # lab up's last banner line


def vm_commands() -> tuple[list[t.Command], list[t.Command]]:
    """(the page's commands a VM's user types, the InVM ones), in the page's order."""
    found = [(c, t.entry(c)) for c in t.page_commands(PAGE)]
    typed = [c for c, e in found if isinstance(e, t.Typed) and e.reader == VM_READER]
    in_vm = [c for c, e in found if isinstance(e, t.InVM)]
    return typed, in_vm


def ssh_argv(config: str, host: str) -> list[str]:
    return ["ssh", "-F", config, host]


def say(text: str) -> None:
    print(f"vm_typed: {text}", flush=True)


def typed_session(config: str, host: str, commands: list[t.Command]) -> bool:
    """The VM user's commands in one bash over ssh, each checked as test_typed checks."""
    shell = t.Shell(Path.cwd(), dict(os.environ), argv=(*ssh_argv(config, host), "bash"))
    ok = True
    for c, (status, out) in zip(commands, t.typed(shell, commands, TIMEOUT), strict=True):
        e = t.entry(c)
        good = status == e.status and e.shows in out
        ok &= good
        say(f"{'PASS' if good else 'FAIL'} `{c.text}` exited {status}"
            + ("" if e.shows in out else f", did not print {e.shows!r}"))
        if not good:
            print(out[-3000:])
    return ok


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tunnel_argv(command: str, config: str, host: str, port: int) -> list[str]:
    """The page's `ssh -L 8089:127.0.0.1:8089 USER@VM_ADDRESS`: USER@VM_ADDRESS this
    VM (ssh's config), the laptop's side of -L a free port, and a terminal (-tt)."""
    words = shlex.split(command)
    assert words[:2] == ["ssh", "-L"] and words[-1] == "USER@VM_ADDRESS", command
    remote = words[2].split(":", 1)[1]
    return ["ssh", "-tt", "-L", f"{port}:{remote}", "-F", config, host]


class Terminal:
    """A process on a terminal whose output is read as it comes."""

    def __init__(self, argv: list[str]):
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        self.out = ""
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for chunk in iter(lambda: self.proc.stdout.read1(4096), b""):
            self.out += chunk.decode(errors="replace")

    def type(self, text: str) -> None:
        self.proc.stdin.write(text.encode())
        self.proc.stdin.flush()

    def wait_for(self, pattern: str, seconds: float, start: int = 0) -> re.Match | None:
        """The pattern's first match in the output from `start` on, within `seconds`."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and self.proc.poll() is None:
            if m := re.compile(pattern).search(self.out, start):
                return m
            time.sleep(1)
        return re.compile(pattern).search(self.out, start)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def ui_through(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=30) as r:
            return "locust" in r.read().decode(errors="replace").lower()
    except OSError as error:
        say(f"the UI through the tunnel: {error}")
        return False


def held_stage(config: str, host: str, tunnel: t.Command, up: t.Command) -> bool:
    """The tunnel, `sudo lab up 2` typed in it, its banner, the UI, Ctrl-C."""
    port = free_port()
    term = Terminal(tunnel_argv(tunnel.text, config, host, port))
    try:
        term.type(up.text + "\n")
        # bash's echo of it after its prompt (the terminal may echo it once before bash
        # reads it), then the banner's last line, or the prompt back (it stopped early)
        typed = term.wait_for(r"\$ " + re.escape(t.without_comment(up.text)) + r".*\n", 120)
        end = term.wait_for(rf"{re.escape(UP_MARK)}|\$ $", TIMEOUT, typed.end() if typed else 0)
        banner = end is not None and end[0] == UP_MARK
        shows = t.entry(up).shows in term.out
        ui = banner and ui_through(port)
        start = len(term.out)
        term.type("\x03")  # Ctrl-C, as the banner says
        # the shell's prompt back (sudo forwards what is typed before to the lab's terminal)
        term.wait_for(r"\$ $", 300, start)
        term.type("echo @@status $?\n")
        m = term.wait_for(r"@@status (\d+)", 60, start)
        stopped = banner and m is not None and m[1] in ("0", "130")
        term.type("exit\n")
        term.wait_for(r"\Z.", 30)
    finally:
        term.close()
    say(f"{'PASS' if banner and shows else 'FAIL'} `{up.text}` in `{tunnel.text}`: "
        f"banner {'with' if shows else 'WITHOUT'} {t.entry(up).shows!r}")
    say(f"{'PASS' if ui else 'FAIL'} Locust's page through the tunnel (laptop side {port})")
    say(f"{'PASS' if stopped else 'FAIL'} Ctrl-C stopped it (status {m[1] if m else '?'})")
    if not (banner and shows and ui and stopped):
        print(term.out[-4000:])
    return banner and shows and ui and stopped


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ssh-config")
    ap.add_argument("--host", default="vm")
    ap.add_argument("--list", action="store_true")
    a = ap.parse_args()
    typed, in_vm = vm_commands()
    if a.list or not a.ssh_config:
        for c in typed + in_vm:
            print(c.text)
        return 0
    ok = typed_session(a.ssh_config, a.host, typed)
    tunnel = next(c for c in in_vm if c.text.startswith("ssh -L"))
    up = next(c for c in in_vm if c is not tunnel)
    ok &= held_stage(a.ssh_config, a.host, tunnel, up)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
