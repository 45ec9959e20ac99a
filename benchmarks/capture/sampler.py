"""sampler - TIME_WAIT/ESTABLISHED sockets by connection class, CPU/RSS by component.

Runs beside one lab stage and writes a CSV time series, one row per interval
(1 s by default), until SIGTERM/SIGINT (it then writes a last row and exits 0)
or for --duration seconds. /proc is shared by every network namespace, so it
sees every process of the stage wherever it runs.

Two ways to count sockets:

  one namespace   started INSIDE the stage's network namespace (`ip netns exec
                  NS ...`): that namespace's sockets. A connection class is a
                  port that marks one end of a connection: `redis` (the Redis
                  port), `upstream` (the app port, behind a proxy), `front`
                  (the entry port). Both ends of a loopback connection are in
                  the one table.
  hosts           --host NAME=NETNS for each host (a network namespace of its
                  own, see benchmarks/sandbox/hosts.py); started in the root namespace,
                  as root. Each host's own socket table is counted (a netlink
                  socket made inside each namespace, its /proc/net/sockstat
                  read there), so `tw_total_app` is what `ss -s` shows on the
                  app host. A class is a host pair and a port: `front=client,
                  app:8000` counts connections from the client host to port
                  8000 of the app host, matched by the addresses at both ends
                  (read from the hosts' interfaces at the start); a side may
                  be several hosts joined by `+` (`redis=app+app2,redis:6379`,
                  stage 6's two app hosts). A warm-up
                  from elsewhere, or a probe on the app host's own loopback,
                  is in no class. It stops by itself once a host's namespace
                  is deleted.

A component is a PID counted together with all its descendants, found afresh
at every sample (gunicorn, Nginx and Locust fork workers, and workers come
and go).

USAGE: python -m benchmarks.capture.sampler --out FILE.csv [--interval S] [--duration S]
                [--host NAME=NETNS ...] [--class NAME=PORT | NAME=FROM,TO:PORT ...]
                [--proc NAME=PID ...] [--cpu-set NAME=CPUS:COMPONENT,... ...]
                [--backend netlink|ss]
       python -m benchmarks.capture.sampler --snapshot DIR

   eg,
       ip netns exec NS .venv/bin/python -m benchmarks.capture.sampler --out s.csv \\
           --class redis=6379 --class front=8000 --proc redis=4100 --proc app=4120
                                    # one namespace, 1 Hz until SIGTERM
       .venv/bin/python -m benchmarks.capture.sampler --out s.csv --host client=ftl-9-4-client \\
           --host proxy=ftl-9-4-proxy --host app=ftl-9-4-app --host redis=ftl-9-4-redis \\
           --class front=client,proxy:8080 --class upstream=proxy,app:8000 \\
           --class redis=app,redis:6379 --proc app=4120
                                    # hosts: each its own socket table
       ... --duration 30            # 30 rows, then exit 0
       ip netns exec NS .venv/bin/python -m benchmarks.capture.sampler --snapshot DIR
                                    # raw ss -tanp, ss -s, netstat -tan, sockstat

   Repeating --proc NAME sums several trees into one component (e.g. Locust's
   master and workers started separately). The sampler always adds itself as
   component `sampler`.

COLUMNS (one row per sample):
   ts              unix time of the sample
   elapsed_s       seconds since the sampler started
   tw_total        TIME_WAIT sockets, from /proc/net/sockstat `tw` (IPv4+IPv6;
                   the number `ss -s` shows and tcp_max_tw_buckets limits);
                   with hosts, the sum over the hosts
   estab_total     ESTABLISHED sockets, both ends of a connection counted
                   (IPv4+IPv6); with hosts, the sum over the hosts
   tw_total_HOST   (hosts only) TIME_WAIT in HOST's own table (its sockstat)
   estab_total_HOST  (hosts only) ESTABLISHED in HOST's own table
   tw_NAME         TIME_WAIT of the class (= client + server)
   tw_NAME_client  ... held by the connecting side (it closed first): one
                   namespace, remote port = PORT; hosts, in FROM's table
   tw_NAME_server  ... held by the listening side (it closed first): one
                   namespace, local port = PORT; hosts, in TO's table
   estab_NAME      ESTABLISHED connections of the class, each once, from the
                   connecting end
   cpu_NAME        CPU of the process tree since the previous row, percent of
                   ONE core (100 = one full core; 200 = two)
   rss_mb_NAME     resident memory of the tree, MiB (shared pages are counted
                   once per process, so forked workers overstate it)
   foreign_cpu_SET (--cpu-set SET=CPUS:COMPONENTS) the CPU the set's CPUs spent on
                   anything but those components (and the kernel's work for
                   them), percent of the set (100 = all its CPUs busy with
                   others): a neighbour, another lab, a VM's steal
                   (benchmarks/capture/cpu_sets.py)
   cpu_* and rss_mb_* are empty while the component's PID is not running. The
   header is written once and every row is flushed: a kill loses at most one.

REQUIREMENTS: Linux, /proc, NETLINK_SOCK_DIAG with tcp_diag (every distribution
   kernel has them; `ss` uses the same). No root, except to enter a namespace
   (--host: setns into each, so root).
   `ss` for --backend ss and --snapshot; `netstat` (net-tools) for --snapshot.

OVERHEAD: per sample: a read of /proc/net/sockstat; one inet_diag dump over
   netlink (the TCPDIAG_GETSOCK request: TIME_WAIT and ESTABLISHED, IPv4 and
   IPv6, in one walk of the kernel's socket table; a dump per state when both
   are plentiful), its port fields counted without a Python loop per socket;
   one read of /proc/PID/stat per process (ppid, CPU times, RSS). No
   psutil.net_connections() (~230 ms a call at 25k sockets), no netstat
   (~110 ms), no `ss` fork per sample (50-70 ms of CPU at 25k). Measured with
   benchmarks/studies/sampler_cost.py on 2 noisy cores with 25,000 TIME_WAIT: ~6-10 ms
   of CPU a sample, mostly the kernel's, so ~1% of one core at 1 Hz in one
   namespace (--backend ss: ~8%). With hosts, a dump and a sockstat read per
   host (two setns each): four hosts, two of them with 25,000 TIME_WAIT,
   cost 2.6% of one core, 1.3% per loaded host. Its own CPU, children
   included, is in cpu_sampler.

SEE ALSO: benchmarks/studies/sampler_cost.py; ss(8); proc(5) /proc/net/sockstat,
   /proc/PID/stat; sock_diag(7).
"""

from __future__ import annotations

import argparse
import os
import select
import signal
import sys
import time

from benchmarks.capture.cpu_sets import parse_cpu_sets
from benchmarks.capture.kernel import BACKENDS
from benchmarks.capture.loop import Sampler
from benchmarks.capture.snapshot import snapshot
from benchmarks.capture.tables import parse_classes, parse_host_classes, parse_hosts, parse_procs

BEGIN_WAIT_S = 300.0  # --begin-when: the longest wait for the window to begin

# --- command line -----------------------------------------------------------------

class _SignalStop:
    """A stop flag safe to set from a signal handler (threading.Event is not)."""

    def __init__(self) -> None:
        self._r, self._w = os.pipe()
        os.set_blocking(self._w, False)
        self._set = False

    def set(self, *_args) -> None:
        self._set = True
        try:
            os.write(self._w, b"x")
        except OSError:
            pass

    def is_set(self) -> bool:
        return self._set

    def wait(self, timeout: float | None = None) -> bool:
        if not self._set:
            select.select([self._r], [], [], timeout)
        return self._set

    def close(self) -> None:
        os.close(self._r)
        os.close(self._w)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.capture.sampler",
        description="Sample TIME_WAIT/ESTABLISHED sockets by connection class and CPU/RSS "
                    "by component into a CSV, until SIGTERM/SIGINT or --duration.")
    p.add_argument("--out", help="the CSV to write")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between rows (1.0)")
    p.add_argument("--duration", type=float, help="stop after this many seconds")
    p.add_argument("--begin-when", metavar="FILE",
                   help="start counting (and --duration) once FILE exists, at most "
                        f"{BEGIN_WAIT_S:g} s: the lab makes it as Locust's run starts, so "
                        "the sampler's own start-up is over by then")
    p.add_argument("--host", dest="hosts", action="append", default=[], metavar="NAME=NETNS",
                   help="a host: a network namespace (`ip netns list`) whose own sockets are "
                        "counted (repeatable; needs root)")
    p.add_argument("--class", dest="classes", action="append", default=[],
                   metavar="NAME=PORT|NAME=FROM,TO:PORT",
                   help="a connection class: sockets with this port at one end; with --host, "
                        "connections from host FROM to port PORT of host TO (repeatable)")
    p.add_argument("--proc", dest="procs", action="append", default=[], metavar="NAME=PID",
                   help="a component: PID and all its descendants (repeatable; a name "
                        "given twice sums the trees)")
    p.add_argument("--cpu-set", dest="cpu_sets", action="append", default=[],
                   metavar="NAME=CPUS:COMPONENT,...",
                   help="a CPU set and the components that run on it: column "
                        "foreign_cpu_NAME is the share of the set others used (repeatable)")
    p.add_argument("--backend", choices=sorted(BACKENDS), default="netlink",
                   help="how sockets are counted (netlink: cheapest, the default)")
    p.add_argument("--snapshot", metavar="DIR",
                   help="write raw ss -tanp, ss -s, netstat -tan, sockstat into DIR and exit")
    return p


def began(path: str, stop: _SignalStop) -> bool:
    """Until `path` exists (True), or a signal or BEGIN_WAIT_S comes first (False)."""
    deadline = time.monotonic() + BEGIN_WAIT_S
    while not os.path.exists(path):
        if stop.wait(0.01) or time.monotonic() > deadline:
            return False
    return True


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.snapshot:
        for path in snapshot(args.snapshot).values():
            print(path)
        return 0
    if not args.out:
        parser.error("--out FILE.csv is required (or --snapshot DIR)")
    if args.interval <= 0 or (args.duration is not None and args.duration <= 0):
        parser.error("--interval and --duration must be > 0")
    try:
        hosts = parse_hosts(args.hosts)
        classes = (parse_host_classes(args.classes, hosts) if hosts
                   else parse_classes(args.classes))
        procs = parse_procs(args.procs)
        sampler = Sampler(classes, procs, args.out, args.interval, backend=args.backend,
                          hosts=hosts, cpu_sets=parse_cpu_sets(args.cpu_sets, procs))
    except (ValueError, OSError) as e:
        parser.error(str(e))
    for name, pids in procs.items():
        for pid in pids:
            if not os.path.exists(f"/proc/{pid}"):
                print(f"sampler: --proc {name}={pid}: no such process (its columns stay "
                      "empty)", file=sys.stderr)
    stop = _SignalStop()
    signal.signal(signal.SIGTERM, stop.set)
    signal.signal(signal.SIGINT, stop.set)
    try:
        if args.begin_when and not began(args.begin_when, stop):
            print(f"sampler: {args.begin_when} never came: no rows", file=sys.stderr)
            return 0
        sampler.run(stop_event=stop, duration=args.duration)
    finally:
        stop.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
