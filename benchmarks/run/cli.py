"""Command-line plumbing shared by `lab`, `sweep` and `fd_limit`.

- `add_sandbox_options`: --sandbox, --apply-host-sysctls, --results, spelled once.
- `resolve_sandbox`: `auto` becomes `netns` (root and `ip`) or `host`, with the note.
- `main`: runs a command with the signal handling and failure wrapper every tool
  needs. The first Ctrl-C or SIGTERM raises KeyboardInterrupt, so `finally`
  blocks and context managers stop what was started; further ones while that
  clean-up runs are ignored (with a line saying so), because an interrupt in the
  middle of a clean-up is what used to leave namespaces and servers behind.
"""

from __future__ import annotations

import argparse
import signal
import sys

from benchmarks.run import limits, options, results
from benchmarks.sandbox import hosts, procs, sandbox


class StageFailed(RuntimeError):
    """A stage could not run (not: a check did not pass)."""


# What a tool reports as "could not run" (exit 1), rather than as a traceback.
RUN_ERRORS = (StageFailed, sandbox.SandboxError, procs.ServiceError)


def say(message: str = "") -> None:
    print(message, flush=True)


def int_list(minimum: int, what: str):
    """An argparse type: "1,2 4" -> [1, 2, 4], every value at least `minimum`."""
    def parse(text: str) -> list[int]:
        try:
            values = [int(x) for x in text.replace(",", " ").split()]
        except ValueError:
            values = []
        if not values or min(values) < minimum:
            raise argparse.ArgumentTypeError(f"{what} must be integers >= {minimum}: {text!r}")
        return values
    return parse


def add_sandbox_options(parser: argparse.ArgumentParser, per: str = "stage") -> None:
    parser.add_argument("--sandbox", choices=options.SANDBOXES, default="auto",
                        help=f"a network namespace per {per} (root) or the host "
                             "(default: auto)")
    parser.add_argument("--apply-host-sysctls", action="store_true",
                        help="host mode only: set the stage's sysctls on the host "
                             "(restored after each stage, and by `lab clean` after a kill)")
    parser.add_argument("--results", default=str(results.RESULTS), help="results folder")
    parser.add_argument("--server-cpus", metavar="CPUS",
                        help="CPU set of Redis, the app and Nginx, e.g. 1 or 0-1 (default: the "
                             "last CPU, so the server has one core, as in the book)")
    parser.add_argument("--client-cpus", metavar="CPUS",
                        help="CPU set of Locust (default: the other CPUs)")


def resolve_sandbox(requested: str) -> str:
    ok, why = hosts.netns_available()
    if requested == "netns" and not ok:
        raise options.OptionsError(f"--sandbox netns needs root and `ip`: {why}. "
                                   "Use --sandbox host, or run as root with iproute2.")
    if requested == "auto":
        if not ok:
            say(f"note: host mode, since there are no network namespaces ({why}): every "
                "role runs on this machine's 127.0.0.1, in one socket table, so the host "
                "by host figures the labs quote will differ; run as root for a host per "
                "role (sudo make lab).")
            say(f"note: {sandbox.loopback_note()}")
        return "netns" if ok else "host"
    return requested


class _Interrupts:
    """SIGINT/SIGTERM: the first raises KeyboardInterrupt, the rest wait for clean-up."""

    def __init__(self, prog: str):
        self.prog, self.count = prog, 0

    def __call__(self, signum, frame):
        self.count += 1
        if self.count == 1:  # a word at once: stopping servers can take a few seconds
            print(f"\n{self.prog}: stopping what it started", flush=True)
            raise KeyboardInterrupt
        print(f"\n{self.prog}: still stopping what it started; please wait", flush=True)

    def install(self) -> None:
        # Also when a shell started us in the background with SIGINT ignored.
        signal.signal(signal.SIGINT, self)
        signal.signal(signal.SIGTERM, self)


def main(prog: str, run, args, leftovers=None) -> int:
    """`run(args)` with the lab's exits: 2 bad input, 1 could not run, 130 interrupted.

    `leftovers()`, when given, lists what this process started and is still there
    after an interrupt, so the last line tells the truth.
    """
    _Interrupts(prog).install()
    limits.raise_nofile()  # what the lab starts inherits it: a websocket is a descriptor
    try:
        return run(args)
    except (options.OptionsError, KeyError) as e:
        say(f"{prog}: {e.args[0]}")
        return 2
    except RUN_ERRORS as e:
        say(f"{prog}: could not run: {e}")
        return 1
    except KeyboardInterrupt:
        left = leftovers() if leftovers else []
        if left:
            say(f"\n{prog}: interrupted; still there: {', '.join(left)} "
                "(`python -m benchmarks.lab clean` removes them)")
            return 130
        say(f"\n{prog}: interrupted; everything it started is stopped")
        return 130
    except BrokenPipeError:  # `lab list | head`
        sys.stderr.close()
        return 0
