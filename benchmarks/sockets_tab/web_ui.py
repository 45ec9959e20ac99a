"""What `lab up` adds for the attendee's screen: Locust's web UI with the Sockets tab.

On top of a running stage (benchmarks/run/runner.py's `running_stage`), `stage_ui`
starts, in order:

  Locust's web UI   on the client host, the stage's user classes preselected
                    (--class-picker), its users logged in as the seeded
                    accounts, benchmarks/sockets_tab/plugin.py loaded beside the
                    scenario: the Sockets tab; with --client-hosts 2 Locust's
                    master, and a worker on each client host
  the sampler       until the stage stops (no --duration): results/up/<stage>/
                    sampler.csv, the stage's classes, Redis/app/Nginx/Locust CPU
  a forward         from the machine's 127.0.0.1:--ui-port (--ui-address) into the client host
                    (benchmarks/sandbox/port_forward.py), so a browser on the machine, or
                    on a laptop through `ssh -L`, reaches the UI

and stops them in reverse on the way out (Ctrl-C, once or more, or an error).
The UI port is claimed (`claim_port`) before the stage starts anything.
"""

from __future__ import annotations

import ipaddress
import os
import signal
import socket
import time
from contextlib import contextmanager
from pathlib import Path

from benchmarks import stages
from benchmarks.capture import loop
from benchmarks.run import locust_cli, prometheus, results, runner
from benchmarks.run.cli import StageFailed
from benchmarks.run.options import OptionsError
from benchmarks.sandbox import port_forward, procs, sandbox
from benchmarks.stages import ROOT, Stage

UI_PORT = 8089  # Locust's own default
PROMETHEUS_UI_PORT = stages.PROMETHEUS_PORT  # (--metrics) as on its host: its own default
LOCUST_START_TIMEOUT = 60.0
# Where the UI listens, unless --ui-address says: the image sets 0.0.0.0, since a
# container's port mapping (docker run -p 127.0.0.1:8089:8089) reaches its own interface,
# never its 127.0.0.1; a VM only its laptop reaches may set the same (docs/laptops.md).
UI_ADDRESS_ENV = "FTL_UI_ADDRESS"
# The same setting as a `FTL_UI_ADDRESS=...` line in the box's own file, which the VM
# recipe (setup/cloud-init.yaml) writes: a file survives `sudo`, which drops the
# variables a login shell set.
BOX_CONF = Path("/etc/flask-tuning-lab.conf")


def default_ui_address() -> str:
    """--ui-address's default: $FTL_UI_ADDRESS, else the box's file, else 127.0.0.1."""
    return os.environ.get(UI_ADDRESS_ENV) or box_setting(UI_ADDRESS_ENV) or "127.0.0.1"


def box_setting(name: str) -> str | None:
    """`NAME=value` from BOX_CONF (shell syntax: the last line wins, quotes stripped)."""
    try:
        lines = BOX_CONF.read_text().splitlines()
    except OSError:
        return None
    found = None
    for line in lines:
        key, eq, value = line.strip().partition("=")
        if eq and key == name:
            found = value.strip().strip("'\"")
    return found or None


def claim_port(port: int, address: str = "127.0.0.1") -> socket.socket:
    """The machine's address:port, held until the forward uses it; a clear error if
    it is taken, with a free port to pass instead."""
    try:
        ipaddress.IPv4Address(address)
    except ValueError:
        raise OptionsError(f"--ui-address {address!r}: an IPv4 address of this machine, "
                           "e.g. 127.0.0.1 (this machine only) or 0.0.0.0 (every interface: "
                           "a container's port mapping, a VM's forwarded port)") from None
    try:
        return port_forward.listen(port, address)
    except port_forward.PortTaken as e:
        raise OptionsError(f"{e}: something else listens there (another `lab up`, or a "
                           f"Locust). Pass another port: --ui-port {procs.free_port()}") from e


def local_url(listener: socket.socket) -> str:
    """The UI's URL on this machine (0.0.0.0 is reached at 127.0.0.1 too)."""
    address, port = listener.getsockname()[:2]
    return f"http://{'127.0.0.1' if address == '0.0.0.0' else address}:{port}"


def locust_command(stage: Stage, url: str, users_file: Path, sampler_csv: Path,
                   web_port: int, master: bool = False, web_host: str = "127.0.0.1"
                   ) -> list[str]:
    """The UI's Locust: with several client hosts, Locust's master (its workers send
    the load; the UI shows them on its Workers tab)."""
    chat = locust_cli.chat_options(stage.chat_settings)
    return locust_cli.command(stage.users, [
        "--class-picker", "--web-host", web_host, "--web-port", str(web_port), "--host", url,
        "--chat-users-file", str(users_file), "--sockets-csv", str(sampler_csv), *chat,
        *(["--master"] if master else [])], sockets_tab=True)


def wait_for_workers(log: Path, count: int, master, timeout: float = 30.0) -> None:
    """Until the master's log says `count` workers connected (so the banner is true)."""
    deadline = time.monotonic() + timeout
    while f"{count} workers connected" not in log.read_text(errors="replace"):
        if master.poll() is not None or time.monotonic() > deadline:
            raise StageFailed(f"Locust's master did not see its {count} workers within "
                              f"{timeout:g} s; see {log}")
        time.sleep(0.2)


@contextmanager
def stage_ui(stage: Stage, box: sandbox.Sandbox, stack: runner.Stack, users_file: Path,
             listener: socket.socket):
    """Locust's UI, the sampler and the forward for a running stage; yields the URL."""
    stage_dir = stack.dir
    sampler_csv = stage_dir / results.SAMPLER_CSV
    results.write_json(stage_dir / results.SOCKETS_JSON, runner.sockets_layout(stage, box))
    netns = box.namespace("client")
    address, ui_port = listener.getsockname()[:2]
    ui_url = local_url(listener)
    # in a namespace Locust has the client host's loopback port 8089 to itself; on
    # the machine (host mode) it takes the UI's address and port, freed just before
    web_port = UI_PORT if netns else ui_port
    web_host = "127.0.0.1" if netns else address
    if not netns:
        listener.close()
    started: list = []
    forward = None
    try:
        several = len(box.clients) > 1
        locust = procs.start([*box.prefix("client"), *locust_command(
            stage, stack.url, users_file, sampler_csv, web_port, master=several,
            web_host=web_host)],
            log=stage_dir / results.LOCUST_UI_LOG, env=procs.child_env(), cwd=ROOT)
        started.append(locust)
        workers = locust_cli.start_workers(
            {role: box.prefix(role) for role in box.clients} if several else {},
            box.address("client"), stage_dir, stage.users)
        started.extend(workers.values())
        if workers:
            wait_for_workers(stage_dir / results.LOCUST_UI_LOG, len(workers), locust)
        try:
            procs.wait_for_port(web_port, host="127.0.0.1" if address == "0.0.0.0" else web_host,
                                proc=locust, netns=netns,
                                timeout=LOCUST_START_TIMEOUT)
        except procs.ServiceError as e:
            log = (stage_dir / results.LOCUST_UI_LOG).read_text(errors="replace")[-2000:]
            raise StageFailed(f"Locust's web UI did not start: {e}\n{log}") from e
        load = runner.stage_load(stage, box, stack, stage_dir)
        started.append(procs.start([*load.sampler_prefix, *loop.command(
            sampler_csv, procs={**load.server_pids, **locust_cli.components(locust, workers)},
            **load.sampler)],
            log=stage_dir / "sampler.log", env=procs.child_env(), cwd=ROOT))
        if netns:
            forward = port_forward.Forward(listener, netns, ("127.0.0.1", web_port)).start()
        yield ui_url
    finally:
        with sandbox.uninterrupted():
            if forward:
                forward.stop()
            listener.close()
            for proc in reversed(started):
                procs.stop(proc, sig=signal.SIGTERM)


@contextmanager
def prometheus_ui(box: sandbox.Sandbox, listener: socket.socket | None):
    """With --metrics (a `listener`, claimed before the stage started): Prometheus's UI
    forwarded from it, as Locust's is; yields its URL, or None without --metrics."""
    if listener is None:
        yield None
        return
    with prometheus.forwarded(box, listener) as url:
        yield url
