"""Where a stage's roles run: a host each (default as root), or the machine itself.

netns: a host per role (benchmarks/sandbox/hosts.py): its own socket table (no TIME_WAIT
left over from the stage before, and `ss -s` on the app host is the app's), its
own sysctls (`tcp_tw_reuse` and the port range on the connecting hosts only)
set without touching the machine's, its own address where the well-known
ports are free, and its CPU set. Everything a role starts runs there, through
`prefix(role)`; on exit every process is stopped and the namespaces deleted.

Host mode (no root, no `ip`, or `--sandbox host`) runs every role on 127.0.0.1
with free ports, pinned to its CPU set all the same, reports the machine's
sysctls and changes them only when asked to (`apply_sysctls=True`), restoring
them on exit (and `lab clean` after a kill).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path

from benchmarks import stages
from benchmarks.capture import kernel
from benchmarks.sandbox import hosts, procs
from benchmarks.sandbox.hosts import pid_alive, read_sysctls, write_sysctls


def loopback_note() -> str:
    """What host mode cannot show, and the way out that this user has."""
    ok, why = hosts.netns_available()
    way = ("--sandbox netns gives a host per role" if ok
           else f"a host per role needs network namespaces ({why})")
    return ("host mode: Linux's default net.ipv4.tcp_tw_reuse=2 reuses TIME_WAIT ports on "
            "loopback, and the host's port range is wide, so stage 4's port exhaustion may "
            f"not show. {way}; or pass --apply-host-sysctls.")


# Host mode writes the host's sysctls here before changing them, so `lab clean` can put
# them back after a `kill -9` (one file per lab process: `<pid>.json`).
HOST_SYSCTL_STATE = Path("/run/flask-tuning-lab/host-sysctls")


class SandboxError(RuntimeError):
    pass


@contextmanager
def uninterrupted():
    """Hold SIGINT/SIGTERM while stopping things: a Ctrl-C pressed again in the middle
    of a clean-up must not cut it short. A held signal arrives when the block ends."""
    held = {signal.SIGINT, signal.SIGTERM}
    old = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _state_file(pid: int) -> Path:
    return HOST_SYSCTL_STATE / f"{pid}.json"


def save_host_sysctls(saved: dict[str, str]) -> None:
    HOST_SYSCTL_STATE.mkdir(parents=True, exist_ok=True)
    _state_file(os.getpid()).write_text(json.dumps(saved) + "\n")


def forget_host_sysctls() -> None:
    _state_file(os.getpid()).unlink(missing_ok=True)


def restore_stale_host_sysctls() -> list[str]:
    """Put back the host sysctls of host-mode labs that were killed before they could."""
    restored = []
    for path in sorted(HOST_SYSCTL_STATE.glob("*.json")) if HOST_SYSCTL_STATE.is_dir() else []:
        if path.stem.isdigit() and pid_alive(int(path.stem)):
            continue
        saved = json.loads(path.read_text())
        write_sysctls(saved)
        path.unlink()
        restored += [f"{k}={v}" for k, v in saved.items()]
    return restored


# sysctls every report records, whether a stage sets them or not
REPORTED_SYSCTLS = ("net.ipv4.tcp_tw_reuse", "net.ipv4.ip_local_port_range",
                    "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_max_tw_buckets",
                    "net.ipv4.tcp_timestamps", "net.core.somaxconn")


class Sandbox:
    """Where a stage's roles run. Use as a context manager.

    netns: a host per role (benchmarks/sandbox/hosts.py): `client` (Locust), `proxy` (Nginx,
    stages with a front), `app`, `redis`, each its own network namespace with an
    address in 198.18.0.0/24, its own sysctls and CPU set. host: every role on
    127.0.0.1 with free ports, pinned to its CPU set all the same.
    """

    def __init__(self, stage: stages.Stage, mode: str = "netns", apply_sysctls: bool = False,
                 placement=None, tag: str | None = None, client_hosts: int = 1,
                 metrics: bool = False):
        if mode not in ("netns", "host"):
            raise SandboxError(f"unknown sandbox {mode!r}: use netns or host")
        self.stage, self.mode = stage, mode
        self.apply_host_sysctls = apply_sysctls
        self.clients = stage.clients_for(client_hosts)  # at least the stage's own
        if len(self.clients) > 1 and mode != "netns":
            raise SandboxError("several client hosts need --sandbox netns")
        # --metrics: Prometheus's host too (benchmarks/run/prometheus.py), which a stage
        # that traces has anyway (its span sink: benchmarks/run/spans.py)
        self.metrics = metrics
        own = stage.roles_with_clients(client_hosts)
        self.roles = (*own, *((stages.METRICS_ROLE,)
                              if metrics and stages.METRICS_ROLE not in own else ()))
        self.placement = placement or hosts.placement()
        self.entry_role = "proxy" if stage.front else "app"
        self._saved: dict[str, str] = {}
        self.notes: list[str] = []
        self.network = None
        if mode == "netns":
            # `socketio`: the Socket.IO server's port on each app host (stage 9)
            self.ports = {"redis": stages.REDIS_PORT, "proxy": stages.FRONT_PORT,
                          **{role: stages.APP_PORT for role in stages.APP_ROLES},
                          "socketio": stages.SOCKETIO_PORT,
                          # --metrics: Prometheus, and each exporter beside what it reads
                          stages.METRICS_ROLE: stages.PROMETHEUS_PORT,
                          "nginx_exporter": stages.NGINX_EXPORTER_PORT,
                          "redis_exporter": stages.REDIS_EXPORTER_PORT,
                          "otlp": stages.OTLP_PORT}  # the span sink's, a stage that traces
            self.wanted = hosts.host_sysctls(
                stages.stage_sysctls(stage), stages.sysctl_profile("baseline"), self.roles,
                stage.connecting_roles)
            for role in self.clients:
                self.wanted[role] = stages.client_sysctls()
            self.network = hosts.Network(tag or stage.key.lower(), self.roles,
                                         sysctls=self.wanted,
                                         cpus=self.placement.cpus(self.roles))
        else:
            if stage.app_hosts > 1:
                raise SandboxError(f"stage {stage.key} runs {stage.app_hosts} app hosts: it "
                                   "needs --sandbox netns (root and iproute2)")
            self.ports = {"redis": procs.free_port(), "app": procs.free_port(),
                          "proxy": procs.free_port(), "socketio": procs.free_port(),
                          **({name: procs.free_port() for name in (
                              stages.METRICS_ROLE, "nginx_exporter", "redis_exporter")}
                             if metrics else {}),
                          **({"otlp": procs.free_port()} if stage.traced else {})}
            self.wanted = {role: stages.stage_sysctls(stage) for role in self.roles}
        self._taskset = {role: ["taskset", "-c", hosts.format_cpus(cpus)]
                         for role, cpus in self.placement.cpus(self.roles).items()}

    # --- where things are

    def prefix(self, role: str) -> list[str]:
        """Put this in front of a command to run it on `role`'s host, on its CPUs."""
        if self.network:
            return self.network.prefix(role)
        return list(self._taskset[role])

    def namespace(self, role: str) -> str | None:
        return self.network.namespace(role) if self.network else None

    def time_wait(self) -> int:
        """TIME_WAIT sockets on this stage's hosts together (host mode: the machine's)."""
        if not self.network:
            return time_wait_total()
        total = 0
        for role in self.roles:
            out = subprocess.run(["ip", "netns", "exec", self.namespace(role), "cat",
                                  "/proc/net/sockstat"], capture_output=True, text=True,
                                 timeout=10).stdout
            tcp = next((ln.split() for ln in out.splitlines() if ln.startswith("TCP:")), [])
            total += int(tcp[tcp.index("tw") + 1]) if "tw" in tcp else 0
        return total

    def accepted(self, roles) -> int | None:
        """Connections these hosts have accepted so far (PassiveOpens, each host's own
        /proc/net/snmp); None on the machine, whose count is every program's."""
        if not self.network:
            return None
        total = 0
        for role in roles:
            with kernel.in_netns(self.namespace(role)):
                found = kernel.read_netstat("/proc/thread-self/net/snmp", b"Tcp:")
            total += found["PassiveOpens"]
        return total

    def address(self, role: str) -> str:
        return self.network.address(role) if self.network else "127.0.0.1"

    def port(self, role: str) -> int:
        return self.ports[role]

    def url(self, role: str) -> str:
        return f"http://{self.address(role)}:{self.port(role)}"

    def socketio_url(self, role: str) -> str:
        """The Socket.IO server's on app host `role`, in a stage that has one (stage 9)."""
        return f"http://{self.address(role)}:{self.port('socketio')}"

    def describe(self) -> str:
        """The hosts in a few words: `hosts ftl-123-4-{client,proxy,app,redis}`."""
        if not self.network:
            return "the machine (host mode, 127.0.0.1)"
        base = self.namespace("app").rsplit("-", 1)[0]
        return f"hosts {base}-{{{','.join(self.roles)}}}"

    def where(self) -> dict[str, dict]:
        """role -> where it ran (address, port, namespace, CPU set), for run.json."""
        return {role: {"address": self.address(role),
                       "port": self.ports.get(role) if role != "client" else None,
                       "namespace": self.namespace(role),
                       "cpus": hosts.format_cpus(self.placement.cpus([role])[role])}
                for role in self.roles}

    def cpu_sets(self, components: dict[str, str]) -> dict[str, tuple[str, list[str]]]:
        """The sampler's --cpu-set: each CPU set the stage runs on, with the components
        (name -> role) pinned there. Named `server` (where Redis runs), `client`, or an
        app host's own set (--app-cpus) after it; roles sharing CPUs share the set."""
        found: dict[str, list[str]] = {}
        for name, role in components.items():
            found.setdefault(hosts.format_cpus(self.placement.cpus([role])[role]), []).append(name)
        out = {}
        for cpus, names in found.items():
            on = {components[n] for n in names}
            label = ("server" if "redis" in on else
                     next((r for r in stages.APP_ROLES if r in on), "client"))
            out[label] = (cpus, names)
        return out

    @property
    def entry_url(self) -> str:
        return self.url(self.entry_role)

    @property
    def name(self) -> str:
        """What to call this sandbox in a message: its app host's namespace, or the host."""
        return self.namespace("app") or "the host"

    def host_classes(self) -> dict[str, tuple[str, str, int]]:
        """The stage's classes by host pair, every client host on the client side."""
        clients = "+".join(self.clients)
        return {name: (clients if src == "client" else src, dst, port)
                for name, (src, dst, port) in self.stage.host_classes().items()}

    def connection_classes(self) -> dict:
        """The sampler's classes: by host pair on hosts, by port alone on the host."""
        if self.network:
            return self.host_classes()
        return self.stage.connection_classes(self.ports["redis"], self.ports["app"],
                                             self.ports["proxy"], self.ports["socketio"])

    # --- making and removing

    def __enter__(self) -> Sandbox:
        if self.network:
            self.network.__enter__()
            return self
        for port in self.ports.values():
            if procs.port_is_taken(port):
                raise SandboxError(f"port {port} is taken on 127.0.0.1")
        wanted = stages.stage_sysctls(self.stage)
        current = read_sysctls(wanted)
        differs = {k: v for k, v in wanted.items() if current.get(k) != v}
        if differs and self.apply_host_sysctls:
            self._saved = {k: current[k] for k in differs}
            save_host_sysctls(self._saved)  # before the change: a kill -9 can come any time
            write_sysctls(differs)
            self.notes.append(f"host sysctls changed for this stage (restored after): "
                              f"{differs}")
        elif differs:
            self.notes.append(f"host sysctls NOT applied (pass --apply-host-sysctls): "
                              f"wanted {differs}, host has "
                              f"{ {k: current[k] for k in differs} }")
            self.notes.append(loopback_note())
        return self

    def sysctls(self) -> dict[str, dict[str, str]]:
        """role -> the sysctls it ran with, as read where it ran."""
        keys = list(dict.fromkeys([*REPORTED_SYSCTLS, *stages.stage_sysctls(self.stage)]))
        if not self.network:
            host = read_sysctls(keys)
            return {role: dict(host) for role in self.roles}
        return {role: read_sysctls(keys, ["ip", "netns", "exec", self.namespace(role)])
                for role in self.roles}

    def __exit__(self, *exc) -> None:
        if self.network:
            self.network.__exit__(*exc)
            return
        with uninterrupted():
            if self._saved:
                write_sysctls(self._saved)
                forget_host_sysctls()
                self._saved = {}


def time_wait_total() -> int:
    """TIME_WAIT sockets of this network namespace, from /proc/net/sockstat (cheap)."""
    return kernel.read_sockstat()["tw"]


def wait_for_time_wait_drain(limit: int, timeout: float = 65.0, say=print,
                             count=time_wait_total) -> int:
    """Wait (up to TIME_WAIT's 60 s) until TIME_WAIT is back under `limit`: the host's,
    or what `count()` says (Sandbox.time_wait: a stage's hosts)."""
    deadline = time.monotonic() + timeout
    tw = count()
    last_report = 0.0
    while tw > limit and time.monotonic() < deadline:
        if time.monotonic() - last_report > 10:
            say(f"  waiting for TIME_WAIT to drain: {tw} sockets (target <= {limit})")
            last_report = time.monotonic()
        time.sleep(1)
        tw = count()
    return tw
