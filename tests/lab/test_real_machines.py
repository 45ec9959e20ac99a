"""The commands of docs/your-stack.md for real machines, run as written against a `lab up`.

`lab up 5 --client-hosts 2` serves Locust's master web UI with a worker on each
client host; then the page's two commands of "Against your own stack" run on
its two client hosts as they would on two machines: the master (`lab run
--target ... --locust-args '--master ...'`) on `client2`, a worker started by
hand on `client`. Only the placeholders (`HOST`, `THIS_BOX`) and the load's
length and size are filled in.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from conftest import ctrl_c, read_until
from test_docs import block_commands, fenced_blocks
from test_lab import leftovers, start_lab

from benchmarks import stages

ROOT = stages.ROOT
VENV_PATH = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}


def readme_commands() -> tuple[str, str]:
    """(the master's command, the worker's) from the docs' block for real machines."""
    readme = ROOT / "docs" / "your-stack.md"
    for n, lang, lines in fenced_blocks(readme):
        if lang == "bash" and any("--master-host THIS_BOX" in line for line in lines):
            texts = [c.text for c in block_commands(readme, n, lines)]
            master = [t for t in texts if "--target" in t and "--master" in t]
            worker = [t for t in texts if "lab worker --master-host" in t]
            assert len(master) == len(worker) == 1, texts
            return master[0], worker[0]
    pytest.fail("docs/your-stack.md has no ```bash block with `--master-host THIS_BOX`")


def filled(command: str, **values: str) -> list[str]:
    """The command with HOST/THIS_BOX and `--duration`/`--users` values replaced; each
    must be there to be replaced."""
    for name, value in values.items():
        if name.isupper():
            assert re.search(rf"\b{name}\b", command), (name, command)
            command = re.sub(rf"\b{name}\b", value, command)
        else:
            option = f"--{name}"
            assert re.search(rf"{option} \S+", command), (option, command)
            command = re.sub(rf"{option} \S+", f"{option} {value}", command)
    return shlex.split(command)


def ui_stats(url: str) -> dict:
    with urllib.request.urlopen(f"{url}/stats/requests", timeout=10) as answer:
        return json.load(answer)


def post(url: str, path: str, data: dict | None = None) -> dict:
    body = urllib.parse.urlencode(data or {}).encode()
    with urllib.request.urlopen(f"{url}{path}", data=body, timeout=10) as answer:
        return json.load(answer)


def swarm(url: str, users: int) -> None:
    """Start the UI's swarm as its form does."""
    started = post(url, "/swarm", {"user_count": users, "spawn_rate": users,
                                   "host": f"http://{stages.ADDRESS['proxy']}:8080",
                                   "user_classes": "ChatUser"})
    assert started["success"], started


def wait_for(read, done, seconds: float = 20):
    """read() until done(value) or `seconds` pass; the last value."""
    deadline = time.monotonic() + seconds
    value = read()
    while not done(value) and time.monotonic() < deadline:
        time.sleep(0.5)
        value = read()
    return value


@pytest.mark.netns
@pytest.mark.slow
def test_readme_real_machine_commands_against_lab_up(tmp_path):
    master_cmd, worker_cmd = readme_commands()
    results = str(tmp_path / "up")
    up = start_lab("up", "5", "--client-hosts", "2", "--results", results, "--ui-port", "0")
    worker = None
    try:
        seen = read_until(up, "Ctrl-C stops it", 120)
        assert "host client2 198.18.0.11" in seen, seen
        assert ("one more by hand, as on another machine: python -m benchmarks.lab exec "
                "--host client2 -- python -m benchmarks.lab worker --master-host "
                "198.18.0.10") in seen, seen
        ui = re.search(r"web UI \(Sockets tab\): (http://127\.0\.0\.1:\d+)", seen)[1]
        assert ui_stats(ui)["worker_count"] == 2  # the UI's master, a worker per host
        swarm(ui, users=4)
        spread = wait_for(lambda: [w["user_count"] for w in ui_stats(ui)["workers"]],
                          lambda counts: sorted(counts) == [2, 2])
        assert sorted(spread) == [2, 2], spread
        post(ui, "/stop")

        def on(host, command):
            return ["python", "-m", "benchmarks.lab", "exec", "--results", results,
                    "--host", host, "--", *command]

        worker = subprocess.Popen(
            on("client", filled(worker_cmd, THIS_BOX=stages.ADDRESS["client2"])), cwd=ROOT,
            env=VENV_PATH, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        target = tmp_path / "target"
        master = subprocess.run(
            on("client2", [*filled(master_cmd, HOST=stages.ADDRESS["proxy"], duration="6",
                                   users="10"), "--results", str(target)]),
            cwd=ROOT, env=VENV_PATH, capture_output=True, text=True, timeout=150)
        assert master.returncode == 0, master.stdout + master.stderr
        totals = json.loads(master.stdout.strip().splitlines()[-1])
        assert totals["requests"] > 0 and totals["failures"] == 0, totals
        said = worker.communicate(timeout=60)[0]
        assert worker.returncode == 0, said
        assert "Got quit message from master" in said, said
        run = next(target.glob("*-target"))
        assert "--expect-workers 1" in (run / "target" / "locust-command.txt").read_text()
    finally:
        if worker and worker.poll() is None:
            worker.kill()
        rest = ctrl_c(up)
    assert up.returncode == 130, rest
    assert leftovers(up.pid) == []
