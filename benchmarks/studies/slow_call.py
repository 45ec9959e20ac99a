"""slow_call: one slow call among fast ones, on each server (issue 43, point 2).

    python -m benchmarks.studies.slow_call [--seconds 10] [--repeats 3] [--json FILE]

Each server of the lab's stages 8, 3t and 9 serves a stand-in app (`app` below): a
request to /slow waits SLOW_S seconds in a call that releases the GIL, as a wait on
Redis a hop away or on a slow query does; any other path answers at once. Two `wrk`
run against it together for --seconds: SLOW_CONNECTIONS connections asking /slow
back to back, FAST_CONNECTIONS asking /fast. The server gets the last CPU, wrk the
others, as in the lab. The servers, in turn, --repeats times over:

- granian, as stage 9 runs it (`--blocking-threads 1`), and with 8 blocking threads;
- gunicorn's gevent worker with gunicorn/today.conf.py (stage 8's);
- gunicorn's gthread worker with gunicorn/gthread.conf.py (stage 3t's).

Prints, per server, the fast requests' rate, p50 and p99 and the slow ones' rate,
each as its geometric mean over the repeats with its 95% interval (stats.interval);
--json writes every run. The app is a stand-in, so the figures say how each server
schedules a wait, not what the chat service costs (lab 15 measures that).

Requirements: wrk (`make setup` installs it), the lab's .venv. About (--seconds + 3 s)
per server and repeat: 4 servers x 3 repeats at 10 s is about 3 minutes.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.analysis import stats
from benchmarks.sandbox import procs
from benchmarks.stages import ROOT

SLOW_S = 0.2
SLOW_CONNECTIONS, FAST_CONNECTIONS = 4, 20
APP = "benchmarks.studies.slow_call:app"
GRANIAN = ["granian", "--interface", "wsgi", "--workers", "1", "--no-ws",
           "--host", "127.0.0.1", "--port", "{port}"]
SERVERS = {
    "granian, 1 blocking thread (stage 9)": [*GRANIAN, "--blocking-threads", "1", APP],
    "granian, 8 blocking threads": [*GRANIAN, "--blocking-threads", "8", APP],
    "gunicorn gevent (stage 8)": ["gunicorn", "-c", "gunicorn/today.conf.py",
                                  "--no-control-socket", "-b", "127.0.0.1:{port}", APP],
    "gunicorn gthread (stage 3t)": ["gunicorn", "-c", "gunicorn/gthread.conf.py",
                                    "--no-control-socket", "-b", "127.0.0.1:{port}", APP],
}
UNITS = {"us": 0.001, "ms": 1.0, "s": 1000.0}


def app(environ, start_response):
    """The stand-in: /slow waits SLOW_S s (time.sleep releases the GIL, and gevent's
    worker patches it to yield), anything else answers at once."""
    if environ.get("PATH_INFO") == "/slow":
        time.sleep(SLOW_S)
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "2")])
    return [b"ok"]


def parse_wrk(text: str) -> dict:
    """Requests a second and, with --latency, p50 and p99 in ms, from wrk's output."""
    found = {"rps": float(re.search(r"Requests/sec:\s+([\d.]+)", text)[1])}
    for name, line in (("p50_ms", "50%"), ("p99_ms", "99%")):
        match = re.search(rf"^\s+{line}\s+([\d.]+)(us|ms|s)\s*$", text, re.M)
        if match:
            found[name] = round(float(match[1]) * UNITS[match[2]], 2)
    return found


def measure(argv: list[str], seconds: float, cpus: tuple[str, str], log: Path) -> dict:
    """One server, loaded by both wrk at once; its figures."""
    port = procs.free_port()
    exe = procs.tool(argv[0], procs.environment_bin("current"))
    server = procs.start(["taskset", "-c", cpus[0], exe, *[a.format(port=port)
                                                          for a in argv[1:]]],
                         log=log, env=procs.child_env(), cwd=ROOT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while not procs.answers(f"{url}/fast"):
            if server.poll() is not None or time.monotonic() > deadline:
                raise procs.ServiceError(f"{argv[0]} did not answer: see {log}")
            time.sleep(0.1)
        wrk = ["taskset", "-c", cpus[1], procs.require_binary("wrk", "apt-get install wrk"),
               "-t1", f"-d{seconds:g}s"]
        slow = subprocess.Popen([*wrk, f"-c{SLOW_CONNECTIONS}", f"{url}/slow"],
                                stdout=subprocess.PIPE, text=True)
        fast = subprocess.run([*wrk, f"-c{FAST_CONNECTIONS}", "--latency", f"{url}/fast"],
                              capture_output=True, text=True, timeout=seconds + 30)
        slow_out = slow.communicate(timeout=seconds + 30)[0]
    finally:
        procs.stop(server)
    fast_figures = parse_wrk(fast.stdout)
    return {"fast_rps": fast_figures["rps"], "fast_p50_ms": fast_figures.get("p50_ms"),
            "fast_p99_ms": fast_figures.get("p99_ms"), "slow_rps": parse_wrk(slow_out)["rps"]}


def placement() -> tuple[str, str]:
    """(the server's CPU, wrk's CPUs): the last CPU, and the others (all on one CPU)."""
    cpus = sorted(os.sched_getaffinity(0))
    return str(cpus[-1]), ",".join(map(str, cpus[:-1] or cpus))


def table(runs: list[dict]) -> str:
    """A row per server: each figure's geometric mean over the repeats with its 95%
    interval (stats.interval: times and rates are positive, their interval on the log
    scale), or the one value of a single run."""
    columns = ("fast_rps", "fast_p50_ms", "fast_p99_ms", "slow_rps")
    lines = ["| server | fast req/s | fast p50 ms | fast p99 ms | slow req/s |",
             "|---|---|---|---|---|"]
    for name in SERVERS:
        cells = []
        for column in columns:
            found = stats.interval(r[column] for r in runs if r["server"] == name)
            if found["mean"] is None:
                cells.append("-")
            elif found["low"] is None:
                cells.append(figure(found["mean"]))
            else:
                cells.append(f"{figure(found['mean'])} [{figure(found['low'])}, "
                             f"{figure(found['high'])}]")
        lines.append(f"| {name} | {' | '.join(cells)} |")
    return "\n".join(lines)


def figure(value: float) -> str:
    """Three significant digits, and whole numbers from 100 on (33,000, not 3.3e+04)."""
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.studies.slow_call",
                                     description="One slow call among fast ones, per server.")
    parser.add_argument("--seconds", type=float, default=10.0, help="per run (10)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per server (3)")
    parser.add_argument("--json", dest="json_out", type=Path, help="every run, here")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.seconds < 1 or args.repeats < 1:
        parser.error("--seconds must be at least 1 and --repeats at least 1")
    cpus, runs = placement(), []
    with tempfile.TemporaryDirectory(prefix="slow-call-") as logs:
        for repeat in range(1, args.repeats + 1):
            for name, server in SERVERS.items():  # interleaved: a drift hits each alike
                figures = measure(server, args.seconds, cpus, Path(logs) / "server.log")
                runs.append({"server": name, "repeat": repeat, **figures})
                print(f"slow_call: {name}, repeat {repeat}: {figures}", flush=True)
    if args.json_out:
        args.json_out.write_text(json.dumps(runs, indent=1) + "\n")
    print(table(runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
