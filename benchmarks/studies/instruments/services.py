"""The study's processes: Redis, the OTLP sink, a worker per instrument; each pinned,
each stopped by `Services.stop_all` (on success, error and Ctrl-C alike)."""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from benchmarks import stages
from benchmarks.run.cli import StageFailed
from benchmarks.sandbox import hosts, procs
from benchmarks.studies.instruments.worker import PREFIX

READY_S = 120  # a worker's start: build, sign in, warm every type up (slower under load)


class Worker:
    """A worker process (worker.py) and its stdout, read line by line with a deadline."""

    def __init__(self, name: str, proc: subprocess.Popen, log: Path):
        self.name, self.proc, self.log, self.buffer = name, proc, log, b""

    def ask(self, message: dict, timeout: float) -> dict:
        self.proc.stdin.write((json.dumps(message) + "\n").encode())
        self.proc.stdin.flush()
        return self.reply(timeout)

    def reply(self, timeout: float) -> dict:
        """The worker's next PREFIX line, as a dict; StageFailed if it exits or is late."""
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            while True:
                line, sep, rest = self.buffer.partition(b"\n")
                if sep:
                    self.buffer = rest
                    text = line.decode(errors="replace")
                    if text.startswith(PREFIX):
                        return json.loads(text[len(PREFIX):])
                    continue
                left = deadline - time.monotonic()
                chunk = os.read(self.proc.stdout.fileno(), 65536) if left > 0 and \
                    sel.select(left) else None
                if not chunk:
                    raise StageFailed(self.failed("timed out" if chunk is None else "exited"))
                self.buffer += chunk

    def failed(self, how: str) -> str:
        said = self.log.read_text(errors="replace").strip().splitlines() or ["(no output)"]
        return f"the {self.name} worker {how}: {said[-1]}; see {self.log}"


class Services:
    """What the study started, to stop in reverse order."""

    def __init__(self):
        self.started: list[subprocess.Popen] = []

    def stop_all(self) -> None:
        for proc in reversed(self.started):
            if proc.stdin:
                proc.stdin.close()
            procs.stop(proc)
        self.started.clear()

    def redis(self, cpus: frozenset[int], workdir: Path) -> tuple[subprocess.Popen, int]:
        port = procs.free_port()
        proc = procs.start(["taskset", "-c", hosts.format_cpus(cpus),
                            *procs.redis_command(port, workdir)], log=workdir / "redis.log")
        self.started.append(proc)
        procs.wait_for_redis(port, proc=proc)
        return proc, port

    def sink(self, cpus: frozenset[int], log: Path) -> tuple[subprocess.Popen, int]:
        port = procs.free_port()
        proc = procs.start(["taskset", "-c", hosts.format_cpus(cpus), sys.executable, "-m",
                            "benchmarks.studies.instruments.otlp_sink", "--port", str(port)],
                           log=log, env=procs.child_env(), cwd=stages.ROOT)
        self.started.append(proc)
        procs.wait_for_port(port, proc=proc)
        return proc, port

    def worker(self, name: str, cpus: frozenset[int], redis: tuple, sink_port: int | None,
               log: Path, warmup: float) -> Worker:
        proc, port = redis
        endpoint = {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT":
                    f"http://127.0.0.1:{sink_port}/v1/traces"} if sink_port else {}
        cmd = ["taskset", "-c", hosts.format_cpus(cpus), sys.executable, "-m",
               "benchmarks.studies.instruments.worker", "--instrument", name,
               "--redis-port", str(port), "--redis-pid", str(proc.pid), "--warmup", f"{warmup:g}"]
        with open(log, "ab") as err:
            worker = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=err, env=procs.child_env(**endpoint),
                                      cwd=stages.ROOT, start_new_session=True)
        self.started.append(worker)
        return Worker(name, worker, log)


def sink_count(port: int) -> dict:
    """The sink's counts (GET /count)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/count", timeout=10) as answer:
        return json.loads(answer.read())
