"""sampler_cost - what the sampler costs per host with ~25,000 TIME_WAIT sockets there.

A benchmark, not a test. Makes a lab network of four hosts (benchmarks/sandbox/hosts.py:
client, proxy, app, redis, each a network namespace; on the connecting hosts
a wide ip_local_port_range, tcp_max_tw_buckets above the target and
tcp_tw_reuse=0, set inside them only) and fills two of them with N TIME_WAIT
sockets each, as the proxy stages make them: the client host toward the
app's port 8000 and the app host toward Redis's port 6379, the connecting
side closing first (bounded by count and time, topped up while the
measurement runs since TIME_WAIT lasts 60 s). Then:

  1. times one call of each way to count sockets on the client host
     (/proc/net/sockstat, the sampler's netlink dumps, `ss` filtered and not,
     `netstat -tan`, psutil.net_connections());
  2. runs the sampler over the four hosts (--host, classes by host pair, as
     the lab runs it) at 1 Hz for S seconds and reports its CPU (user+system,
     its children included) as percent of one core, measured from outside
     with psutil, in all and per host that holds N TIME_WAIT (the two
     nearly empty hosts' share is charged to them: an upper bound);
  3. optionally (--single S) the one-namespace sampler inside the client
     host, and (--compare-ss S) the hosts sampler with --backend ss.

The network and every process in it are removed on exit, error, Ctrl-C and
SIGTERM (hosts.Network).

USAGE: sudo .venv/bin/python -m benchmarks.studies.sampler_cost [--tw N] [--estab N]
              [--seconds S] [--interval S] [--single S] [--compare-ss S]
              [--repeat N] [--keep DIR]

   eg,
       .venv/bin/python -m benchmarks.studies.sampler_cost --tw 25000 --seconds 30
       .venv/bin/python -m benchmarks.studies.sampler_cost --single 20   # + one namespace
       .venv/bin/python -m benchmarks.studies.sampler_cost --estab 200  # + 200 open per host

   Exit status 0 when the hosts sampler stayed within the target per host, 1
   when not.

REQUIREMENTS: Linux, root, `ip` and `ss` (iproute2); `netstat` (net-tools) is
   timed when present. Target: <= 2% of one core per host at 1 Hz with 25,000
   TIME_WAIT on it.
"""

from __future__ import annotations

import argparse
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

from benchmarks.capture import csvfile, kernel, loop
from benchmarks.sandbox import hosts, procs
from benchmarks.stages import ROOT

TARGET_PCT = 2.0
# (connecting host, listening host, port): each fills the connecting host's table
FILLS = {"front": ("client", "app", 8000), "redis": ("app", "redis", 6379)}
# the sampler's classes, as in a proxy stage (`upstream` stays empty here)
CLASSES = {"front": ("client", "app", 8000), "upstream": ("proxy", "app", 8001),
           "redis": ("app", "redis", 6379)}
SINGLE_CLASSES = {"redis": 6379, "upstream": 8001, "front": 8000}


# --- a filler, run on the connecting host -------------------------------------------

def _tw() -> int:
    return kernel.read_sockstat()["tw"]


def fill(listen_ns: str, address: str, port: int, target: int, estab: int,
         fill_seconds: float, keep_seconds: float) -> int:
    """Hold `estab` connections open to address:port, make `target` TIME_WAIT sockets
    here (this host closes first), then keep them topped up.

    Runs on the connecting host; its listener is made inside `listen_ns` (a
    socket stays in the namespace it was made in), so one process drives
    both ends. Bounded: at most 4 * target connections, fill_seconds +
    keep_seconds of time, and it stops when its parent goes away.
    """
    parent = os.getppid()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 2 * estab + 64:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 2 * estab + 64), hard))
    with kernel.in_netns(listen_ns):
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((address, port))
        listener.listen(128)
    made, cap = 0, 4 * target
    start = time.monotonic()
    held = []
    for _ in range(estab):   # ESTABLISHED among the TIME_WAIT, as under a load test
        held.append(socket.create_connection((address, port), timeout=5))
        held.append(listener.accept()[0])

    def churn(count: int) -> None:
        nonlocal made
        for _ in range(min(count, cap - made)):
            client = socket.create_connection((address, port), timeout=5)
            server, _ = listener.accept()
            client.close()      # this end goes to TIME_WAIT
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


# --- one call of each, on the client host ---------------------------------------------

def _cpu_now() -> float:
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def time_calls(port: int, repeat: int) -> list[dict]:
    """Median wall and CPU (own + children) of one call of each way to count sockets."""
    import psutil

    ss = shutil.which("ss") or "ss"
    netstat = shutil.which("netstat") or shutil.which("netstat", path="/usr/sbin:/sbin:/bin")
    ports = list(SINGLE_CLASSES.values())
    diag = kernel.DiagCounter()
    full = loop.Sampler(SINGLE_CLASSES, {}, os.devnull, 1.0)
    full.prime()

    def run(cmd: list[str]) -> int:
        return subprocess.run(cmd, capture_output=True, check=True).stdout.count(b"\n")

    either = f"( sport = :{port} or dport = :{port} )"
    calls = [
        ("/proc/net/sockstat, read and parse", lambda: kernel.read_sockstat()),
        ("netlink dump TIME_WAIT + ESTABLISHED, counts (sampler)", lambda: diag.count(ports)),
        ("netlink dump TIME_WAIT only", lambda: diag.count(ports, [kernel.TCP_TIME_WAIT])),
        ("netlink dump ESTABLISHED only", lambda: diag.count(ports, [kernel.TCP_ESTABLISHED])),
        ("/proc/PID/stat of every process (sampler)", kernel.scan_processes),
        ("one whole sample, 3 classes (sampler)", full.sample),
        ("ss -Htan state time-wait '( sport = :P or dport = :P )'", lambda: run(
            [ss, "-Htan", "state", "time-wait", either])),
        ("ss filtered x3 per class (tw client, tw server, estab)", lambda: [run(
            [ss, "-Htan", "state", st, flt]) for st, flt in (
                ("time-wait", f"dport = :{port}"), ("time-wait", f"sport = :{port}"),
                ("established", f"dport = :{port}"))]),
        ("ss -Htan state time-wait, parsed once (--backend ss)",
         lambda: kernel.SsCounter().count(ports, [kernel.TCP_TIME_WAIT])),
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


# --- outside: the network and the measurement ----------------------------------------

def host_tw(net: hosts.Network, role: str) -> int:
    with kernel.in_netns(net.namespace(role)):
        return kernel.read_sockstat("/proc/thread-self/net/sockstat")["tw"]


def rows(path: Path) -> list[dict]:
    """The sampler's complete rows, each cell as written (ints stay ints)."""
    return csvfile.rows(path, cast=csvfile.number)


def measure_sampler(label: str, cmd: list[str], out: Path, workdir: Path, seconds: float,
                    started: list, show: str) -> dict:
    """Run a sampler command for `seconds`; its CPU seen from outside, from the first row."""
    import psutil

    log = workdir / f"sampler-{label}.log"
    proc = procs.start(cmd, log=log, cwd=ROOT)
    started.append(proc)
    deadline = time.monotonic() + 15
    while not rows(out):   # the first row: imports and start-up are not counted
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the sampler wrote no row; see {log}")
        time.sleep(0.05)
    me = psutil.Process(proc.pid)

    def cpu() -> float:
        t = me.cpu_times()
        return t.user + t.system + t.children_user + t.children_system

    c0, t0 = cpu(), time.monotonic()
    first = len(rows(out))
    print(f"  sampler {label}: pid {proc.pid}, measuring {seconds:g} s")
    mark = 0.0
    while (now := time.monotonic()) < t0 + seconds:
        if now - t0 >= mark:
            last = rows(out)[-1]
            print(f"    {now - t0:5.1f} s  tw_total={last.get('tw_total', ''):>6}  "
                  f"{show}={last.get(show, ''):>6}  "
                  f"cpu_sampler={last.get('cpu_sampler', ''):>5}%")
            mark += 5
        time.sleep(min(0.2, t0 + seconds - now))
    c1, t1 = cpu(), time.monotonic()
    proc.send_signal(signal.SIGTERM)
    code = proc.wait(timeout=10)
    window = rows(out)[first:]
    tws = [int(r["tw_total"]) for r in window]
    own = [float(r["cpu_sampler"]) for r in window if "cpu_sampler" in r]
    return {"label": label, "pct": (c1 - c0) / (t1 - t0) * 100, "seconds": t1 - t0,
            "rows": len(window), "tw_min": min(tws, default=0), "tw_max": max(tws, default=0),
            "own_pct": statistics.fmean(own) if own else float("nan"), "exit": code}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.studies.sampler_cost",
                                description="The sampler's CPU cost per host with N "
                                            "TIME_WAIT sockets on it.")
    p.add_argument("--tw", type=int, default=25000,
                   help="TIME_WAIT sockets on each filled host (25000)")
    p.add_argument("--estab", type=int, default=0,
                   help="also hold this many connections open per filled host")
    p.add_argument("--seconds", type=float, default=30.0, help="sampler run to measure (30)")
    p.add_argument("--interval", type=float, default=1.0, help="sampler interval (1.0)")
    p.add_argument("--single", type=float, default=0.0, metavar="S",
                   help="also run the one-namespace sampler in the client host for S s")
    p.add_argument("--compare-ss", type=float, default=0.0, metavar="S",
                   help="also run the hosts sampler with --backend ss for S seconds")
    p.add_argument("--repeat", type=int, default=3, help="calls per alternative (median)")
    p.add_argument("--keep", metavar="DIR", help="keep the sampler CSVs and logs in DIR")
    # internal: run on a host by the outer process
    p.add_argument("--fill", nargs=3, metavar=("LISTEN_NS", "ADDRESS", "PORT"),
                   help=argparse.SUPPRESS)
    p.add_argument("--fill-seconds", type=float, default=30.0, help=argparse.SUPPRESS)
    p.add_argument("--keep-seconds", type=float, default=0.0, help=argparse.SUPPRESS)
    p.add_argument("--time-calls", type=int, help=argparse.SUPPRESS)
    args = p.parse_args(argv)

    if args.fill:
        ns, address, port = args.fill
        return fill(ns, address, int(port), args.tw, args.estab, args.fill_seconds,
                    args.keep_seconds)
    if args.time_calls:
        print(json.dumps(time_calls(args.time_calls, args.repeat)))
        return 0
    if not 1000 <= args.tw <= 60000 or not 0 <= args.estab <= 60000 - args.tw:
        p.error("--tw between 1000 and 60000, --tw + --estab <= 60000 (one local port each)")
    ok, why = hosts.netns_available()
    if not ok:
        p.error(f"it makes network namespaces: {why}")
    return outer(args)


def outer(args) -> int:
    """Fill two hosts, time each way to count, run the sampler, print both tables."""
    started: list[subprocess.Popen] = []
    workdir = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="sampler-cost-"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        with cost_network(args.tw) as net:
            fillers = fill_hosts(net, args, workdir, started)
            tw_now = {role: host_tw(net, role) for role in hosts.ROLES}
            print(f"TIME_WAIT per host: {tw_now}")
            calls = time_calls_on_client(net, args.repeat)
            runs = run_samplers(net, args, workdir, started, fillers)
            print_calls(calls, tw_now["client"], args)
            print_runs(runs, args)
            if args.keep:
                print(f"\nCSVs, commands and logs kept in {workdir}")
            return 0 if runs[0]["per_host"] <= TARGET_PCT else 1
    except KeyboardInterrupt:
        print("interrupted; cleaning up", file=sys.stderr)
        return 130
    finally:
        for proc in reversed(started):
            procs.stop(proc)
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)


def cost_network(tw: int) -> hosts.Network:
    """The four hosts, each with a wide port range, room for `tw` TIME_WAIT and no reuse."""
    wide = {"net.ipv4.ip_local_port_range": "1024 65535",
            "net.ipv4.tcp_max_tw_buckets": str(max(131072, 2 * tw)),
            "net.ipv4.tcp_tw_reuse": "0"}
    return hosts.Network("cost", hosts.ROLES, sysctls={role: wide for role in hosts.ROLES})


def fill_hosts(net: hosts.Network, args, workdir: Path,
               started: list) -> dict[str, subprocess.Popen]:
    """A filler per FILLS entry, kept running (topping up) for the whole measurement;
    returns once each host holds at least 90% of --tw TIME_WAIT."""
    budget = 30 + 15 + args.seconds + args.single + args.compare_ss + 30
    fillers = {}
    for name, (src, dst, port) in FILLS.items():
        print(f"host {src}: filling {args.tw} TIME_WAIT toward {dst} "
              f"{net.address(dst)}:{port} ({src} closes first), {args.estab} held open")
        fillers[name] = procs.start(
            [*net.prefix(src), sys.executable, "-m", "benchmarks.studies.sampler_cost",
             "--fill", net.namespace(dst), net.address(dst), str(port),
             "--tw", str(args.tw), "--estab", str(args.estab),
             "--fill-seconds", "40", "--keep-seconds", f"{budget:g}"],
            log=workdir / f"filler-{name}.log", cwd=ROOT)
        started.append(fillers[name])
    deadline = time.monotonic() + 60
    for name in FILLS:
        log = workdir / f"filler-{name}.log"
        while "fill" not in (log.read_text() if log.exists() else ""):
            if fillers[name].poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the filler did not finish: {log.read_text()}")
            time.sleep(0.1)
        print("  " + log.read_text().strip())
    for role in loaded_hosts():
        if host_tw(net, role) < 0.9 * args.tw:
            raise RuntimeError(f"only {host_tw(net, role)} TIME_WAIT on {role}; "
                               f"see {workdir}")
    return fillers


def loaded_hosts() -> list[str]:
    """The hosts the fillers fill: the connecting side of each FILLS entry."""
    return [src for src, _, _ in FILLS.values()]


def time_calls_on_client(net: hosts.Network, repeat: int) -> list[dict]:
    """`--time-calls` run on the client host: each way to count, timed once (median)."""
    print(f"timing one call of each on the client host (median of {repeat})")
    return json.loads(subprocess.run(
        [*net.prefix("client"), sys.executable, "-m", "benchmarks.studies.sampler_cost",
         "--time-calls", "8000", "--repeat", str(repeat)], capture_output=True, text=True,
        check=True, cwd=ROOT).stdout)


def run_samplers(net: hosts.Network, args, workdir: Path, started: list,
                 fillers: dict[str, subprocess.Popen]) -> list[dict]:
    """The hosts sampler (netlink), then the one-namespace one and the hosts one with
    `ss` if asked; the result of each (measure_sampler's)."""
    filler_pids = {"filler": [f.pid for f in fillers.values()]}
    loaded = len(loaded_hosts())

    def hosts_run(label: str, seconds: float, backend: str) -> dict:
        out = workdir / f"sampler-{label}.csv"
        cmd = loop.command(out, CLASSES, filler_pids, args.interval,
                           backend=backend, hosts=net.names())
        (workdir / f"sampler-{label}.cmd").write_text(" ".join(cmd) + "\n")
        result = measure_sampler(label, cmd, out, workdir, seconds, started,
                                 "tw_front_client")
        result.update(hosts=len(net.names()), loaded=loaded)
        return result

    runs = [hosts_run("hosts", args.seconds, "netlink")]
    if args.single > 0:
        out = workdir / "sampler-single.csv"
        cmd = loop.command(out, SINGLE_CLASSES, filler_pids, args.interval,
                           netns=net.namespace("client"))
        result = measure_sampler("single", cmd, out, workdir, args.single, started,
                                 "tw_front_client")
        runs.append({**result, "hosts": 1, "loaded": 1})
    if args.compare_ss > 0:
        runs.append(hosts_run("hosts-ss", args.compare_ss, "ss"))
    for r in runs:
        r["per_host"] = r["pct"] / r["loaded"]
    return runs


def print_calls(calls: list[dict], tw_client: int, args) -> None:
    """The table of one call of each way to count, on the client host."""
    print()
    print(f"one call each on the client host, {tw_client} TIME_WAIT + "
          f"{args.estab} connections held (median of {args.repeat}):")
    print(f"  {'call':58} {'wall ms':>8} {'cpu ms':>8}")
    for c in calls:
        if c["wall_ms"] is None:
            print(f"  {c['call']:58} {'(not installed)':>17}")
        else:
            print(f"  {c['call']:58} {c['wall_ms']:8.1f} {c['cpu_ms']:8.1f}")


def print_runs(runs: list[dict], args) -> None:
    """The table of the sampler's cost per run, against TARGET_PCT per loaded host."""
    print()
    print(f"the sampler at {1 / args.interval:g} Hz, CPU incl. children, % of one core "
          f"({args.tw} TIME_WAIT on each loaded host):")
    print(f"  {'run':9} {'hosts':>5} {'loaded':>6} {'seconds':>7} {'rows':>5} "
          f"{'TIME_WAIT min..max':>19} {'cost %':>7} {'per loaded host %':>17}  target")
    for r in runs:
        ok = "ok" if r["per_host"] <= TARGET_PCT else "OVER"
        print(f"  {r['label']:9} {r['hosts']:5d} {r['loaded']:6d} {r['seconds']:7.1f} "
              f"{r['rows']:5d} {r['tw_min']:>9}..{r['tw_max']:<9} {r['pct']:7.2f} "
              f"{r['per_host']:17.2f}  <= {TARGET_PCT:g}% {ok}")
    print("  (per loaded host: the whole cost over the hosts holding the TIME_WAIT; "
          "the nearly empty hosts' share is in it)")

if __name__ == "__main__":
    sys.exit(main())
