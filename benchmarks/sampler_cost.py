"""sampler_cost - what the sampler costs with ~25,000 TIME_WAIT sockets present.

A benchmark, not a test. Makes a throw-away network namespace (lo up; a wide
ip_local_port_range, tcp_max_tw_buckets above the target and tcp_tw_reuse=0,
set inside it only), fills it with N TIME_WAIT sockets on loopback (a small
server and a client that closes first; bounded by count and time, topped up
while the measurement runs since TIME_WAIT lasts 60 s), then:

  1. times one call of each way to count sockets, inside the namespace
     (/proc/net/sockstat, the sampler's netlink dumps, `ss` filtered and not,
     `netstat -tan`, psutil.net_connections());
  2. runs the sampler (python -m benchmarks.sampler) at 1 Hz for S seconds in
     the namespace and reports its CPU (user+system, its children included)
     as percent of one core, measured from outside with psutil, beside the
     sampler's own cpu_sampler column and the TIME_WAIT count it saw;
  3. optionally the same with `--backend ss`, for comparison.

The namespace and every process it started are removed on exit, error,
Ctrl-C and SIGTERM.

USAGE: sudo .venv/bin/python -m benchmarks.sampler_cost [--tw N] [--estab N]
              [--seconds S] [--interval S] [--compare-ss S] [--repeat N] [--keep DIR]

   eg,
       .venv/bin/python -m benchmarks.sampler_cost            # 25,000 TW, 30 s
       .venv/bin/python -m benchmarks.sampler_cost --compare-ss 10   # and --backend ss
       .venv/bin/python -m benchmarks.sampler_cost --estab 200  # + 200 open connections

   Exit status 0 when the sampler stayed within the target, 1 when not.

REQUIREMENTS: Linux, root, `ip` and `ss` (iproute2); `netstat` (net-tools) is
   timed when present. Target: <= 2% of one core at 1 Hz with 25,000 TIME_WAIT.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import procs, sampler

ROOT = Path(__file__).resolve().parent.parent
PORT = 8000          # the filler's server, inside the namespace
TARGET_PCT = 2.0


# --- inside the namespace -------------------------------------------------------

def classes(port: int) -> dict[str, int]:
    """Three classes as in the proxy stages; only `front` has sockets here."""
    return {"redis": 6379, "upstream": port + 1, "front": port}


def _tw() -> int:
    return sampler.read_sockstat()["tw"]


def fill(port: int, target: int, estab: int, fill_seconds: float, keep_seconds: float) -> int:
    """Hold `estab` connections open, make `target` TIME_WAIT sockets (client
    closes first), then keep them topped up.

    Bounded: at most 4 * target connections, fill_seconds + keep_seconds of
    time, and it stops when its parent goes away.
    """
    parent = os.getppid()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 2 * estab + 64:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 2 * estab + 64), hard))
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(128)
    made, cap = 0, 4 * target
    start = time.monotonic()
    held = []
    for _ in range(estab):   # ESTABLISHED among the TIME_WAIT, as under a load test
        held.append(socket.create_connection(("127.0.0.1", port), timeout=5))
        held.append(listener.accept()[0])

    def churn(count: int) -> None:
        nonlocal made
        for _ in range(min(count, cap - made)):
            client = socket.create_connection(("127.0.0.1", port), timeout=5)
            server, _ = listener.accept()
            client.close()      # the client's end goes to TIME_WAIT
            server.close()
            made += 1

    try:
        while _tw() < target and made < cap and time.monotonic() - start < fill_seconds:
            churn(min(1000, target - _tw()))
        print(f"filled: tw={_tw()} connections={made} in {time.monotonic() - start:.1f} s",
              flush=True)
        end = start + fill_seconds + keep_seconds
        while time.monotonic() < end and made < cap and os.getppid() == parent:
            churn(min(5000, max(0, target - _tw())))
            time.sleep(0.2)
    except OSError as e:   # e.g. out of local ports: say so, keep what was made
        print(f"fill stopped: {e} (tw={_tw()}, connections={made})", flush=True)
        while time.monotonic() < start + fill_seconds + keep_seconds and os.getppid() == parent:
            time.sleep(0.2)
    finally:
        for sock in held:
            sock.close()
        listener.close()
    return 0


def _cpu_now() -> float:
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def time_calls(port: int, repeat: int) -> list[dict]:
    """Median wall and CPU (own + children) of one call of each way to count sockets."""
    import psutil

    ss = shutil.which("ss") or "ss"
    netstat = shutil.which("netstat") or shutil.which("netstat", path="/usr/sbin:/sbin:/bin")
    ports = list(classes(port).values())
    diag = sampler.DiagCounter()
    full = sampler.Sampler(classes(port), {}, os.devnull, 1.0)
    full.prime()

    def run(cmd: list[str]) -> int:
        return subprocess.run(cmd, capture_output=True, check=True).stdout.count(b"\n")

    either = f"( sport = :{port} or dport = :{port} )"
    calls = [
        ("/proc/net/sockstat, read and parse", lambda: sampler.read_sockstat()),
        ("netlink dump TIME_WAIT + ESTABLISHED, counts (sampler)", lambda: diag.count(ports)),
        ("netlink dump TIME_WAIT only", lambda: diag.count(ports, [sampler.TCP_TIME_WAIT])),
        ("netlink dump ESTABLISHED only", lambda: diag.count(ports, [sampler.TCP_ESTABLISHED])),
        ("/proc/PID/stat of every process (sampler)", sampler.scan_processes),
        ("one whole sample, 3 classes (sampler)", full.sample),
        ("ss -Htan state time-wait '( sport = :P or dport = :P )'", lambda: run(
            [ss, "-Htan", "state", "time-wait", either])),
        ("ss filtered x3 per class (tw client, tw server, estab)", lambda: [run(
            [ss, "-Htan", "state", st, flt]) for st, flt in (
                ("time-wait", f"dport = :{port}"), ("time-wait", f"sport = :{port}"),
                ("established", f"dport = :{port}"))]),
        ("ss -Htan state time-wait, parsed once (--backend ss)",
         lambda: sampler.SsCounter().count(ports, [sampler.TCP_TIME_WAIT])),
        ("netstat -tan", (lambda: run([netstat, "-tan"])) if netstat else None),
        ("psutil.net_connections('tcp')", lambda: psutil.net_connections("tcp")),
    ]
    results = []
    for name, fn in calls:
        if fn is None:
            results.append({"call": name, "wall_ms": None, "cpu_ms": None})
            continue
        walls, cpus = [], []
        for _ in range(repeat):
            c0, t0 = _cpu_now(), time.perf_counter()
            fn()
            walls.append((time.perf_counter() - t0) * 1e3)
            cpus.append((_cpu_now() - c0) * 1e3)
        results.append({"call": name, "wall_ms": statistics.median(walls),
                        "cpu_ms": statistics.median(cpus)})
    full.close()
    diag.close()
    return results


# --- outside: the namespace and the measurement ----------------------------------

def sh(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, check=check)


def ns_tw(ns: str) -> int:
    out = sh("ip", "netns", "exec", ns, "cat", "/proc/net/sockstat").stdout
    line = next(x for x in out.splitlines() if x.startswith("TCP:")).split()
    return int(line[line.index("tw") + 1])


def rows(path: Path) -> list[dict]:
    if not path.exists():
        return []
    text = path.read_text()
    lines = text.splitlines()
    if not text.endswith("\n"):
        lines = lines[:-1]   # a row being written
    return list(csv.DictReader(lines)) if len(lines) > 1 else []


def measure_sampler(ns: str, workdir: Path, filler_pid: int, seconds: float, interval: float,
                    backend: str, started: list) -> dict:
    """Run the sampler in `ns` for `seconds`; its CPU seen from outside, from the first row."""
    import psutil

    out = workdir / f"sampler-{backend}.csv"
    cmd = sampler.command(out, classes(PORT), {"filler": filler_pid}, interval,
                          netns=ns, backend=backend)
    proc = procs.start(cmd, log=workdir / f"sampler-{backend}.log", cwd=ROOT)
    started.append(proc)
    deadline = time.monotonic() + 15
    while not rows(out):   # the first row: imports and start-up are not counted
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the sampler wrote no row; see {workdir}/sampler-{backend}.log")
        time.sleep(0.05)
    me = psutil.Process(proc.pid)

    def cpu() -> float:
        t = me.cpu_times()
        return t.user + t.system + t.children_user + t.children_system

    c0, t0 = cpu(), time.monotonic()
    first = len(rows(out))
    print(f"  sampler --backend {backend}: pid {proc.pid}, measuring {seconds:g} s")
    mark = 0.0
    while (now := time.monotonic()) < t0 + seconds:
        if now - t0 >= mark:
            last = rows(out)[-1]
            print(f"    {now - t0:5.1f} s  tw_total={last['tw_total']:>6}  "
                  f"tw_front_client={last['tw_front_client']:>6}  "
                  f"estab_front={last['estab_front']:>5}  "
                  f"cpu_sampler={last['cpu_sampler']:>5}%")
            mark += 5
        time.sleep(min(0.2, t0 + seconds - now))
    c1, t1 = cpu(), time.monotonic()
    proc.send_signal(signal.SIGTERM)
    code = proc.wait(timeout=10)
    window = rows(out)[first:]
    tws = [int(r["tw_total"]) for r in window]
    own = [float(r["cpu_sampler"]) for r in window if r["cpu_sampler"]]
    return {"backend": backend, "pct": (c1 - c0) / (t1 - t0) * 100, "seconds": t1 - t0,
            "rows": len(window), "tw_min": min(tws, default=0), "tw_max": max(tws, default=0),
            "own_pct": statistics.fmean(own) if own else float("nan"), "exit": code}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.sampler_cost",
                                description="The sampler's CPU cost with N TIME_WAIT sockets.")
    p.add_argument("--tw", type=int, default=25000, help="TIME_WAIT sockets to hold (25000)")
    p.add_argument("--estab", type=int, default=0,
                   help="also hold this many connections open (ESTABLISHED among the TIME_WAIT)")
    p.add_argument("--seconds", type=float, default=30.0, help="sampler run to measure (30)")
    p.add_argument("--interval", type=float, default=1.0, help="sampler interval (1.0)")
    p.add_argument("--compare-ss", type=float, default=0.0, metavar="S",
                   help="also run the sampler with --backend ss for S seconds")
    p.add_argument("--repeat", type=int, default=3, help="calls per alternative (median)")
    p.add_argument("--keep", metavar="DIR", help="keep the sampler CSVs and logs in DIR")
    # internal: run inside the namespace by the outer process
    p.add_argument("--fill", type=int, help=argparse.SUPPRESS)
    p.add_argument("--fill-seconds", type=float, default=20.0, help=argparse.SUPPRESS)
    p.add_argument("--keep-seconds", type=float, default=0.0, help=argparse.SUPPRESS)
    p.add_argument("--time-calls", type=int, help=argparse.SUPPRESS)
    args = p.parse_args(argv)

    if args.fill:
        return fill(args.fill, args.tw, args.estab, args.fill_seconds, args.keep_seconds)
    if args.time_calls:
        print(json.dumps(time_calls(args.time_calls, args.repeat)))
        return 0
    if not 1000 <= args.tw <= 60000 or not 0 <= args.estab <= 60000 - args.tw:
        p.error("--tw between 1000 and 60000, --tw + --estab <= 60000 (one local port each)")
    if os.geteuid() != 0 or not shutil.which("ip"):
        p.error("needs root and `ip` (iproute2): it makes a network namespace")
    return outer(args)


def outer(args) -> int:
    ns = f"ftl-sampler-cost-{os.getpid()}"
    started: list[subprocess.Popen] = []
    workdir = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="sampler-cost-"))
    workdir.mkdir(parents=True, exist_ok=True)
    py = sys.executable

    def on_term(*_):
        raise KeyboardInterrupt
    previous = signal.signal(signal.SIGTERM, on_term)
    made_ns = False
    try:
        sh("ip", "netns", "add", ns)
        made_ns = True
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        sh("ip", "netns", "exec", ns, "sysctl", "-q", "-w",
           "net.ipv4.ip_local_port_range=1024 65535",
           f"net.ipv4.tcp_max_tw_buckets={max(131072, 2 * args.tw)}",
           "net.ipv4.tcp_tw_reuse=0")
        budget = 20 + 10 + args.seconds + args.compare_ss + 30
        print(f"namespace {ns}: filling {args.tw} TIME_WAIT on 127.0.0.1:{PORT} "
              f"(client closes first), {args.estab} connections held open")
        filler = procs.start(
            ["ip", "netns", "exec", ns, py, "-m", "benchmarks.sampler_cost", "--fill", str(PORT),
             "--tw", str(args.tw), "--estab", str(args.estab), "--fill-seconds", "20",
             "--keep-seconds", f"{budget:g}"],
            log=workdir / "filler.log", cwd=ROOT)
        started.append(filler)
        deadline = time.monotonic() + 40
        log = workdir / "filler.log"
        while "fill" not in (log.read_text() if log.exists() else ""):
            if filler.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the filler did not finish: {log.read_text()}")
            time.sleep(0.1)
        print("  " + log.read_text().strip())
        tw = ns_tw(ns)
        if tw < 0.9 * args.tw:
            raise RuntimeError(f"only {tw} TIME_WAIT sockets; see {log}")

        print(f"timing one call of each (median of {args.repeat}), {ns_tw(ns)} TIME_WAIT present")
        out = sh("ip", "netns", "exec", ns, py, "-m", "benchmarks.sampler_cost",
                 "--time-calls", str(PORT), "--repeat", str(args.repeat)).stdout
        calls = json.loads(out)

        results = [measure_sampler(ns, workdir, filler.pid, args.seconds, args.interval,
                                   "netlink", started)]
        if args.compare_ss > 0:
            results.append(measure_sampler(ns, workdir, filler.pid, args.compare_ss,
                                           args.interval, "ss", started))

        print()
        print(f"one call each, {args.tw} TIME_WAIT + {args.estab} connections held, "
              f"in the namespace (median of {args.repeat}):")
        print(f"  {'call':58} {'wall ms':>8} {'cpu ms':>8}")
        for c in calls:
            if c["wall_ms"] is None:
                print(f"  {c['call']:58} {'(not installed)':>17}")
            else:
                print(f"  {c['call']:58} {c['wall_ms']:8.1f} {c['cpu_ms']:8.1f}")
        print()
        print(f"the sampler at {1 / args.interval:g} Hz, CPU incl. children, % of one core:")
        print(f"  {'backend':8} {'seconds':>7} {'rows':>5} {'TIME_WAIT min..max':>19} "
              f"{'cost %':>7} {'own col %':>9}  target")
        for r in results:
            ok = "ok" if r["pct"] <= TARGET_PCT else "OVER"
            print(f"  {r['backend']:8} {r['seconds']:7.1f} {r['rows']:5d} "
                  f"{r['tw_min']:>9}..{r['tw_max']:<9} {r['pct']:7.2f} {r['own_pct']:9.2f}  "
                  f"<= {TARGET_PCT:g}% {ok}")
        if args.keep:
            print(f"\nCSVs and logs kept in {workdir}")
        return 0 if results[0]["pct"] <= TARGET_PCT else 1
    except KeyboardInterrupt:
        print("interrupted; cleaning up", file=sys.stderr)
        return 130
    finally:
        for proc in reversed(started):
            procs.stop(proc)
        if made_ns:
            sh("ip", "netns", "del", ns, check=False)
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
        signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(main())
