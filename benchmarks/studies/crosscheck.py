"""Locust against wrk on the book's request: does Locust measure the server?

    python -m benchmarks.studies.crosscheck [--stages 1,3,5] [--duration 20] [--rounds 2]

For each stage: the stage up (as `lab up`), then, turn about on the client host,
`KeyValueUser` (100 users, no think time: `lab book`'s load) and wrk on the same
URL (`GET /kv/bench`), each for --duration seconds, --rounds times. wrk sends
the request Locust sends, headers included (the app's HTTP parser pays for
every header line), in three forms:

  wrk          -t100 -c100: a thread per connection, 100 clients that each
               wait for their answer on their own, as Locust's users (and
               siege's threads, the book's tool) do. The one the target
               compares with.
  wrk -t1      -t1 -c100, the usual form: one thread sends for all 100
               connections, so requests reach the server in bursts, which an
               eventlet worker serves more cheaply than requests that arrive
               one by one (stage 3 here: about 25% more req/s, with a p99 over
               a second and timeouts: some connections wait while others are
               served again and again)
  wrk +1 ms    as `wrk`, each connection pausing 1 ms before its next request,
               about what Locust's own work costs between two requests of a
               user

Between two runs it waits for the last one's TIME_WAIT to go (up to 60 s): in
stages 0 and 1 every request leaves one toward Redis, and a tool that starts
with another's 10,000 pays for them. Prints a table and writes `crosscheck.csv`
in a `results/<stamp>-crosscheck` run.
"""

from __future__ import annotations

import argparse
import csv
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks import stages
from benchmarks.analysis import metrics
from benchmarks.run import cli, options, results, runner
from benchmarks.run.cli import say
from benchmarks.sandbox import procs, sandbox
from benchmarks.studies import book

CROSSCHECK_CSV = "crosscheck.csv"
KEY = "bench"  # KeyValueUser.key
PAUSE_MS = 1
DRAINED = 1000  # TIME_WAIT left on the stage's hosts before the next tool (of 28,232 ports)
WRK_HINT = "apt-get install wrk (or `make setup`, which does it)"
DEFAULT_STAGES = ("1", "3", "5")

@dataclass(frozen=True)
class Wrk:
    """One form of the wrk run: its name, its CSV column prefix, threads, pause (ms)."""

    name: str
    column: str
    threads: int
    pause_ms: int


WRKS = (Wrk("wrk", "wrk", book.CLIENTS, 0), Wrk("wrk -t1", "wrk_t1", 1, 0),
        Wrk("wrk +1 ms", "wrk_paused", book.CLIENTS, PAUSE_MS))
COLUMNS = ("stage", "round", "locust_rps", "locust_p50_ms",
           *(f"{w.column}_{k}" for w in WRKS for k in ("rps", "p50_ms", "timeouts", "ratio")))


def request_headers() -> dict[str, str]:
    """The headers KeyValueUser sends besides Host (tests/lab/test_crosscheck.py
    captures a real request and compares)."""
    from geventhttpclient.client import HTTPClient

    # geventhttpclient's User-Agent, and the Accept-Encoding Locust's FastHttpSession adds
    return {"User-Agent": HTTPClient.DEFAULT_HEADERS["User-Agent"],
            "Accept-Encoding": "gzip, deflate, br"}


def wrk_script(pause_ms: int) -> str:
    """wrk's Lua: Locust's headers, and a pause before each request when pause_ms > 0."""
    lines = [f'wrk.headers["{k}"] = "{v}"' for k, v in request_headers().items()]
    if pause_ms:
        lines.append(f"function delay() return {pause_ms} end")
    return "\n".join(lines) + "\n"


def parse_wrk(text: str) -> dict:
    """req/s, p50 (ms) and timeouts from `wrk --latency`'s output."""
    rps = re.search(r"Requests/sec:\s+([\d.]+)", text)
    if not rps:
        raise cli.StageFailed(f"wrk printed no Requests/sec:\n{text[-1000:]}")
    p50 = re.search(r"^\s+50%\s+([\d.]+)(us|ms|s)\b", text, re.M)
    scale = {"us": 0.001, "ms": 1.0, "s": 1000.0}
    timeouts = re.search(r"timeout (\d+)", text)
    return {"rps": float(rps.group(1)),
            "p50_ms": round(float(p50.group(1)) * scale[p50.group(2)], 2) if p50 else None,
            "timeouts": int(timeouts.group(1)) if timeouts else 0}


def run_wrk(client: list[str], url: str, seconds: int, wrk: Wrk, script: Path,
            log: Path) -> dict:
    cmd = [*client, procs.require_binary("wrk", WRK_HINT), f"-t{wrk.threads}",
           f"-c{book.CLIENTS}", f"-d{seconds}s", "--latency", "-s", str(script),
           f"{url}/kv/{KEY}"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 60)
    log.write_text(f"$ {' '.join(cmd)}\n{done.stdout}{done.stderr}")
    return parse_wrk(done.stdout)


def run_locust(client: list[str], url: str, seconds: int, out_dir: Path) -> dict:
    opts = book.run_options()
    cmd = runner.locust_command(url, opts, seconds, (book.USER_CLASS,), out_dir / "locust")
    with open(out_dir / "locust.log", "w") as log:
        subprocess.run([*client, *cmd], stdout=log, stderr=subprocess.STDOUT,
                       env=procs.child_env(), cwd=stages.ROOT, timeout=seconds + 60)
    totals = metrics.locust_totals(out_dir)
    if not totals.get("requests"):
        raise cli.StageFailed(f"Locust answered no requests; see {out_dir / 'locust.log'}")
    return {"rps": round(totals["rps"], 1), "p50_ms": totals["p50_ms"]}


def settle(box, pause: float) -> None:
    """`pause` seconds, and until the last run's TIME_WAIT is gone (up to 60 s): in
    stages 0 and 1 each request leaves one toward Redis, and a tool that starts with
    the other's thousands would pay for them (lab 01)."""
    time.sleep(pause)
    sandbox.wait_for_time_wait_drain(DRAINED, say=say, count=box.time_wait)


def crosscheck_stage(stage: stages.Stage, opts: options.RunOptions, run_dir: Path,
                     rounds: int, seconds: int, pause: float, scripts: dict) -> list[dict]:
    found = []
    with runner.running_stage(stage, opts) as (box, stack, _users):
        client = box.prefix("client")
        say(f"stage {stage.key} {stage.slug} is up: {stack.url} ({box.describe()})")
        for n in range(1, rounds + 1):
            out = run_dir / stage.dirname / f"round-{n}"
            out.mkdir(parents=True)
            say(f"  round {n}/{rounds}: Locust, {seconds} s")
            loc = run_locust(client, stack.url, seconds, out)
            row = {"stage": stage.key, "round": n, "locust_rps": loc["rps"],
                   "locust_p50_ms": loc["p50_ms"]}
            for wrk in WRKS:
                settle(box, pause)
                say(f"  round {n}/{rounds}: {wrk.name}, {seconds} s")
                got = run_wrk(client, stack.url, seconds, wrk, scripts[wrk.pause_ms],
                              out / f"{wrk.column}.txt")
                row.update({f"{wrk.column}_{k}": v for k, v in got.items()})
                row[f"{wrk.column}_ratio"] = round(loc["rps"] / got["rps"], 3)
            settle(box, pause)
            say("  " + line(row))
            found.append(row)
    return found


def line(row: dict) -> str:
    """Locust, then each wrk with Locust's rate over it."""
    parts = [f"stage {row['stage']:<3} Locust {row['locust_rps']:>7.1f} req/s "
             f"(p50 {row['locust_p50_ms']} ms)"]
    for w in WRKS:
        parts.append(f"{w.name} {row[w.column + '_rps']:>7.1f} (p50 {row[w.column + '_p50_ms']}"
                     f" ms) Locust/wrk {row[w.column + '_ratio']:.2f}")
    return " | ".join(parts)


def write_csv(run_dir: Path, rows: list[dict]) -> Path:
    path = run_dir / CROSSCHECK_CSV
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    return path


def run(args) -> int:
    keys = [k.strip() for k in args.stages.split(",") if k.strip()]
    chosen = [stages.get(k) for k in keys]  # KeyError: cli.main says which
    if args.duration < 1 or args.rounds < 1:
        raise options.OptionsError("--duration and --rounds must be at least 1")
    procs.require_binary("wrk", WRK_HINT)
    opts = options.RunOptions(stages=tuple(chosen), sandbox=cli.resolve_sandbox(args.sandbox),
                              apply_host_sysctls=args.apply_host_sysctls,
                              results=Path(args.results), server_cpus=args.server_cpus,
                              client_cpus=args.client_cpus)
    runner.refuse_if_up(opts.results)
    run_dir = results.new_run(opts.results, suffix="crosscheck")
    rows = []
    with tempfile.TemporaryDirectory(prefix="ftl-wrk-") as tmp:
        scripts = {}
        for pause in sorted({w.pause_ms for w in WRKS}):
            scripts[pause] = Path(tmp) / f"pause-{pause}ms.lua"
            scripts[pause].write_text(wrk_script(pause))
        for stage in chosen:
            rows += crosscheck_stage(stage, opts, run_dir, args.rounds, args.duration,
                                     args.pause, scripts)
            write_csv(run_dir, rows)
    say("")
    for row in rows:
        say(line(row))
    say(f"\n{results.rel(run_dir / CROSSCHECK_CSV)}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.studies.crosscheck",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--stages", default=",".join(DEFAULT_STAGES),
                   help="stage keys, comma-separated (default: 1,3,5)")
    p.add_argument("--duration", type=int, default=20, help="seconds per tool and round")
    p.add_argument("--rounds", type=int, default=2, help="Locust then wrk, this many times")
    p.add_argument("--pause", type=float, default=5.0,
                   help="seconds between two tools' runs (default 5)")
    cli.add_sandbox_options(p)
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    return cli.main("crosscheck", run, args, leftovers=runner.leftovers)


if __name__ == "__main__":
    sys.exit(main())
