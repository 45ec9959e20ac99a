"""Hosts: a network namespace per role, joined by a bridge in a lab namespace of its own.

Each role of a stage (`client`, `proxy`, `app`, `redis`) runs on a host of its
own, so each has its own socket table (`ss -s` on the app host means what it
means on a real server), its own sysctls and its own CPU set. A host is a
network namespace `ftl-<pid>-<tag>-<role>` with one interface, `eth0`, its
address in 198.18.0.0/24 (inside 198.18.0.0/15, the range RFC 2544 sets aside
for benchmarks: nothing routes it to a real network) and `lo` up. The other
end of its veth pair is a port of bridge `br0`, which lives in namespace
`ftl-<pid>-<tag>-br`: the machine's root namespace gets no interface, no
address and no sysctl change, and one route only, while any lab runs: the
range unreachable (sandbox/unreachable.py), so nothing sent to a lab address
from outside the lab leaves the machine.

    with Network("4", roles(has_front=True), sysctls=..., cpus=...) as net:
        procs.start([*net.prefix("app"), "gunicorn", ...])
        net.address("app")          # "198.18.0.30"

On exit, on an error while it is being made, on Ctrl-C (pressed any number of
times) and on SIGTERM (a KeyboardInterrupt unless the caller handles it),
every process in its namespaces is stopped (TERM, then KILL) and every
namespace deleted (the veths and the bridge go with them). After a `kill -9` of the lab, `clean()`
deletes namespaces whose owner pid is dead and that hold no process.

CPU placement is `taskset -c` in front of the command (see `prefix`): no
cgroup to make or delete, no cgroup v2 delegation of the cpuset controller
needed, nothing left behind by a `kill -9`, and the child processes a server
forks inherit the mask. A cgroup cpuset would also confine a process that
calls sched_setaffinity itself; none of the lab's servers do.
"""

from __future__ import annotations

import ipaddress
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from benchmarks.lab_range import (  # noqa: F401  (the lab's range, named here too)
    BENCHMARK_NET,
    NETNS_DIR,
    NS_PREFIX,
    current_lab_namespace,
    lab_address_from_outside,
    outside_refusal,
)
from benchmarks.sandbox import unreachable
from benchmarks.stages import APP_ROLES, CLIENT_ROLES, HOSTS, METRICS_ROLE, Host

SUBNET = ipaddress.ip_network("198.18.0.0/24")
BRIDGE = "br0"
BRIDGE_SUFFIX = "br"
_HELD = (signal.SIGINT, signal.SIGTERM)


class NetworkError(RuntimeError):
    """A network could not be made, or was asked for something that cannot be."""


ROLES = tuple(h.role for h in HOSTS)


def host_sysctls(stage: Mapping[str, str], baseline: Mapping[str, str],
                 roles: Iterable[str], connecting: Iterable[str]) -> dict[str, dict[str, str]]:
    """role -> sysctls: the stage's settings on the connecting hosts, the baseline elsewhere.

    `stage` is the stage's merged profile (`stages.stage_sysctls(stage)`),
    `baseline` the baseline profile (`stages.sysctl_profile("baseline")`).
    A key the stage sets but the baseline lacks is left at the kernel's
    default of a new namespace on the other hosts.

    >>> host_sysctls({"net.ipv4.tcp_tw_reuse": "1"}, {"net.ipv4.tcp_tw_reuse": "0"},
    ...              ["client", "app"], ["app"])
    {'client': {'net.ipv4.tcp_tw_reuse': '0'}, 'app': {'net.ipv4.tcp_tw_reuse': '1'}}
    """
    connecting = set(connecting)
    return {role: {**baseline, **stage} if role in connecting else dict(baseline)
            for role in roles}


# --- CPU sets ---------------------------------------------------------------------

_CPUS = re.compile(r"^\d+(-\d+)?(,\d+(-\d+)?)*$")


def parse_cpus(spec: str, available: Iterable[int] | None = None) -> frozenset[int]:
    """"0-1,3" -> frozenset({0, 1, 3}); ValueError for bad syntax or CPUs this process cannot use.

    `available` defaults to os.sched_getaffinity(0): the CPUs this process
    (and so the lab) may run on, which in a container may be fewer than the
    machine's.
    """
    text = spec.replace(" ", "")
    if not _CPUS.match(text):
        raise ValueError(f"CPU set {spec!r}: expected numbers and ranges, e.g. 0 or 0-1,3")
    cpus: set[int] = set()
    for part in text.split(","):
        low, _, high = part.partition("-")
        first, last = int(low), int(high or low)
        if last < first:
            raise ValueError(f"CPU set {spec!r}: range {part} runs backwards")
        cpus.update(range(first, last + 1))
    have = frozenset(os.sched_getaffinity(0) if available is None else available)
    missing = sorted(cpus - have)
    if missing:
        raise ValueError(f"CPU set {spec!r}: CPU {format_cpus(missing)} not available here "
                         f"(this process may use {format_cpus(have)})")
    return frozenset(cpus)


def format_cpus(cpus: Iterable[int]) -> str:
    """frozenset({0, 1, 3}) -> "0-1,3" (what taskset -c and Cpus_allowed_list say)."""
    out, run = [], []
    for cpu in sorted(cpus):
        if run and cpu == run[-1] + 1:
            run.append(cpu)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [cpu]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(out)


@dataclass(frozen=True)
class Placement:
    """Which CPUs the server roles and the client run on."""

    server: frozenset[int]
    client: frozenset[int]
    apps: tuple[frozenset[int], ...] = ()  # --app-cpus: app, app2 each its own set

    @property
    def overlap(self) -> frozenset[int]:
        """CPUs both sides share (empty when the server has its own): the report says so."""
        return (self.server.union(*self.apps)) & self.client

    def cpus(self, roles: Iterable[str]) -> dict[str, frozenset[int]]:
        """role -> CPU set, for Network(cpus=...): an app host with a set of its own
        (--app-cpus) on it, the other server roles on the server's; the metrics host
        (--metrics) on the client's, as the sampler, off the measured servers' core."""
        own = dict(zip(APP_ROLES, self.apps, strict=False))  # fewer sets: the rest share
        return {r: self.client if r in (*CLIENT_ROLES, METRICS_ROLE) else own.get(r, self.server)
                for r in roles}

    def as_dict(self) -> dict:
        """For run.json."""
        apps = {"app_cpus": "/".join(format_cpus(cpus) for cpus in self.apps)} if self.apps else {}
        return {"server_cpus": format_cpus(self.server), "client_cpus": format_cpus(self.client),
                **apps, "overlap": format_cpus(self.overlap), "pinning": "taskset -c"}


def placement(server: str | None = None, client: str | None = None,
              available: Iterable[int] | None = None, apps: str | None = None) -> Placement:
    """The CPU sets: `--server-cpus` / `--client-cpus` if given, else the default, and
    `--app-cpus` (`2-3/4-5`: app's set, then app2's) if given.

    Default on 2+ CPUs: the server roles on the last CPU, the client on the
    others (2 cores: server {1}, client {0}), so the server has one core, as
    in the book. On 1 CPU both share it (`overlap` says so).
    """
    have = sorted(os.sched_getaffinity(0) if available is None else available)
    default_server = frozenset(have[-1:])
    default_client = frozenset(have[:-1]) or default_server
    app_sets = apps.split("/") if apps is not None else []
    if len(app_sets) > len(APP_ROLES):
        raise ValueError(f"--app-cpus {apps!r}: {len(app_sets)} sets for "
                         f"{len(APP_ROLES)} app hosts (one set per host, separated by /)")
    return Placement(
        server=parse_cpus(server, have) if server is not None else default_server,
        client=parse_cpus(client, have) if client is not None else default_client,
        apps=tuple(parse_cpus(spec, have) for spec in app_sets))


# --- namespaces and processes -----------------------------------------------------

_TAG = re.compile(r"^[a-z0-9]{1,12}$")


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and result.returncode != 0:
        raise NetworkError(f"ip {' '.join(args)} failed: "
                           f"{result.stderr.strip() or result.stdout.strip()}")
    return result


def owner_pid(name: str) -> int | None:
    """The pid in `ftl-<pid>-...`, or None for a name without one."""
    if not name.startswith(NS_PREFIX):
        return None
    head = name[len(NS_PREFIX):].split("-", 1)[0]
    return int(head) if head.isdigit() else None


def pid_alive(pid) -> bool:
    if not pid:
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def netns_available() -> tuple[bool, str]:
    """Can this process make network namespaces? (ok, reason if not)."""
    if os.geteuid() != 0:
        return False, "not root (network namespaces need root)"
    if not (shutil.which("ip") or os.path.exists("/usr/sbin/ip") or os.path.exists("/sbin/ip")):
        return False, "`ip` not found (apt-get install iproute2)"
    return True, ""


def list_lab_namespaces() -> list[str]:
    out = _ip("netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines()
            if line.strip().startswith(NS_PREFIX)]


def namespace_pids(name: str) -> list[int]:
    return [int(p) for p in _ip("netns", "pids", name, check=False).stdout.split()]


def owned_namespaces(pid: int) -> list[str]:
    """The lab namespaces that the lab process `pid` made and that still exist."""
    return [ns for ns in list_lab_namespaces() if owner_pid(ns) == pid]


def _run(cmd: list[str], check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(cmd, capture_output=True, text=True)
    if check and result.returncode != 0:
        raise NetworkError(f"{' '.join(cmd)} failed: {result.stderr.strip() or result.stdout}")
    return result


def read_sysctls(keys, prefix: list[str] | None = None) -> dict[str, str]:
    """Current values of `keys`, read where `prefix` runs (a namespace or the host)."""
    values = {}
    for key in keys:
        path = "/proc/sys/" + key.replace(".", "/")
        result = _run([*(prefix or []), "cat", path], check=False)
        values[key] = " ".join(result.stdout.split()) if result.returncode == 0 else None
    return values


def write_sysctls(settings: dict[str, str], prefix: list[str] | None = None) -> None:
    for key, value in settings.items():
        _run([*(prefix or []), "sysctl", "-q", "-w", f"{key}={value}"])


def stop_processes(namespaces: Iterable[str], grace: float = 5.0) -> None:
    """TERM, then KILL after `grace` s, every process in these namespaces, all at once."""
    namespaces = list(namespaces)

    def pids() -> set[int]:
        return {pid for ns in namespaces for pid in namespace_pids(ns)}

    for sig in (signal.SIGTERM, signal.SIGKILL):
        left = pids()
        if not left:
            return
        for pid in left:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            time.sleep(0.1)
            if not pids():
                return


def delete_namespaces(names: Iterable[str]) -> None:
    """Stop every process in these namespaces, then delete them (missing ones are fine)."""
    names = list(names)
    existing = set(list_lab_namespaces())
    names = [n for n in names if n in existing]
    stop_processes(names)
    for name in names:
        _ip("netns", "del", name, check=False)


def stale_namespaces(owners: Iterable[int] | None = None) -> dict[str, list[int]]:
    """Lab namespaces (`ftl-<pid>-...`) whose owner pid is dead -> the pids still in them.

    A namespace whose owner runs is in use and never listed. `owners`: only
    namespaces of these pids (a test judges only its own).
    """
    wanted = None if owners is None else set(owners)
    stale = {}
    for name in list_lab_namespaces():
        pid = owner_pid(name)
        if pid is None or (wanted is not None and pid not in wanted) or pid_alive(pid):
            continue
        stale[name] = namespace_pids(name)
    return stale


def clean(owners: Iterable[int] | None = None, kill_orphans: bool = False) -> list[str]:
    """Delete the namespaces of dead labs (after a `kill -9`); returns the names deleted.

    Only empty ones by default: a namespace with a process in it is left
    alone. With `kill_orphans`, those processes are stopped first: in a
    namespace named after a dead lab they can only be what that lab started
    (its servers outlive it, each in a session of its own), so `lab clean`
    should pass it.
    """
    deleted = []
    for name, pids in stale_namespaces(owners).items():
        if pids and not kill_orphans:
            continue
        if kill_orphans:
            stop_processes([name])
        if not namespace_pids(name):
            _ip("netns", "del", name, check=False)
            deleted.append(name)
    return deleted


class Network:
    """The hosts of one lab run (or stage), a bridge between them. A context manager.

    `tag`: 1-12 lower-case letters or digits, unique within the lab run (the
    stage key, say). Names: namespaces `ftl-<pid>-<tag>-<role>` and
    `ftl-<pid>-<tag>-br` (files under /run/netns: no length limit that
    matters); interfaces `eth0` in each host and, in the bridge namespace,
    `br0` and one port per host named after its role (hence roles of at
    most 10 characters: interface names stop at 15).

    `sysctls`: role -> {key: value}, written inside that host (see
    host_sysctls). `cpus`: role -> CPU set (see placement). `hosts`: the
    topology (anything with .role and .address, e.g. stages.HOSTS). Bad
    input raises ValueError before anything is made.
    """

    def __init__(self, tag: str, roles: Iterable[str] = ROLES,
                 sysctls: Mapping[str, Mapping[str, str]] | None = None,
                 cpus: Mapping[str, Iterable[int]] | None = None,
                 hosts: Iterable[Host] = HOSTS, owner: int | None = None) -> None:
        if not _TAG.match(tag):
            raise ValueError(f"network tag {tag!r}: 1-12 lower-case letters or digits")
        self.hosts = {h.role: h for h in hosts}
        self.roles = tuple(dict.fromkeys(roles))
        if not self.roles:
            raise ValueError("a network needs at least one role")
        for role in self.roles:
            if role not in self.hosts:
                raise ValueError(f"unknown host {role!r}; known: {', '.join(self.hosts)}")
            if not re.match(r"^[a-z][a-z0-9]{0,9}$", role) or role == BRIDGE_SUFFIX:
                raise ValueError(f"host name {role!r}: 1-10 lower-case letters or digits")
            if ipaddress.ip_address(self.hosts[role].address) not in SUBNET:
                raise ValueError(f"host {role}: {self.hosts[role].address} is not in {SUBNET}")
        for what, given in (("sysctls", sysctls or {}), ("cpus", cpus or {})):
            unknown = sorted(set(given) - set(self.roles))
            if unknown:
                raise ValueError(f"{what} for {', '.join(unknown)}: not a host of this "
                                 f"network ({', '.join(self.roles)})")
        self.sysctls = {r: dict(v) for r, v in (sysctls or {}).items()}
        have = os.sched_getaffinity(0)
        self.cpus: dict[str, frozenset[int]] = {}
        for role, cpu_set in (cpus or {}).items():
            cpu_set = frozenset(cpu_set)
            if not cpu_set or not cpu_set <= have:
                raise ValueError(f"cpus for {role}: {format_cpus(cpu_set) or 'none'} not "
                                 f"available here (this process may use {format_cpus(have)})")
            self.cpus[role] = cpu_set
        base = f"{NS_PREFIX}{owner or os.getpid()}-{tag}"
        self.bridge_namespace = f"{base}-{BRIDGE_SUFFIX}"
        self._names = {role: f"{base}-{role}" for role in self.roles}
        self._made: list[str] = []
        self._route: unreachable.Hold | None = None
        self._previous: dict[int, object] = {}
        self._held: list[int] = []
        self._closing = self._interrupted = False

    # --- what the runner uses

    def names(self) -> dict[str, str]:
        """role -> its namespace name (also the sampler's `hosts` argument)."""
        return dict(self._names)

    def namespace(self, role: str) -> str:
        self._check(role)
        return self._names[role]

    def address(self, role: str) -> str:
        """The host's address, e.g. "198.18.0.30" for `app`."""
        self._check(role)
        return self.hosts[role].address

    def prefix(self, role: str) -> list[str]:
        """argv to put in front of a command to run it on `role`'s host, pinned to its CPUs."""
        self._check(role)
        argv = ["ip", "netns", "exec", self._names[role]]
        if role in self.cpus:
            argv += ["taskset", "-c", format_cpus(self.cpus[role])]
        return argv

    def _check(self, role: str) -> None:
        if role not in self._names:
            raise ValueError(f"no host {role!r} in this network ({', '.join(self.roles)})")

    # --- making and removing

    def __enter__(self) -> Network:
        self._hold_signals()
        try:
            self._make()
        except BaseException:
            self.close(propagating=True)
            raise
        return self

    def __exit__(self, exc_type, *exc) -> None:
        self.close(propagating=exc_type is not None)

    def _hold_signals(self) -> None:
        """While the network exists, Ctrl-C and SIGTERM interrupt it once, never its teardown.

        The first SIGINT or SIGTERM goes to the previous handler (a SIGTERM
        nobody handles becomes KeyboardInterrupt, so the network is removed
        rather than left behind); later ones, say Ctrl-C pressed again while
        the namespaces are being removed, are held and, unless an exception
        is already on its way out, delivered once the teardown is done.
        Only the main thread can own handlers; elsewhere close() blocks the
        signals instead.
        """
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in _HELD:
            self._previous[sig] = signal.signal(sig, self._on_signal)

    def _on_signal(self, sig: int, frame) -> None:
        previous = self._previous.get(sig)
        if previous == signal.SIG_IGN:
            return
        if self._closing or self._interrupted:
            self._held.append(sig)
            return
        self._interrupted = True
        if callable(previous):
            previous(sig, frame)
        else:
            raise KeyboardInterrupt

    def _release_signals(self, propagating: bool) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()
        held, self._held = self._held, []
        if held and not propagating:
            os.kill(os.getpid(), held[0])   # to whatever handles it now

    def _make(self) -> None:
        # first: from the machine's own network the range goes nowhere while hosts use it
        try:
            self._route = unreachable.hold()
        except unreachable.RouteError as e:
            raise NetworkError(str(e)) from None
        taken = set(list_lab_namespaces())
        clash = [n for n in [self.bridge_namespace, *self._names.values()] if n in taken]
        if clash:
            raise NetworkError(f"namespace {clash[0]} exists already (same tag twice?)")
        br = self.bridge_namespace
        self._made.append(br)   # noted before it exists: an interrupt cannot lose it
        _ip("netns", "add", br)
        _ip("-n", br, "link", "add", BRIDGE, "type", "bridge")
        _ip("-n", br, "link", "set", BRIDGE, "up")
        for role in self.roles:
            ns = self._names[role]
            self._made.append(ns)
            _ip("netns", "add", ns)
            # both ends are made inside the lab's namespaces: the root namespace
            # never holds a veth, not even for a moment
            _ip("-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", role,
                "netns", br)
            _ip("-n", br, "link", "set", role, "master", BRIDGE, "up")
            _ip("-n", ns, "addr", "add", f"{self.hosts[role].address}/{SUBNET.prefixlen}",
                "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            settings = self.sysctls.get(role)
            if settings:
                try:
                    write_sysctls(settings, ["ip", "netns", "exec", ns])
                except NetworkError as e:
                    raise NetworkError(f"host {role}: {e}") from None

    def close(self, propagating: bool = False) -> None:
        """Stop every process in the network and delete its namespaces. Safe to repeat.

        `propagating`: an exception is on its way out already, so a Ctrl-C
        held during the teardown is dropped rather than delivered.
        """
        self._closing = True
        mask = None
        if not self._previous:   # no handlers of ours (not the main thread): block instead
            mask = signal.pthread_sigmask(signal.SIG_BLOCK, _HELD)
        try:
            delete_namespaces(reversed(self._made))
            self._made.clear()
            if self._route is not None:
                self._route.release()   # the last lab out deletes the route
                self._route = None
        finally:
            if mask is not None:
                signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            self._release_signals(propagating)
