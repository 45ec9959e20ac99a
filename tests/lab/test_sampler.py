"""The capture sampler against real sockets and real processes (no mocks).

A throw-away network namespace holds a small server with 50 connections the
client closed first, 40 the server closed first and 5 held open (and 2000
client-closed on another port, so dumps span many netlink chunks, and 10 over
IPv6); the sampler
runs inside it and must count them by class and direction, exactly as `ss`
does. Needs root and `ip` for the namespace (skipped with the reason
otherwise); the CPU accounting test needs neither.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from benchmarks.capture import csvfile, kernel, loop, sampler, snapshot, tables
from benchmarks.sandbox import procs

ROOT = Path(__file__).resolve().parents[2]
PORT = 7000          # inside the namespace, which is empty: any port is free
CLIENT_FIRST, SERVER_FIRST, HELD = 50, 40, 5   # unequal: a swap would show
BULK = 2000          # client-first on PORT + 2: a dump of many chunks
V6 = 10              # client-first on [::1]:PORT + 3 (none if the kernel has no IPv6)


def tw_all(v6: int) -> int:
    return CLIENT_FIRST + SERVER_FIRST + BULK + v6


# Runs inside the namespace: the sockets, plus a child that burns CPU (so the
# helper's tree has a descendant to count). Exits by itself after 60 s.
HELPER = r"""
import socket, subprocess, sys, time
port, ready = int(sys.argv[1]), sys.argv[2]
n_client, n_server, n_held, n_bulk, n_v6 = map(int, sys.argv[3:])

def listen(port, family=socket.AF_INET, host="127.0.0.1"):
    listener = socket.socket(family)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((host, port))
    listener.listen(64)
    return listener

def pair(listener):
    client = socket.create_connection(listener.getsockname()[:2], timeout=5)
    server, _ = listener.accept()
    return client, server

bulk = listen(port + 2)
for _ in range(n_bulk):
    c, s = pair(bulk); c.close(); s.close()
try:
    six = listen(port + 3, socket.AF_INET6, "::1")
except OSError:   # no IPv6 here
    n_v6 = 0
for _ in range(n_v6):
    c, s = pair(six); c.close(); s.close()
listener = listen(port)
for _ in range(n_client):      # the client closes first: TIME_WAIT at the client's end
    c, s = pair(listener); c.close(); s.close()
for _ in range(n_server):      # the server closes first: TIME_WAIT at the server's end
    c, s = pair(listener); s.close(); c.close()
held = [pair(listener) for _ in range(n_held)]
burn = ("import time\nt = time.process_time()\n"
        "while time.process_time() - t < 4: pass\ntime.sleep(60)")
child = subprocess.Popen([sys.executable, "-c", burn])
deadline = time.monotonic() + 5
while time.monotonic() < deadline:
    with open("/proc/net/sockstat") as f:
        tw = int(f.read().split(" tw ")[1].split()[0])
    if tw == n_client + n_server + n_bulk + n_v6:
        break
    time.sleep(0.05)
with open(ready + ".tmp", "w") as f:
    f.write(f"{tw} {n_v6}")
import os; os.rename(ready + ".tmp", ready)
time.sleep(60)
child.kill(); child.wait()
"""




@pytest.fixture(scope="module")
def netns():
    name = f"ftl-test-sampler-{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if made.returncode:
        pytest.skip(f"cannot make a network namespace: {made.stderr.strip()}")
    try:
        subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True)
        # inside it only: no reuse of TIME_WAIT ports by new connections
        subprocess.run(["ip", "netns", "exec", name, "sysctl", "-q", "-w",
                        "net.ipv4.tcp_tw_reuse=0"], check=True)
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


@pytest.fixture(scope="module")
def scene(netns, tmp_path_factory):
    """The helper's sockets in place: (namespace, helper process, work dir, IPv6 TW made)."""
    work = tmp_path_factory.mktemp("sampler")
    ready = work / "ready"
    helper = procs.start(["ip", "netns", "exec", netns, sys.executable, "-c", HELPER, str(PORT),
                          str(ready), str(CLIENT_FIRST), str(SERVER_FIRST), str(HELD),
                          str(BULK), str(V6)],
                         log=work / "helper.log")
    try:
        deadline = time.monotonic() + 15
        while not ready.exists():
            assert helper.poll() is None, (work / "helper.log").read_text()
            assert time.monotonic() < deadline, "the helper did not get ready"
            time.sleep(0.05)
        tw, v6 = map(int, ready.read_text().split())
        assert tw == tw_all(v6)
        yield netns, helper, work, v6
    finally:
        procs.stop(helper)


def in_netns(ns: str, *cmd: str) -> str:
    return subprocess.run(["ip", "netns", "exec", ns, *cmd], capture_output=True, text=True,
                          check=True, cwd=ROOT, timeout=30).stdout


def run_to_end(cmd: list[str], log: Path, timeout: float) -> None:
    """A sampler command that stops by itself (--duration); it must exit 0."""
    proc = procs.start(cmd, log=log, cwd=ROOT)
    try:
        assert proc.wait(timeout=timeout) == 0, log.read_text()
    finally:
        procs.stop(proc)


def read_csv(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    text = path.read_text()
    assert text.endswith("\n"), "a torn last row"
    lines = text.splitlines()
    return lines[0].split(","), list(csv.DictReader(lines))


@pytest.fixture(scope="module")
def sampled(scene):
    """One 2 s run of the CLI at 0.5 s in the namespace: (csv path, header, rows)."""
    ns, helper, work, _ = scene
    out = work / "sampled.csv"
    cmd = loop.command(out, {"front": PORT, "other": PORT + 1, "bulk": PORT + 2,
                                "six": PORT + 3}, {"helper": helper.pid},
                          interval=0.5, duration=2.0, netns=ns)
    run_to_end(cmd, work / "sampled.log", timeout=20)
    header, rows = read_csv(out)
    return out, header, rows


@pytest.mark.netns
def test_counts_time_wait_by_class_and_direction(scene, sampled):
    ns, _, _, v6 = scene
    _, header, rows = sampled
    assert header == [
        "ts", "elapsed_s", "tw_total", "estab_total",
        "tw_front", "tw_front_client", "tw_front_server", "estab_front",
        "tw_other", "tw_other_client", "tw_other_server", "estab_other",
        "tw_bulk", "tw_bulk_client", "tw_bulk_server", "estab_bulk",
        "tw_six", "tw_six_client", "tw_six_server", "estab_six",
        "cpu_helper", "rss_mb_helper", "cpu_sampler", "rss_mb_sampler"]
    assert 3 <= len(rows) <= 5   # 0.5, 1.0, 1.5, 2.0 s (a stalled machine skips a tick)
    for row in rows:
        assert int(row["tw_front_client"]) == CLIENT_FIRST
        assert int(row["tw_front_server"]) == SERVER_FIRST
        assert int(row["tw_front"]) == CLIENT_FIRST + SERVER_FIRST
        assert int(row["tw_total"]) == tw_all(v6)
        assert int(row["estab_front"]) == HELD              # each connection once
        assert int(row["estab_total"]) == 2 * HELD          # both ends
        assert [int(row[c]) for c in header[8:12]] == [0, 0, 0, 0]
        assert [int(row[c]) for c in header[12:16]] == [BULK, BULK, 0, 0]
        assert [int(row[c]) for c in header[16:20]] == [v6, v6, 0, 0]
    # the same numbers `ss` gives, with its kernel-side filters
    def ss(*flt: str) -> int:
        return len(in_netns(ns, "ss", "-Htan", *flt).splitlines())
    assert ss("state", "time-wait", "dport", "=", f":{PORT}") == CLIENT_FIRST
    assert ss("state", "time-wait", "sport", "=", f":{PORT}") == SERVER_FIRST
    assert ss("state", "established", "dport", "=", f":{PORT}") == HELD


@pytest.mark.netns
def test_rows_are_timed_and_cpu_rss_numeric(sampled):
    _, _, rows = sampled
    elapsed = [float(r["elapsed_s"]) for r in rows]
    assert elapsed == sorted(elapsed) and 0.4 < elapsed[0] < 1.2
    assert abs(float(rows[-1]["ts"]) - time.time()) < 60
    for row in rows:
        for col in ("cpu_helper", "rss_mb_helper", "cpu_sampler", "rss_mb_sampler"):
            assert 0.0 <= float(row[col]) <= 100.0 * (os.cpu_count() or 1) + 50, (col, row)
        assert float(row["rss_mb_helper"]) > 10   # two Pythons: the helper and its child
    # the helper's own CPU is ~0: what shows is its child's busy loop
    assert max(float(r["cpu_helper"]) for r in rows) >= 30


@pytest.mark.netns
def test_peaks_of_the_run(sampled):
    path, header, _ = sampled
    top = csvfile.peaks(path)
    assert list(top) == header
    assert top["tw_front_client"] == CLIENT_FIRST and top["tw_front_server"] == SERVER_FIRST
    assert top["estab_front"] == HELD and top["tw_other"] == 0
    assert isinstance(top["cpu_helper"], float) and top["cpu_helper"] >= 30


def test_peaks_skips_empty_cells_and_a_torn_row(tmp_path):
    path = tmp_path / "s.csv"
    path.write_text("ts,tw_front,cpu_app,cpu_gone\n"
                    "1.5,3,12.5,\n"
                    "2.5,7,4.0,\n"
                    "3.5,99")   # killed while writing
    assert csvfile.peaks(path) == {"ts": 2.5, "tw_front": 7, "cpu_app": 12.5, "cpu_gone": None}


@pytest.mark.netns
def test_netlink_and_ss_backends_agree(scene):
    """One dump for both states, one per state, one per family, and `ss`: the same counts."""
    ns, _, _, v6 = scene
    code = ("import json\nfrom benchmarks.capture import kernel as s\n"
            f"ports = [{PORT}, {PORT + 1}, {PORT + 2}, {PORT + 3}]\n"
            "d = s.DiagCounter()\n"
            "both = d.count(ports)\n"
            "each = {**d.count(ports, [s.TCP_ESTABLISHED]), **d.count(ports, [s.TCP_TIME_WAIT])}\n"
            "d.close()\n"
            "v2 = s.DiagCounter()\n"
            "v2._legacy = False   # the per-family request, as on a kernel without the old one\n"
            "by_family = v2.count(ports)\n"
            "v2.close()\n"
            "print(json.dumps([both, each, by_family, s.SsCounter().count(ports)]))\n")
    if os.path.exists("/proc/net/if_inet6"):   # the kernel has IPv6: the helper used it
        assert v6 == V6
    both, each, by_family, ss = json.loads(in_netns(ns, sys.executable, "-c", code))
    expected = {str(kernel.TCP_ESTABLISHED): [2 * HELD, [HELD, 0, 0, 0], [HELD, 0, 0, 0]],
                str(kernel.TCP_TIME_WAIT): [tw_all(v6), [SERVER_FIRST, 0, 0, 0],
                                             [CLIENT_FIRST, 0, BULK, v6]]}
    assert both == each == by_family == ss == expected


@pytest.mark.netns
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["TERM", "INT"])
def test_signal_stops_cleanly_with_rows_flushed(scene, sig):
    ns, helper, work, v6 = scene
    out = work / f"until-{sig.name}.csv"
    proc = procs.start(loop.command(out, {"front": PORT}, {"helper": helper.pid},
                                       interval=0.3, netns=ns),
                       log=work / f"until-{sig.name}.log", cwd=ROOT)
    try:
        deadline = time.monotonic() + 15
        while not out.exists() or out.read_text().count("\n") < 3:   # header + 2 rows
            assert proc.poll() is None, (work / f"until-{sig.name}.log").read_text()
            assert time.monotonic() < deadline, "no rows"
            time.sleep(0.05)
        proc.send_signal(sig)
        assert proc.wait(timeout=10) == 0
    finally:
        procs.stop(proc)
    header, rows = read_csv(out)
    assert out.read_text().count("ts,elapsed_s") == 1
    assert len(rows) >= 2
    assert all(len(r) == len(header) and None not in r.values() for r in rows)
    assert all(int(r["tw_front"]) == CLIENT_FIRST + SERVER_FIRST for r in rows)
    assert all(int(r["tw_total"]) == tw_all(v6) for r in rows)


@pytest.mark.netns
def test_snapshot_cli_and_api(scene, tmp_path):
    ns, _, _, v6 = scene
    listed = in_netns(ns, sys.executable, "-m", "benchmarks.capture.sampler", "--snapshot",
                      str(tmp_path / "cli"))
    api = snapshot.snapshot(tmp_path / "api", netns=ns)
    assert sorted(api) == sorted(["ss-tanp.txt", "ss-s.txt", "netstat-tan.txt", "sockstat.txt"])
    for d in ("cli", "api"):
        files = {p.name: p.read_text() for p in (tmp_path / d).iterdir()}
        assert sorted(files) == sorted(api)
        assert files["ss-tanp.txt"].count("TIME-WAIT") == tw_all(v6)
        assert f"127.0.0.1:{PORT}" in files["ss-tanp.txt"]
        assert "users:((" in files["ss-tanp.txt"]          # -p: who holds the sockets
        assert f"timewait {tw_all(v6)}" in files["ss-s.txt"]
        assert files["netstat-tan.txt"].count("TIME_WAIT") == tw_all(v6)
        assert f" tw {tw_all(v6)} " in files["sockstat.txt"]
    assert len(listed.split()) == 4


# Runs on the host: a parent that, once told to, runs two children one after
# the other, each burning 0.6 s of CPU, and reaps them.
PARENT = r"""
import os, subprocess, sys, time
go, done = sys.argv[1], sys.argv[2]
deadline = time.monotonic() + 30
while not os.path.exists(go) and time.monotonic() < deadline:
    time.sleep(0.02)
burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.6: pass"
for _ in range(2):
    subprocess.run([sys.executable, "-c", burn], check=True)
open(done, "w").close()
time.sleep(30)
"""


def test_cpu_of_a_tree_counts_reaped_children_once(tmp_path):
    """Children that come, burn CPU and get reaped between samples: counted once each."""
    go, done, out = tmp_path / "go", tmp_path / "done", tmp_path / "cpu.csv"
    parent = procs.start([sys.executable, "-c", PARENT, str(go), str(done)],
                         log=tmp_path / "parent.log")
    stop = threading.Event()
    try:
        s = loop.Sampler({}, {"parent": parent.pid}, out, interval=0.25)
        thread = threading.Thread(target=s.run, kwargs={"stop_event": stop}, daemon=True)
        thread.start()
        deadline = time.monotonic() + 10
        while not out.exists() or out.stat().st_size == 0:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        time.sleep(0.1)   # primed
        go.touch()
        while not done.exists():
            assert parent.poll() is None and time.monotonic() < deadline + 10
            time.sleep(0.05)
        time.sleep(0.5)
        stop.set()
        thread.join(timeout=10)
        assert not thread.is_alive()
    finally:
        stop.set()
        procs.stop(parent)
    _, rows = read_csv(out)
    seconds, prev = 0.0, 0.0
    for row in rows:
        t = float(row["elapsed_s"])
        seconds += float(row["cpu_parent"]) / 100 * (t - prev)
        prev = t
    # 1.2 s burnt, plus two interpreters starting; twice that if a reaped
    # child were counted again through its parent
    assert 1.1 <= seconds <= 1.8, seconds


def test_parse_and_columns():
    assert tables.parse_classes(["redis=6379", "front=8000"]) == {"redis": 6379, "front": 8000}
    assert tables.parse_procs(["app=12", "locust=30", "locust=31"]) == {
        "app": [12], "locust": [30, 31]}
    for bad in (["front"], ["front=http"], ["front=0"], ["front=65536"], ["9x=1"],
                ["a=1", "a=2"], ["total=1"]):
        with pytest.raises(ValueError):
            tables.parse_classes(bad)
    for bad in (["app=0"], ["sampler=1"], ["app"]):
        with pytest.raises(ValueError):
            tables.parse_procs(bad)
    assert tables.columns({"redis": 1}, ["app"]) == [
        "ts", "elapsed_s", "tw_total", "estab_total", "tw_redis", "tw_redis_client",
        "tw_redis_server", "estab_redis", "cpu_app", "rss_mb_app", "cpu_sampler",
        "rss_mb_sampler"]
    with pytest.raises(ValueError):
        tables.columns({"x": 1, "x_client": 2}, [])   # tw_x_client twice
    with pytest.raises(ValueError):
        loop.Sampler({}, {"sampler": 1}, os.devnull)


def test_cli_rejects_bad_arguments(capsys):
    for argv in (["--class", "front=1"], ["--out", "x.csv", "--class", "front"],
                 ["--out", "x.csv", "--interval", "0"]):
        with pytest.raises(SystemExit) as e:
            sampler.main(argv)
        assert e.value.code == 2
    assert "--out" in capsys.readouterr().err


def test_a_component_not_running_leaves_its_cells_empty(tmp_path):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    out = tmp_path / "gone.csv"
    rows = loop.Sampler({}, {"gone": gone.pid}, out, interval=0.1).run(duration=0.35)
    header, data = read_csv(out)
    assert rows == len(data) >= 3
    assert all(r["cpu_gone"] == "" and r["rss_mb_gone"] == "" for r in data)
    assert all(float(r["rss_mb_sampler"]) > 0 for r in data)
    assert csvfile.peaks(out)["cpu_gone"] is None


# --- hosts: a socket table per host ----------------------------------------------------
#
# Four hosts (benchmarks/sandbox/hosts.py). Known connections in each class, counted
# where each end really is, plus traffic that must land in no class: a probe
# over the app host's own loopback to its port 8000, and the proxy host
# connecting to the app's port 8000 (not the `front` pair).

# A server: each connection says what to do: c = the client closes first,
# s = the server closes first, h = hold it open. Exits after 60 s idle.
# (wait_for_port's probe says nothing and closes first: one TIME_WAIT at its end.)
PEER_SERVER = r"""
import socket, sys
listener = socket.socket()
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind(("0.0.0.0", int(sys.argv[1])))
listener.listen(64)
listener.settimeout(60)
held = []
try:
    while True:
        conn, _ = listener.accept()
        what = conn.recv(1)
        if what == b"c":
            conn.recv(1)       # EOF: the client has closed
            conn.close()
        elif what == b"h":
            held.append(conn)
        else:                  # b"s", or b"": a readiness probe that has closed already
            conn.close()
except TimeoutError:
    pass
"""

# A client: n connections of each kind to host:port, then holds the held ones. Each from
# a source port of its own (base, base + 1, ...): a kernel-chosen port may come round again,
# and a SYN on the 4-tuple of a server-side TIME_WAIT takes that TIME_WAIT over (the likely
# cause of one run's 47 of 48 on the app host, 5 of the proxy's 6 server-first ones).
PEER_CLIENT = r"""
import itertools, os, socket, sys, time
host, port, ready = sys.argv[1], int(sys.argv[2]), sys.argv[3]
n_client, n_server, n_held = map(int, sys.argv[4:7])
source = itertools.count(int(sys.argv[7]))
def connect():
    return socket.create_connection((host, port), timeout=5, source_address=("", next(source)))
for _ in range(n_client):
    c = connect(); c.sendall(b"c"); c.close()
for _ in range(n_server):
    c = connect(); c.sendall(b"s")
    c.recv(1); c.close()   # after the server's FIN: the server holds the TIME_WAIT
held = []
for _ in range(n_held):
    c = connect(); c.sendall(b"h"); held.append(c)
time.sleep(0.3)   # the last FINs are through
open(ready + ".tmp", "w").close(); os.rename(ready + ".tmp", ready)
time.sleep(60)
"""

# (from host, to address or host, port, client-first, server-first, held)
FLOWS = [
    ("client", "app", 8000, 30, 20, 4),        # class front
    ("app", "redis", 6379, 12, 7, 3),          # class redis
    ("app", "127.0.0.1", 8000, 9, 0, 2),       # the app host's own loopback: no class
    ("proxy", "app", 8000, 5, 6, 1),           # another host to the app's port: no class
    ("app2", "redis", 6379, 4, 3, 2),          # the second app host: class redis by app+app2
]
HOST_CLASSES = {"front": ("client", "app", 8000), "redis": ("app", "redis", 6379)}


@pytest.fixture(scope="module")
def host_scene(tmp_path_factory):
    """The four hosts with FLOWS in place: (network, work dir)."""
    from benchmarks.sandbox import hosts
    work = tmp_path_factory.mktemp("hosts")
    started = []
    try:
        net = hosts.Network("smp", hosts.ROLES,
                            sysctls={r: {"net.ipv4.tcp_tw_reuse": "0"} for r in hosts.ROLES})
    except ValueError as e:
        pytest.skip(str(e))
    with net:
        try:
            for role, port in (("app", 8000), ("redis", 6379)):
                started.append(procs.start([*net.prefix(role), sys.executable, "-c",
                                            PEER_SERVER, str(port)],
                                           log=work / f"server-{role}.log"))
                procs.wait_for_port(port, host=net.address(role), netns=net.namespace(role),
                                    proc=started[-1], timeout=15)
            for i, (src, dst, port, n_c, n_s, n_h) in enumerate(FLOWS):
                ready = work / f"ready-{i}"
                address = dst if dst[0].isdigit() else net.address(dst)
                started.append(procs.start(
                    [*net.prefix(src), sys.executable, "-c", PEER_CLIENT, address, str(port),
                     str(ready), str(n_c), str(n_s), str(n_h), str(20000 + 100 * i)],
                    log=work / f"client-{i}.log"))
                deadline = time.monotonic() + 20
                while not ready.exists():
                    assert started[-1].poll() is None, (work / f"client-{i}.log").read_text()
                    assert time.monotonic() < deadline, f"flow {FLOWS[i]} not ready"
                    time.sleep(0.05)
            yield net, work
        finally:
            for proc in reversed(started):
                procs.stop(proc)


# what each host's table holds, by the FLOWS (wait_for_port's probes add one
# client-first TIME_WAIT on the app and the redis host, over their own addresses)
EXPECTED_TW = {"client": 30, "client2": 0, "proxy": 5, "app": 20 + 12 + 9 + 6 + 1, "app2": 4,
               "redis": 7 + 3 + 1, "metrics": 0}
EXPECTED_ESTAB = {"client": 4, "client2": 0, "proxy": 1, "app": 4 + 3 + 2 * 2 + 1, "app2": 2,
                  "redis": 3 + 2, "metrics": 0}


@pytest.mark.netns
def test_hosts_each_table_by_host_pair(host_scene):
    net, work = host_scene
    out = work / "hosts.csv"
    cmd = loop.command(out, HOST_CLASSES, {}, interval=0.5, duration=2.0,
                          hosts=net.names())
    assert "--host" in cmd and "front=client,app:8000" in cmd
    run_to_end(cmd, work / "hosts.log", timeout=30)
    header, rows = read_csv(out)
    assert header == [
        "ts", "elapsed_s", "tw_total", "estab_total",
        "tw_total_client", "estab_total_client", "tw_total_client2", "estab_total_client2",
        "tw_total_proxy", "estab_total_proxy",
        "tw_total_app", "estab_total_app", "tw_total_app2", "estab_total_app2",
        "tw_total_redis", "estab_total_redis", "tw_total_metrics", "estab_total_metrics",
        "tw_front", "tw_front_client", "tw_front_server", "estab_front",
        "tw_redis", "tw_redis_client", "tw_redis_server", "estab_redis",
        "cpu_sampler", "rss_mb_sampler",
        *(f"{stem}_{host}" for host in EXPECTED_TW for stem in tables.KERNEL_COUNTERS)]
    assert 3 <= len(rows) <= 5
    for row in rows:
        got = {c: int(row[c]) for c in header[2:26]}
        assert got == {
            "tw_total": sum(EXPECTED_TW.values()), "estab_total": sum(EXPECTED_ESTAB.values()),
            **{f"tw_total_{h}": n for h, n in EXPECTED_TW.items()},
            **{f"estab_total_{h}": n for h, n in EXPECTED_ESTAB.items()},
            # the class counts only its host pair: not the loopback probe, not the proxy
            "tw_front": 50, "tw_front_client": 30, "tw_front_server": 20, "estab_front": 4,
            "tw_redis": 19, "tw_redis_client": 12, "tw_redis_server": 7, "estab_redis": 3,
        }, row
    # `ss` on each host agrees with the per-host totals (what `ss -s` means there)
    for role in ("client", "app"):
        shown = subprocess.run([*net.prefix(role), "ss", "-Htan", "state", "time-wait"],
                               capture_output=True, text=True, check=True).stdout
        assert len(shown.splitlines()) == EXPECTED_TW[role]
    # by port alone the app host would hold 20 + 6 server-side TIME_WAIT of `front`
    # (the proxy's too), and 9 + 1 client-side ones (its loopback, the probe)
    def app_tw(*flt: str) -> int:
        return len(subprocess.run([*net.prefix("app"), "ss", "-Htan", "state", "time-wait",
                                   *flt], capture_output=True, text=True,
                                  check=True).stdout.splitlines())
    assert app_tw("sport", "=", ":8000") == 20 + 6
    assert app_tw("dport", "=", ":8000") == 9 + 1


@pytest.mark.netns
def test_a_class_side_of_several_hosts_counts_each_of_them(host_scene):
    """`redis=app+app2,redis:6379` (stage 6's two app hosts): both flows to Redis."""
    net, work = host_scene
    out = work / "both.csv"
    cmd = loop.command(out, {"redis": ("app+app2", "redis", 6379)}, {}, interval=0.5,
                       duration=1.0, hosts=net.names())
    assert "redis=app+app2,redis:6379" in cmd
    run_to_end(cmd, work / "both.log", timeout=30)
    _, rows = read_csv(out)
    assert rows
    for row in rows:
        assert {c: int(row[c]) for c in ("tw_redis_client", "tw_redis_server",
                                         "estab_redis")} == {
            "tw_redis_client": 12 + 4, "tw_redis_server": 7 + 3, "estab_redis": 3 + 2}, row


@pytest.mark.netns
def test_hosts_backends_agree_with_peers(host_scene):
    """Netlink (one request, and per family) and `ss`, in the app host, by peer address."""
    net, _ = host_scene
    ports = [8000, 8000, 8000, 6379]
    peers = [net.address("client"), net.address("proxy"), "127.0.0.1", net.address("redis")]
    legacy = kernel.DiagCounter(net.namespace("app"))
    by_family = kernel.DiagCounter(net.namespace("app"))
    by_family._legacy = False
    try:
        answers = [c.count(ports, peers=peers) for c in (
            legacy, by_family, kernel.SsCounter(net.namespace("app")))]
    finally:
        legacy.close()
        by_family.close()
    expected = {kernel.TCP_ESTABLISHED: (EXPECTED_ESTAB["app"], [4, 1, 2, 0], [0, 0, 2, 3]),
                kernel.TCP_TIME_WAIT: (EXPECTED_TW["app"], [20, 6, 0, 0], [0, 0, 9, 12])}
    for answer in answers:
        assert {st: (n, list(lo), list(re)) for st, (n, lo, re) in answer.items()} == {
            st: (n, lo, re) for st, (n, lo, re) in expected.items()}
    # and this thread is back in its own namespace, where no socket has a 198.18 peer
    root = kernel.DiagCounter()
    try:
        assert root.count([8000], peers=[net.address("client")])[
            kernel.TCP_TIME_WAIT][1:] == ([0], [0])
    finally:
        root.close()
    assert kernel.host_addresses(net.namespace("app")) == [net.address("app")]


@pytest.mark.netns
def test_hosts_sampler_stops_when_its_namespaces_go(tmp_path):
    from benchmarks.sandbox import hosts
    with hosts.Network("gone", ["client", "app"]) as net:
        out = tmp_path / "gone.csv"
        proc = procs.start(loop.command(out, {"front": ("client", "app", 8000)}, {},
                                           interval=0.2, hosts=net.names()),
                           log=tmp_path / "gone.log", cwd=ROOT)
        try:
            deadline = time.monotonic() + 15
            while not out.exists() or out.read_text().count("\n") < 3:
                assert proc.poll() is None, (tmp_path / "gone.log").read_text()
                assert time.monotonic() < deadline
                time.sleep(0.05)
        except BaseException:
            procs.stop(proc)
            raise
    try:
        assert proc.wait(timeout=10) == 0
    finally:
        procs.stop(proc)
    assert "namespace is gone" in (tmp_path / "gone.log").read_text()
    _, rows = read_csv(out)
    assert len(rows) >= 2 and all(r["tw_front"] == "0" for r in rows)


def test_hosts_arguments():
    assert tables.parse_hosts(["client=ftl-1-a-client", "app=ftl-1-a-app"]) == {
        "client": "ftl-1-a-client", "app": "ftl-1-a-app"}
    assert tables.parse_host_classes(["front=client,app:8000"], ["client", "app"]) == {
        "front": ("client", "app", 8000)}
    assert tables.parse_host_classes(["redis=app+app2,redis:6379"], ["app", "app2", "redis"]
                                     ) == {"redis": ("app+app2", "redis", 6379)}
    for bad in (["redis=app+app2,app2:6379"], ["redis=app+,redis:1"], ["redis=app+db,redis:1"]):
        with pytest.raises(ValueError):
            tables.parse_host_classes(bad, ["app", "app2", "redis"])
    for bad in (["front=8000"], ["front=client>app:8000"], ["front=client,db:8000"],
                ["front=app,app:8000"], ["front=client,app:0"], ["total=client,app:1"],
                ["f=client,app:1", "f=app,client:2"]):
        with pytest.raises(ValueError):
            tables.parse_host_classes(bad, ["client", "app"])
    for bad in (["client"], ["client="], ["9=ns"], ["a=x/y"], ["a=x", "a=y"]):
        with pytest.raises(ValueError):
            tables.parse_hosts(bad)
    assert loop.command("o.csv", {"redis": ("app", "redis", 6379)}, {"app": 5},
                           hosts={"app": "A", "redis": "R"})[3:] == [
        "--out", "o.csv", "--interval", "1", "--host", "app=A", "--host", "redis=R",
        "--class", "redis=app,redis:6379", "--proc", "app=5"]
    with pytest.raises(ValueError, match="need hosts"):
        loop.Sampler({"front": ("client", "app", 1)}, {}, os.devnull)
    with pytest.raises(ValueError, match="no network namespace"):
        loop.Sampler({"front": ("client", "app", 1)}, {}, os.devnull,
                        hosts={"client": "ftl-no-such-ns", "app": "ftl-no-such-ns2"})
    for argv in (["--out", "x.csv", "--host", "a=ns", "--class", "front=80"],
                 ["--out", "x.csv", "--host", "a=ns", "--host", "b=ns2",
                  "--class", "front=a,c:80"]):
        with pytest.raises(SystemExit) as e:
            sampler.main(argv)
        assert e.value.code == 2


# Inside the app host: a listener that never accepts (backlog 1) on 9000, and one that
# accepts and closes first (TIME_WAIT held here) on 9001; then `ready`.
OVERFLOWING_SERVER = r"""
import socket, sys, threading
full = socket.create_server((sys.argv[1], 9000), backlog=1)
closer = socket.create_server((sys.argv[1], 9001), backlog=64)
def close_first():
    while True:
        conn, _ = closer.accept()
        conn.close()
threading.Thread(target=close_first, daemon=True).start()
open(sys.argv[2], "w").close()
threading.Event().wait()
"""
# From the client host: 20 connections to the full queue, 20 to the closer.
OVERFLOWING_CLIENT = r"""
import socket, sys
held = []
for _ in range(20):
    s = socket.socket()
    s.setblocking(False)
    s.connect_ex((sys.argv[1], 9000))
    held.append(s)
for _ in range(20):
    with socket.create_connection((sys.argv[1], 9001), timeout=5) as s:
        s.recv(1)  # the server's FIN: it closes first
"""


@pytest.mark.netns
def test_kernel_counters_per_host(tmp_path):
    """Each host's own TcpExt counters: a full accept queue's ListenOverflows and a
    TIME_WAIT cap's TCPTimeWaitOverflow on the app host, none on the client; the
    metrics take what they grew by while the sampler ran."""
    from benchmarks.analysis import metrics
    from benchmarks.sandbox import hosts
    net = hosts.Network("kc", ("client", "app"),
                        sysctls={"app": {"net.ipv4.tcp_max_tw_buckets": "4"}, "client": {}})
    with net:
        ready, out = tmp_path / "ready", tmp_path / "kc.csv"
        server = procs.start([*net.prefix("app"), sys.executable, "-c", OVERFLOWING_SERVER,
                              net.address("app"), str(ready)], log=tmp_path / "server.log")
        sampling = None
        try:
            deadline = time.monotonic() + 15
            while not ready.exists():
                assert server.poll() is None and time.monotonic() < deadline
                time.sleep(0.05)
            sampling = procs.start(loop.command(out, {"front": ("client", "app", 9001)}, {},
                                                interval=0.5, duration=4.0,
                                                hosts=net.names()), log=tmp_path / "s.log")
            time.sleep(1.2)
            client = subprocess.run([*net.prefix("client"), sys.executable, "-c",
                                     OVERFLOWING_CLIENT, net.address("app")],
                                    capture_output=True, text=True, timeout=30)
            assert client.returncode == 0, client.stderr
            assert sampling.wait(timeout=20) == 0, (tmp_path / "s.log").read_text()
        finally:
            for proc in (sampling, server):
                if proc:
                    procs.stop(proc)
    header, rows = read_csv(out)
    assert header[-6:] == [f"{stem}_{host}" for host in ("client", "app")
                           for stem in tables.KERNEL_COUNTERS]
    grown = metrics.kernel_counts(out)
    assert grown["tw_overflow"] >= 10, grown  # 20 closed first, 4 kept at most
    assert grown["listen_overflows"] >= 1 and grown["listen_drops"] >= grown[
        "listen_overflows"], grown
    assert all(rows[-1][f"{stem}_client"] == "0" for stem in tables.KERNEL_COUNTERS), rows[-1]
