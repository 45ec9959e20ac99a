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
with another's 10,000 pays for them. Around each run it reads where the time
went: the CPU of the stage's servers (their process trees) per request, and the
tool's own CPU (% of one core). Prints a table, then per stage and form the
Locust/wrk ratio as a geometric mean with its 95% interval over the rounds
(stats.interval, log scale), and writes
`crosscheck.csv` (a row per round) and `crosscheck-ratios.csv` in a
`results/<stamp>-crosscheck` run. `--forms wrk` runs only the like-for-like form.
"""

from __future__ import annotations

import argparse
import csv
import re
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks import stages
from benchmarks.analysis import metrics, stats
from benchmarks.capture import kernel, tables
from benchmarks.run import cli, locust_cli, options, results, runner
from benchmarks.run.cli import say
from benchmarks.sandbox import procs, sandbox
from benchmarks.studies import book

CROSSCHECK_CSV = "crosscheck.csv"
RATIOS_CSV = "crosscheck-ratios.csv"
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
# per tool: its req/s, p50; the servers' CPU per request (ms) and its own (% of one core)
COLUMNS = ("stage", "round", "locust_rps", "locust_p50_ms", "locust_server_ms",
           "locust_client_cpu",
           *(f"{w.column}_{k}" for w in WRKS for k in ("rps", "p50_ms", "timeouts", "ratio",
                                                        "server_ms", "client_cpu")))
RATIO_COLUMNS = ("stage", "form", "rounds", "ratio_gmean", "ratio_low", "ratio_high",
                 "locust_server_ms", "wrk_server_ms", "locust_client_cpu", "wrk_client_cpu")


class CpuMeter:
    """Where one tool's run spent CPU: the stage's servers (their process trees, wherever
    they run) and the tool itself (this process's waited-for children: `ip netns exec`
    and `taskset` exec it, so its CPU is theirs)."""

    def __init__(self, server_pids):
        self.servers = tables.Component("servers", server_pids)

    def __enter__(self):
        self._read(None)
        self.t0, self.kids0 = time.monotonic(), resource.getrusage(resource.RUSAGE_CHILDREN)
        return self

    def __exit__(self, *exc):
        self.seconds = time.monotonic() - self.t0
        kids = resource.getrusage(resource.RUSAGE_CHILDREN)
        spent = (kids.ru_utime - self.kids0.ru_utime) + (kids.ru_stime - self.kids0.ru_stime)
        self.client_cpu = round(spent / self.seconds * 100, 1)
        self.server_cpu = self._read(self.seconds)

    def _read(self, dt):
        stats = kernel.scan_processes()
        return self.servers.update(stats, kernel.children_of(stats), dt)[0]

    def figures(self, rps: float) -> dict:
        """server_ms: the servers' CPU ms per answered request; client_cpu: % of a core."""
        per = round(self.server_cpu * 10 / rps, 3) if self.server_cpu and rps else None
        return {"server_ms": per, "client_cpu": self.client_cpu}


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
    cmd = locust_cli.locust_command(url, opts, seconds, (book.USER_CLASS,), out_dir / "locust")
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
                     rounds: int, seconds: int, pause: float, scripts: dict,
                     forms: tuple[Wrk, ...] = WRKS) -> list[dict]:
    found = []
    with runner.running_stage(stage, opts) as (box, stack, _users):
        client, servers = box.prefix("client"), list(stack.pids().values())
        say(f"stage {stage.key} {stage.slug} is up: {stack.url} ({box.describe()})")
        for n in range(1, rounds + 1):
            out = run_dir / stage.dirname / f"round-{n}"
            out.mkdir(parents=True)
            say(f"  round {n}/{rounds}: Locust, {seconds} s")
            with CpuMeter(servers) as cpu:
                loc = run_locust(client, stack.url, seconds, out)
            row = {"stage": stage.key, "round": n, "locust_rps": loc["rps"],
                   "locust_p50_ms": loc["p50_ms"],
                   **{f"locust_{k}": v for k, v in cpu.figures(loc["rps"]).items()}}
            for wrk in forms:
                settle(box, pause)
                say(f"  round {n}/{rounds}: {wrk.name}, {seconds} s")
                with CpuMeter(servers) as cpu:
                    got = run_wrk(client, stack.url, seconds, wrk, scripts[wrk.pause_ms],
                                  out / f"{wrk.column}.txt")
                got.update(cpu.figures(got["rps"]))
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
        if row.get(w.column + "_rps") is None:
            continue
        parts.append(f"{w.name} {row[w.column + '_rps']:>7.1f} (p50 {row[w.column + '_p50_ms']}"
                     f" ms) Locust/wrk {row[w.column + '_ratio']:.2f}")
    return " | ".join(parts)


def ratios(rows: list[dict]) -> list[dict]:
    """Per stage and wrk form: Locust/wrk as a geometric mean with its 95% interval over
    the rounds (stats.interval),
    and the mean CPU figures of both tools (crosscheck-ratios.csv)."""
    out = []
    for key in dict.fromkeys(r["stage"] for r in rows):
        mine = [r for r in rows if r["stage"] == key]
        for w in WRKS:
            if mine[0].get(f"{w.column}_ratio") is None:
                continue
            iv = stats.interval(r[f"{w.column}_ratio"] for r in mine)
            mean = {k: stats.mean(r.get(k) for r in mine) for k in (
                "locust_server_ms", f"{w.column}_server_ms", "locust_client_cpu",
                f"{w.column}_client_cpu")}
            out.append({"stage": key, "form": w.name, "rounds": iv["n"],
                        "ratio_gmean": _round(iv["mean"]), "ratio_low": _round(iv["low"]),
                        "ratio_high": _round(iv["high"]),
                        "locust_server_ms": _round(mean["locust_server_ms"]),
                        "wrk_server_ms": _round(mean[f"{w.column}_server_ms"]),
                        "locust_client_cpu": _round(mean["locust_client_cpu"], 1),
                        "wrk_client_cpu": _round(mean[f"{w.column}_client_cpu"], 1)})
    return out


def ratio_line(r: dict) -> str:
    shown = (f"{r['ratio_gmean']:.2f} [{r['ratio_low']:.2f}, {r['ratio_high']:.2f}]"
             if r["ratio_low"] is not None else f"{r['ratio_gmean']:.2f} (one round: no interval)")
    return (f"stage {r['stage']:<3} Locust/{r['form']}: {shown} over {r['rounds']} rounds; "
            f"servers' CPU {r['locust_server_ms']} ms/request under Locust, "
            f"{r['wrk_server_ms']} under {r['form']}; client CPU {r['locust_client_cpu']}% / "
            f"{r['wrk_client_cpu']}% of a core")


def _round(value, digits: int = 3):
    return None if value is None else round(value, digits)


def write_csv(run_dir: Path, rows: list[dict]) -> Path:
    """crosscheck.csv (a row per round) and crosscheck-ratios.csv (the intervals)."""
    for name, columns, table in ((CROSSCHECK_CSV, COLUMNS, rows),
                                 (RATIOS_CSV, RATIO_COLUMNS, ratios(rows))):
        with open(run_dir / name, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=columns)
            writer.writeheader()
            writer.writerows(table)
    return run_dir / CROSSCHECK_CSV


def run(args) -> int:
    keys = [k.strip() for k in args.stages.split(",") if k.strip()]
    chosen = [stages.get(k) for k in keys]  # KeyError: cli.main says which
    if args.duration < 1 or args.rounds < 1:
        raise options.OptionsError("--duration and --rounds must be at least 1")
    names = {w.column.replace("_", "-"): w for w in WRKS}
    asked = [f.strip() for f in args.forms.split(",") if f.strip()]
    unknown = [f for f in asked if f not in names]
    if unknown or not asked:
        raise options.OptionsError(f"--forms {args.forms!r}: choose among "
                                   f"{', '.join(names)} (comma-separated)")
    forms = tuple(names[f] for f in asked)
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
                                     args.pause, scripts, forms)
            write_csv(run_dir, rows)
    say("")
    for row in rows:
        say(line(row))
    say("")
    for r in ratios(rows):
        say(ratio_line(r))
    say(f"\n{results.rel(run_dir / CROSSCHECK_CSV)}, {RATIOS_CSV} beside it")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.studies.crosscheck",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--stages", default=",".join(DEFAULT_STAGES),
                   help="stage keys, comma-separated (default: 1,3,5)")
    p.add_argument("--duration", type=int, default=20, help="seconds per tool and round")
    p.add_argument("--rounds", type=int, default=2, help="Locust then wrk, this many times")
    p.add_argument("--forms", default=",".join(w.column.replace("_", "-") for w in WRKS),
                   help="wrk's forms: wrk (-t100 -c100, like for like), wrk-t1 (-t1), "
                        "wrk-paused (1 ms between requests); default all three")
    p.add_argument("--pause", type=float, default=5.0,
                   help="seconds between two tools' runs (default 5)")
    cli.add_sandbox_options(p)
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    return cli.main("crosscheck", run, args, leftovers=runner.leftovers)


if __name__ == "__main__":
    sys.exit(main())
