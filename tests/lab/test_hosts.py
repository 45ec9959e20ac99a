"""Hosts: a network namespace per role, against the real kernel (no mocks).

A network of all four roles is made once for the module; tests run real TCP
between its hosts, read each host's own socket table and sysctls, and check
that the machine's root namespace gained nothing. Teardown is tested on a
child Python process that holds a network: normal exit, an exception,
SIGTERM, SIGINT (also four in a row, also during the teardown) and `clean`
after a `kill -9`. Every test judges only namespaces named after its own
pids (`ftl-<pid>-...`): another lab may run on the machine meanwhile.
"""

from __future__ import annotations

import ipaddress
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks import stages
from benchmarks.sandbox import hosts, procs, sandbox

ROOT = Path(__file__).resolve().parent.parent.parent
PORT = 7100


def ours(pid: int) -> list[str]:
    """Lab namespaces named after `pid`."""
    return [n for n in hosts.list_lab_namespaces() if hosts.owner_pid(n) == pid]


def run(prefix: list[str], *cmd: str) -> str:
    return subprocess.run([*prefix, *cmd], capture_output=True, text=True, check=True,
                          timeout=30).stdout


def root_state() -> dict:
    """What the machine's root namespace has: interfaces, addresses, routes, sysctls."""
    return {
        "links": sorted(line.split(":")[1].strip().split("@")[0]
                        for line in run([], "ip", "-o", "link").splitlines()),
        "addrs": run([], "ip", "-o", "addr").split(),
        "routes": run([], "ip", "route", "show", "table", "all").split(),
        "sysctls": hosts.read_sysctls(sandbox.REPORTED_SYSCTLS),
    }


def in_benchmark_net(words: list[str]) -> list[str]:
    found = []
    for word in words:
        try:
            net = ipaddress.ip_network(word, strict=False)
        except ValueError:
            continue
        if net.version == 4 and net.overlaps(hosts.BENCHMARK_NET):
            found.append(word)
    return found


def gone(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


# --- without namespaces ---------------------------------------------------------------

def test_parse_cpus():
    assert hosts.parse_cpus("0-1,3", available=range(4)) == frozenset({0, 1, 3})
    assert hosts.parse_cpus("2", available=range(4)) == frozenset({2})
    for bad in ("", "a", "1-", "0,,1", "3-1", "-1"):
        with pytest.raises(ValueError, match="CPU set"):
            hosts.parse_cpus(bad, available=range(4))
    with pytest.raises(ValueError, match="not available"):
        hosts.parse_cpus("0-4", available=range(4))
    mine = os.sched_getaffinity(0)
    assert hosts.parse_cpus(hosts.format_cpus(mine)) == mine
    with pytest.raises(ValueError, match="not available"):
        hosts.parse_cpus(str(max(mine) + 1))
    assert hosts.format_cpus({0, 1, 3, 5, 6, 7}) == "0-1,3,5-7"


def test_placement():
    two = hosts.placement(available=[0, 1])
    assert (two.server, two.client, two.overlap) == ({1}, {0}, frozenset())
    four = hosts.placement(available=[0, 1, 2, 3])
    assert (four.server, four.client) == ({3}, {0, 1, 2})
    one = hosts.placement(available=[5])
    assert one.server == one.client == one.overlap == {5}
    given = hosts.placement(server="0-1", client="1", available=[0, 1])
    assert given.overlap == {1}
    assert given.as_dict() == {"server_cpus": "0-1", "client_cpus": "1", "overlap": "1",
                               "pinning": "taskset -c"}
    assert two.cpus(["client", "proxy", "app", "redis"]) == {
        "client": {0}, "proxy": {1}, "app": {1}, "redis": {1}}
    with pytest.raises(ValueError, match="not available"):
        hosts.placement(server="7", available=[0, 1])
    # --app-cpus: each app host its own set, the other server roles on the server's
    four_apps = hosts.placement(server="1", client="0", apps="2/3", available=[0, 1, 2, 3])
    assert four_apps.cpus(["client", "proxy", "app", "app2", "redis"]) == {
        "client": {0}, "proxy": {1}, "app": {2}, "app2": {3}, "redis": {1}}
    assert four_apps.as_dict()["app_cpus"] == "2/3" and not four_apps.overlap
    one_set = hosts.placement(apps="0", available=[0, 1])  # app2 shares the server's
    assert one_set.cpus(["app", "app2"]) == {"app": {0}, "app2": {1}}
    assert one_set.overlap == {0}, "an app host on the client's CPU is an overlap"
    with pytest.raises(ValueError, match="3 sets for 2 app hosts"):
        hosts.placement(apps="0/1/1", available=[0, 1])
    with pytest.raises(ValueError, match="not available"):
        hosts.placement(apps="1/7", available=[0, 1])


def test_roles_classes_and_sysctls_per_host():
    five, two = stages.get("5"), stages.get("2")
    assert five.roles == ("client", "proxy", "app", "redis")
    assert two.roles == ("client", "app", "redis")
    assert five.host_classes() == {
        "redis": ("app", "redis", 6379), "upstream": ("proxy", "app", 8000),
        "front": ("client", "proxy", 8080)}
    # the names the sampler's single-namespace mode uses for the same stage
    for stage in stages.STAGES:
        assert set(stage.host_classes()) == set(stage.connection_classes())
    per_host = hosts.host_sysctls(stages.stage_sysctls(five), stages.sysctl_profile("baseline"),
                                  five.roles, five.connecting_roles)
    tuned = {"net.ipv4.tcp_tw_reuse": "1", "net.ipv4.ip_local_port_range": "50000 50999"}
    baseline = {"net.ipv4.tcp_tw_reuse": "0"}
    assert per_host == {"client": baseline, "proxy": tuned, "app": tuned, "redis": baseline}
    no_front = hosts.host_sysctls({"k": "1"}, {"k": "0"}, two.roles, two.connecting_roles)
    assert no_front == {"client": {"k": "0"}, "app": {"k": "1"}, "redis": {"k": "0"}}


def test_bad_input_is_refused_before_anything_is_made():
    cases = [
        ({"roles": ["client", "db"]}, "unknown host 'db'"),
        ({"roles": ["client"], "cpus": {"client": {10_000}}}, "not available"),
        ({"roles": ["client"], "cpus": {"app": {0}}}, "cpus for app"),
        ({"roles": ["client"], "sysctls": {"redis": {"k": "v"}}}, "sysctls for redis"),
        ({"roles": []}, "at least one role"),
    ]
    for kwargs, message in cases:
        with pytest.raises(ValueError, match=message):
            hosts.Network("bad", **kwargs)
    with pytest.raises(ValueError, match="tag"):
        hosts.Network("Has-Dash", ["client"])
    assert not [n for n in ours(os.getpid()) if "-bad-" in n]


# --- one network of four hosts ------------------------------------------------------

@pytest.fixture(scope="module")
def network():
    """All four roles, the stage-5 sysctls per host, the default CPU placement."""
    before = root_state()
    five = stages.get("5")
    sysctls = hosts.host_sysctls(stages.stage_sysctls(five), stages.sysctl_profile("baseline"),
                                 hosts.ROLES, stages.get("5").connecting_roles)
    place = hosts.placement()
    with hosts.Network("fix", hosts.ROLES, sysctls=sysctls,
                       cpus=place.cpus(hosts.ROLES)) as net:
        yield net, before, sysctls, place
    assert not [n for n in ours(os.getpid()) if "-fix-" in n]


@pytest.mark.netns
def test_names_and_addresses(network):
    net, *_ = network
    me = os.getpid()
    assert net.names() == {r: f"ftl-{me}-fix-{r}" for r in hosts.ROLES}
    assert net.bridge_namespace == f"ftl-{me}-fix-br"
    assert set(ours(me)) >= {*net.names().values(), net.bridge_namespace}
    assert [net.address(r) for r in hosts.ROLES] == [
        "198.18.0.10", "198.18.0.11", "198.18.0.20", "198.18.0.30", "198.18.0.31",
        "198.18.0.40", "198.18.0.50"]
    for role in hosts.ROLES:
        shown = run(["ip", "-n", net.namespace(role)], "-o", "-4", "addr", "show", "dev", "eth0")
        assert f"inet {net.address(role)}/24" in shown
    ports = run(["ip", "-n", net.bridge_namespace], "-o", "link", "show", "master", "br0")
    assert sorted(line.split(":")[1].strip().split("@")[0]
                  for line in ports.splitlines()) == sorted(hosts.ROLES)
    bridge_addrs = run(["ip", "-n", net.bridge_namespace], "-o", "-4", "addr").split()
    assert in_benchmark_net(bridge_addrs) == []   # the bridge namespace: the bridge only
    with pytest.raises(ValueError, match="no host"):
        net.prefix("db")


@pytest.mark.netns
def test_root_namespace_gains_nothing(network):
    _, before, *_ = network
    now = root_state()
    assert now["links"] == before["links"]          # no new interface at all
    assert in_benchmark_net(now["addrs"]) == []
    # one route only, while a lab runs: the range unreachable from the machine's network
    assert in_benchmark_net(now["routes"]) == ["198.18.0.0/15"]
    assert "unreachable 198.18.0.0/15 proto 198" in " ".join(now["routes"])
    got = subprocess.run(["ip", "route", "get", "198.18.0.30"], capture_output=True,
                         text=True, timeout=10)
    assert got.returncode != 0 and "No route to host" in got.stderr, got
    assert now["sysctls"] == before["sysctls"]      # the machine's sysctls untouched


SERVER = r"""
import socket, sys, time
listener = socket.socket()
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind(("0.0.0.0", int(sys.argv[1])))
listener.listen(8)
listener.settimeout(30)
held = []
try:
    while True:   # the readiness probe first (it sends nothing), then the client
        conn, _ = listener.accept()
        data = conn.recv(100)
        if data:
            conn.sendall(data.upper())
            held.append(conn)
except TimeoutError:
    pass
"""

CLIENT = r"""
import os, socket, sys, time
conn = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10)
conn.sendall(b"hello")
answer = conn.recv(100)
with open(sys.argv[3] + ".tmp", "w") as f:
    f.write(f"{answer.decode()} {conn.getsockname()[0]}")
os.rename(sys.argv[3] + ".tmp", sys.argv[3])
time.sleep(30)
"""


@pytest.mark.netns
def test_tcp_between_hosts_and_a_socket_table_per_host(network, tmp_path):
    net, *_ = network
    server = procs.start([*net.prefix("app"), sys.executable, "-c", SERVER, str(PORT)],
                         log=tmp_path / "server.log")
    client = None
    try:
        procs.wait_for_port(PORT, host=net.address("app"), netns=net.namespace("app"),
                            proc=server, timeout=15)
        server_ready = time.monotonic() + 15
        ready = tmp_path / "ready"
        client = procs.start([*net.prefix("client"), sys.executable, "-c", CLIENT,
                              net.address("app"), str(PORT), str(ready)],
                             log=tmp_path / "client.log")
        while not ready.exists():
            assert client.poll() is None, (tmp_path / "client.log").read_text()
            assert time.monotonic() < server_ready, "the client got no answer"
            time.sleep(0.05)
        assert ready.read_text() == f"HELLO {net.address('client')}"

        def established(role: str) -> list[str]:
            return run(net.prefix(role), "ss", "-Htn", "state", "established").splitlines()

        app_side = f"{net.address('app')}:{PORT}"
        on_client = [line for line in established("client") if app_side in line]
        on_app = [line for line in established("app") if app_side in line]
        assert len(on_client) == 1 and line_has(on_client[0], net.address("client"))
        assert len(on_app) == 1 and line_has(on_app[0], net.address("client"))
        assert established("redis") == []
        assert established("proxy") == []
    finally:
        procs.stop(client)
        procs.stop(server)


def line_has(line: str, address: str) -> bool:
    return any(field.startswith(address + ":") for field in line.split())


@pytest.mark.netns
def test_sysctls_per_host(network):
    net, _, sysctls, _ = network
    keys = ["net.ipv4.tcp_tw_reuse", "net.ipv4.ip_local_port_range"]
    seen = {role: hosts.read_sysctls(keys, net.prefix(role)) for role in hosts.ROLES}
    assert seen["proxy"] == seen["app"] == {"net.ipv4.tcp_tw_reuse": "1",
                                            "net.ipv4.ip_local_port_range": "50000 50999"}
    for role in ("client", "redis"):   # the baseline, and the kernel's default port range
        assert seen[role]["net.ipv4.tcp_tw_reuse"] == "0"
        assert seen[role]["net.ipv4.ip_local_port_range"] != "50000 50999"
    assert seen["client"] == seen["redis"]
    assert sysctls["client"] == {"net.ipv4.tcp_tw_reuse": "0"}


@pytest.mark.netns
def test_processes_are_pinned_to_their_cpu_set(network, tmp_path):
    net, _, _, place = network
    started = {role: procs.start([*net.prefix(role), "sleep", "30"]) for role in ("client", "app")}
    try:
        for role, proc in started.items():
            # `ip netns exec` and `taskset` exec: the pid is sleep's own
            deadline = time.monotonic() + 5
            while Path(f"/proc/{proc.pid}/comm").read_text().strip() != "sleep":
                assert time.monotonic() < deadline
                time.sleep(0.02)
            status = Path(f"/proc/{proc.pid}/status").read_text()
            allowed = next(line.split()[1] for line in status.splitlines()
                           if line.startswith("Cpus_allowed_list:"))
            want = place.client if role == "client" else place.server
            assert hosts.parse_cpus(allowed) == want, (role, allowed)
            assert proc.pid in hosts.namespace_pids(net.namespace(role))
        if len(os.sched_getaffinity(0)) >= 2:
            assert not place.overlap
    finally:
        for proc in started.values():
            procs.stop(proc)


# --- teardown ----------------------------------------------------------------------

def in_host(net: hosts.Network, role: str, proc) -> None:
    """Until `proc` runs in the host's namespace: `ip netns exec` enters it a moment after
    it starts (on a slow box, after a teardown that began at once had looked for it)."""
    deadline = time.monotonic() + 30
    while proc.pid not in hosts.namespace_pids(net.namespace(role)):
        assert time.monotonic() < deadline, f"{proc.args} never entered {role}"
        time.sleep(0.02)


@pytest.mark.netns
def test_exit_and_an_exception_remove_everything():
    me = os.getpid()
    with hosts.Network("exit", ["client", "app"]) as net:
        sleeper = procs.start([*net.prefix("app"), "sleep", "60"])
        in_host(net, "app", sleeper)
        names = [*net.names().values(), net.bridge_namespace]
        assert set(names) <= set(ours(me))
    assert not set(names) & set(ours(me))
    assert sleeper.wait(timeout=5) is not None   # killed by the teardown, reaped here

    with pytest.raises(RuntimeError, match="in the body"):
        with hosts.Network("exc", ["client", "redis"]) as net:
            sleeper = procs.start([*net.prefix("redis"), "sleep", "60"])
            in_host(net, "redis", sleeper)
            names = [*net.names().values(), net.bridge_namespace]
            raise RuntimeError("in the body")
    assert not set(names) & set(ours(me))
    assert sleeper.wait(timeout=5) is not None


@pytest.mark.netns
def test_a_failure_while_making_it_removes_what_was_made():
    me = os.getpid()
    net = hosts.Network("half", ["client", "app"],
                        sysctls={"app": {"net.ipv4.no_such_setting": "1"}})
    with pytest.raises(hosts.NetworkError, match="no_such_setting"):
        with net:
            pass
    assert not [n for n in ours(me) if "-half-" in n]


# A child that holds a network: a process in each host (on the app host one
# that ignores SIGTERM if asked, so the teardown has to wait and then KILL),
# then sleeps until a signal comes. Bounded: it exits after 60 s by itself.
HOLDER = r"""
import json, os, subprocess, sys, time
from benchmarks.sandbox import hosts, sandbox
tag, ready, stubborn = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
with hosts.Network(tag, ["client", "app"]) as net:
    # the stubborn child says when its handler is set (its Python's start takes over
    # 0.3 s on a slow box, and a TERM before then kills it at once)
    app_cmd = (["python3", "-c", "import signal, sys, time; "
                "signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                "open(sys.argv[1], 'w').close(); time.sleep(120)", ready + ".stubborn"]
               if stubborn else ["sleep", "120"])
    kids = [subprocess.Popen([*net.prefix("client"), "sleep", "120"], start_new_session=True),
            subprocess.Popen([*net.prefix("app"), *app_cmd], start_new_session=True)]
    deadline = time.monotonic() + 30
    while not all(hosts.namespace_pids(net.namespace(r)) for r in ("client", "app")) or (
            stubborn and not os.path.exists(ready + ".stubborn")):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    with open(ready + ".tmp", "w") as f:
        json.dump({"pids": [k.pid for k in kids],
                   "names": [*net.names().values(), net.bridge_namespace]}, f)
    os.rename(ready + ".tmp", ready)
    time.sleep(60)
"""


def start_holder(tmp_path: Path, tag: str, stubborn: bool = False):
    """The holder, ready: (process, its log, {"pids": [...], "names": [...]})."""
    import json
    ready, log = tmp_path / f"ready-{tag}", tmp_path / f"holder-{tag}.log"
    # output to a file: a pipe would stay open in the holder's children
    proc = procs.start([sys.executable, "-c", HOLDER, tag, str(ready), "1" if stubborn else "0"],
                       log=log, cwd=ROOT)
    deadline = time.monotonic() + 30
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            hosts.clean(owners=[proc.pid], kill_orphans=True)
            pytest.fail(f"the holder did not get ready: {log.read_text()}")
        time.sleep(0.05)
    info = json.loads(ready.read_text())
    assert set(info["names"]) == set(ours(proc.pid))
    return proc, log, info


@pytest.mark.netns
@pytest.mark.parametrize("signals, pause, stubborn", [
    ([signal.SIGTERM], 0, False),
    ([signal.SIGINT], 0, False),
    ([signal.SIGINT] * 4, 0, False),               # four Ctrl-C in a row
    ([signal.SIGINT, signal.SIGINT, signal.SIGINT, signal.SIGTERM], 0.5, True),
], ids=["TERM", "INT", "INTx4", "INT-then-more-during-teardown"])
def test_signals_to_the_holder_remove_everything(tmp_path, signals, pause, stubborn):
    proc, log, info = start_holder(tmp_path, "sig", stubborn)
    try:
        os.kill(proc.pid, signals[0])
        if pause:
            time.sleep(pause)   # the teardown is waiting for the stubborn process
            assert proc.poll() is None
        for sig in signals[1:]:
            os.kill(proc.pid, sig)
        proc.wait(timeout=30)
        output = log.read_text()
        assert proc.returncode != 0
        assert "KeyboardInterrupt" in output or proc.returncode < 0, output
        assert ours(proc.pid) == [], output
        for pid in info["pids"]:
            assert gone(pid), f"process {pid} outlived its network"
    finally:
        proc.kill()
        proc.wait()
        hosts.clean(owners=[proc.pid], kill_orphans=True)


@pytest.mark.netns
def test_clean_after_kill_9(tmp_path):
    proc, _, info = start_holder(tmp_path, "nine")
    try:
        proc.kill()   # SIGKILL: no teardown; its namespaces and their processes stay
        proc.wait()
        left = hosts.stale_namespaces(owners=[proc.pid])
        assert set(left) == set(info["names"])
        in_use = {name for name, pids in left.items() if pids}
        assert in_use == {n for n in info["names"] if n.endswith(("-client", "-app"))}
        # by default only the empty one (the bridge's) goes
        assert hosts.clean(owners=[proc.pid]) == [n for n in info["names"] if n.endswith("-br")]
        assert set(ours(proc.pid)) == in_use
        assert sorted(hosts.clean(owners=[proc.pid], kill_orphans=True)) == sorted(in_use)
        assert ours(proc.pid) == []
        for pid in info["pids"]:
            assert gone(pid)
    finally:
        hosts.clean(owners=[proc.pid], kill_orphans=True)


@pytest.mark.netns
def test_clean_never_touches_a_live_lab(network):
    net, *_ = network
    assert hosts.stale_namespaces(owners=[os.getpid()]) == {}
    assert hosts.clean(owners=[os.getpid()], kill_orphans=True) == []
    assert set(net.names().values()) <= set(ours(os.getpid()))
