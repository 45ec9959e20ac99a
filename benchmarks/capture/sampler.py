"""sampler - TIME_WAIT/ESTABLISHED sockets by connection class, CPU/RSS by component.

Runs beside one lab stage and writes a CSV time series, one row per interval
(1 s by default), until SIGTERM/SIGINT (it then writes a last row and exits 0)
or for --duration seconds. /proc is shared by every network namespace, so it
sees every process of the stage wherever it runs.

Two ways to count sockets:

  one namespace   started INSIDE the stage's network namespace (`ip netns exec
                  NS ...`): that namespace's sockets. A connection class is a
                  port that marks one end of a connection: `redis` (the Redis
                  port), `upstream` (the app port, behind a proxy), `front`
                  (the entry port). Both ends of a loopback connection are in
                  the one table.
  hosts           --host NAME=NETNS for each host (a network namespace of its
                  own, see benchmarks/sandbox/hosts.py); started in the root namespace,
                  as root. Each host's own socket table is counted (a netlink
                  socket made inside each namespace, its /proc/net/sockstat
                  read there), so `tw_total_app` is what `ss -s` shows on the
                  app host. A class is a host pair and a port: `front=client,
                  app:8000` counts connections from the client host to port
                  8000 of the app host, matched by the addresses at both ends
                  (read from the hosts' interfaces at the start): a warm-up
                  from elsewhere, or a probe on the app host's own loopback,
                  is in no class. It stops by itself once a host's namespace
                  is deleted.

A component is a PID counted together with all its descendants, found afresh
at every sample (gunicorn, Nginx and Locust fork workers, and workers come
and go).

USAGE: python -m benchmarks.capture.sampler --out FILE.csv [--interval S] [--duration S]
                [--host NAME=NETNS ...] [--class NAME=PORT | NAME=FROM,TO:PORT ...]
                [--proc NAME=PID ...] [--backend netlink|ss]
       python -m benchmarks.capture.sampler --snapshot DIR

   eg,
       ip netns exec NS .venv/bin/python -m benchmarks.capture.sampler --out s.csv \\
           --class redis=6379 --class front=8000 --proc redis=4100 --proc app=4120
                                    # one namespace, 1 Hz until SIGTERM
       .venv/bin/python -m benchmarks.capture.sampler --out s.csv --host client=ftl-9-4-client \\
           --host proxy=ftl-9-4-proxy --host app=ftl-9-4-app --host redis=ftl-9-4-redis \\
           --class front=client,proxy:8080 --class upstream=proxy,app:8000 \\
           --class redis=app,redis:6379 --proc app=4120
                                    # hosts: each its own socket table
       ... --duration 30            # 30 rows, then exit 0
       ip netns exec NS .venv/bin/python -m benchmarks.capture.sampler --snapshot DIR
                                    # raw ss -tanp, ss -s, netstat -tan, sockstat

   Repeating --proc NAME sums several trees into one component (e.g. Locust's
   master and workers started separately). The sampler always adds itself as
   component `sampler`.

COLUMNS (one row per sample):
   ts              unix time of the sample
   elapsed_s       seconds since the sampler started
   tw_total        TIME_WAIT sockets, from /proc/net/sockstat `tw` (IPv4+IPv6;
                   the number `ss -s` shows and tcp_max_tw_buckets limits);
                   with hosts, the sum over the hosts
   estab_total     ESTABLISHED sockets, both ends of a connection counted
                   (IPv4+IPv6); with hosts, the sum over the hosts
   tw_total_HOST   (hosts only) TIME_WAIT in HOST's own table (its sockstat)
   estab_total_HOST  (hosts only) ESTABLISHED in HOST's own table
   tw_NAME         TIME_WAIT of the class (= client + server)
   tw_NAME_client  ... held by the connecting side (it closed first): one
                   namespace, remote port = PORT; hosts, in FROM's table
   tw_NAME_server  ... held by the listening side (it closed first): one
                   namespace, local port = PORT; hosts, in TO's table
   estab_NAME      ESTABLISHED connections of the class, each once, from the
                   connecting end
   cpu_NAME        CPU of the process tree since the previous row, percent of
                   ONE core (100 = one full core; 200 = two)
   rss_mb_NAME     resident memory of the tree, MiB (shared pages are counted
                   once per process, so forked workers overstate it)
   cpu_* and rss_mb_* are empty while the component's PID is not running. The
   header is written once and every row is flushed: a kill loses at most one.

REQUIREMENTS: Linux, /proc, NETLINK_SOCK_DIAG with tcp_diag (every distribution
   kernel has them; `ss` uses the same). No root, except to enter a namespace
   (--host: setns into each, so root).
   `ss` for --backend ss and --snapshot; `netstat` (net-tools) for --snapshot.

OVERHEAD: per sample: a read of /proc/net/sockstat; one inet_diag dump over
   netlink (the TCPDIAG_GETSOCK request: TIME_WAIT and ESTABLISHED, IPv4 and
   IPv6, in one walk of the kernel's socket table; a dump per state when both
   are plentiful), its port fields counted without a Python loop per socket;
   one read of /proc/PID/stat per process (ppid, CPU times, RSS). No
   psutil.net_connections() (~230 ms a call at 25k sockets), no netstat
   (~110 ms), no `ss` fork per sample (50-70 ms of CPU at 25k). Measured with
   benchmarks/studies/sampler_cost.py on 2 noisy cores with 25,000 TIME_WAIT: ~6-10 ms
   of CPU a sample, mostly the kernel's, so ~1% of one core at 1 Hz in one
   namespace (--backend ss: ~8%). With hosts, a dump and a sockstat read per
   host (two setns each): four hosts, two of them with 25,000 TIME_WAIT,
   cost 2.6% of one core, 1.3% per loaded host. Its own CPU, children
   included, is in cpu_sampler.

SEE ALSO: benchmarks/studies/sampler_cost.py; ss(8); proc(5) /proc/net/sockstat,
   /proc/PID/stat; sock_diag(7).
"""

from __future__ import annotations

import argparse
import csv
import ctypes
import fcntl
import os
import re
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Mapping
from contextlib import contextmanager
from pathlib import Path

# --- sockets: netlink inet_diag -------------------------------------------------

NETLINK_SOCK_DIAG = 4
TCPDIAG_GETSOCK = 18        # the original request: AF_UNSPEC, so IPv4 and IPv6 in one walk
SOCK_DIAG_BY_FAMILY = 20    # the v2 request: one family per dump
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
NLMSG_ERROR, NLMSG_DONE = 2, 3
TCP_ESTABLISHED, TCP_TIME_WAIT = 1, 6
IPPROTO_TCP = 6
_NLMSG_HDR = 16
_DIAG_MSG = 72              # struct inet_diag_msg, attributes may follow
_SPORT, _DPORT = _NLMSG_HDR + 4, _NLMSG_HDR + 6   # network byte order
_DST = _NLMSG_HDR + 24      # the remote address (IPv4: its first 4 bytes)


# --- network namespaces: a host's socket table from outside it ----------------------

NETNS_DIR = "/run/netns"    # where `ip netns add` puts a namespace's name
CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def _setns(fd: int) -> None:
    if hasattr(os, "setns"):   # Python 3.12+
        os.setns(fd, CLONE_NEWNET)
    elif _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


@contextmanager
def in_netns(name: str | None):
    """Run the block in network namespace `name` (this thread only); None: where it is.

    A socket stays in the namespace it was made in, and a /proc/thread-self/net
    file shows the namespace it was opened in: made inside the block, they
    count that namespace's sockets after it. Needs root (CAP_SYS_ADMIN).
    """
    if name is None:
        yield
        return
    target = os.open(os.path.join(NETNS_DIR, name), os.O_RDONLY | os.O_CLOEXEC)
    try:
        home = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        try:
            _setns(target)
            try:
                yield
            finally:
                _setns(home)
        finally:
            os.close(home)
    finally:
        os.close(target)


SIOCGIFADDR = 0x8915


def host_addresses(netns: str | None) -> list[str]:
    """The IPv4 addresses of a namespace's interfaces, loopback left out."""
    found = []
    with in_netns(netns), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _, name in socket.if_nameindex():
            try:
                answer = fcntl.ioctl(s.fileno(), SIOCGIFADDR,
                                     struct.pack("256s", name.encode()[:15]))
            except OSError:   # no IPv4 address on it
                continue
            address = socket.inet_ntoa(answer[20:24])
            if not address.startswith("127."):
                found.append(address)
    return found


class DiagCounter:
    """Counts TCP sockets by state and port, straight from the kernel.

    One NETLINK_SOCK_DIAG socket is kept open; each count() is one dump: every
    socket in the wanted states, IPv4 and IPv6, in a single walk of the
    kernel's table. The answer comes in ~32 KiB chunks of records, and the
    records of one state have one size: a run of like records is recognised
    from its length, type and state fields (strided slices, compared whole)
    and its port fields counted with bytes.count, not a Python loop per
    socket. A chunk that mixes states too finely is walked record by record.
    """

    MAX_RUNS = 24   # runs per chunk worth measuring; more, and walking it is cheaper

    def __init__(self, netns: str | None = None) -> None:
        self.netns = netns    # count this namespace's sockets (None: the one it runs in)
        self._sock: socket.socket | None = None
        self._buf = bytearray(1 << 16)
        self._seq = 0
        self._legacy = True   # TCPDIAG_GETSOCK until the kernel refuses it
        self._keys: list[tuple[int, bytes | None]] = []
        self._patterns: list[bytes] = []
        self._row = b"\0\0\0"

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def count(self, ports: list[int], states: Iterable[int] = (TCP_ESTABLISHED, TCP_TIME_WAIT),
              peers: list[str] | None = None) -> dict[int, tuple[int, list[int], list[int]]]:
        """state -> (sockets, per port: local port == it, remote port == it).

        `peers`, one IPv4 address per port: count a socket for port i only if
        its remote address is peers[i] too (a host pair: who is at the other
        end). IPv6 sockets then never match.
        """
        states = tuple(states)
        if peers is not None and len(peers) != len(ports):
            raise ValueError("one peer address per port")
        self._prepare(ports, peers)
        for attempt in range(3):
            try:
                acc = {st: [0, [0] * len(ports), [0] * len(ports)] for st in states}
                self._count(states, acc)
                return {st: (a[0], a[1], a[2]) for st, a in acc.items()}
            except _Truncated:   # the buffer has grown; ask again
                self.close()
                if attempt == 2:
                    raise
            except BaseException:
                self.close()   # never reuse a socket with half a dump queued on it
                raise
        raise AssertionError("unreachable")

    def _prepare(self, ports: list[int], peers: list[str] | None = None) -> None:
        """What the parsers look for: each port (and peer) as read natively, and as
        patterns of 3 bytes (port, filler) or 8 (port, address, family, filler)."""
        wire = [struct.pack(">H", p) for p in ports]
        addrs = [socket.inet_aton(a) for a in peers] if peers is not None else None
        self._keys = [(struct.unpack("=H", w)[0], addrs[i] if addrs else None)
                      for i, w in enumerate(wire)]
        if addrs:   # port, address, family (IPv4: an IPv6 address never matches)
            wire = [w + a + bytes([socket.AF_INET]) for w, a in zip(wire, addrs, strict=True)]
        filler = next(b for b in range(256) if all(b not in w for w in wire))   # see _tally
        self._patterns = [w + bytes([filler]) for w in wire]
        self._row = bytes(len(wire[0]) if wire else 2) + bytes([filler])

    def _count(self, states: tuple[int, ...], acc: dict) -> None:
        if self._legacy:
            try:
                return self._dump(TCPDIAG_GETSOCK, socket.AF_INET, states, acc)
            except _KernelError:
                self._legacy = False   # a kernel without the old request: a dump per family
                self.close()
                for a in acc.values():
                    a[0], a[1][:], a[2][:] = 0, [0] * len(a[1]), [0] * len(a[2])
        for family in (socket.AF_INET, socket.AF_INET6):
            self._dump(SOCK_DIAG_BY_FAMILY, family, states, acc)

    def _request(self, kind: int, family: int, states: tuple[int, ...]) -> bytes:
        self._seq += 1
        mask = sum(1 << st for st in set(states))
        if kind == TCPDIAG_GETSOCK:   # struct inet_diag_req
            body = struct.pack("=BBBB48sII", family, 0, 0, 0, b"", mask, 0)
        else:                          # struct inet_diag_req_v2
            body = struct.pack("=BBBBI48s", family, IPPROTO_TCP, 0, 0, mask, b"")
        return struct.pack("=IHHII", _NLMSG_HDR + len(body), kind,
                           NLM_F_REQUEST | NLM_F_DUMP, self._seq, 0) + body

    def _dump(self, kind: int, family: int, states: tuple[int, ...], acc: dict) -> None:
        if self._sock is None:
            with in_netns(self.netns):
                self._sock = socket.socket(socket.AF_NETLINK,
                                           socket.SOCK_RAW | socket.SOCK_CLOEXEC,
                                           NETLINK_SOCK_DIAG)
        self._sock.sendall(self._request(kind, family, states))
        while True:
            size = len(self._buf)
            n = self._sock.recv_into(self._buf, size, socket.MSG_TRUNC)
            if n > size:   # the kernel sends at most ~32 KiB at once; just in case
                self._buf = bytearray(2 * n)
                raise _Truncated(f"netlink message of {n} bytes truncated")
            if self._chunk(n, kind, acc):
                return

    def _chunk(self, n: int, kind: int, acc: dict) -> bool:
        """Count one chunk of the answer; True when it ends the dump."""
        return self._walk(self._bulk(n, kind, acc), n, kind, acc)

    def _bulk(self, n: int, kind: int, acc: dict) -> int:
        """Count the chunk's records without a loop per record; bytes counted (0: none).

        The records come in runs of one length (one state): all TIME_WAIT,
        or TIME_WAIT with an ESTABLISHED here and there. Each run is measured
        at once (`_like`), the runs of each length gathered, and each kind
        counted at once (`_tally`). Nothing is counted unless every record
        sits where the previous one's length says, with the right type, and
        every kind is in one state; otherwise, or past MAX_RUNS runs (walking
        is then cheaper), the chunk is left to the walk.
        """
        buf, off, runs, parts = self._buf, 0, 0, {}
        while off + _NLMSG_HDR <= n:
            ln, typ = struct.unpack_from("=IH", buf, off)
            if typ != kind:
                break   # NLMSG_DONE or an error: the walk's
            runs += 1
            if ln % 4 or ln < _NLMSG_HDR + _DIAG_MSG or off + ln > n or runs > self.MAX_RUNS:
                return 0
            k = (n - off) // ln
            if k > 1 and struct.unpack_from("=I", buf, off + ln)[0] == ln:
                run = self._like(buf, off, ln, k, kind)
            else:
                run = 1
            parts.setdefault(ln, []).append((off, run))
            off += run * ln
        pieces = []   # (data, where the records start, how many, their length)
        for ln, spans in parts.items():
            if len(spans) == 1:
                pieces.append((buf, spans[0][0], spans[0][1], ln))
            else:
                data = b"".join(buf[at:at + run * ln] for at, run in spans)
                pieces.append((data, 0, len(data) // ln, ln))
        return off if pieces and self._tally(pieces, acc) else 0

    @staticmethod
    def _like(data, start: int, ln: int, k: int, kind: int) -> int:
        """How many of the k records of length ln from `start` have that length and type.

        (Fewer than k if `data` ends before them.)
        """
        k = min(k, (len(data) - start) // ln)
        if k < 1:
            return 0
        with memoryview(data)[start:start + k * ln] as mv:
            with mv.cast("I") as u32:
                lens = u32[0::ln // 4].tobytes()
            with mv.cast("H") as u16:
                types = u16[2::ln // 2].tobytes()
        return min(_common_prefix(lens, struct.pack("=I", ln) * k) // 4,
                   _common_prefix(types, struct.pack("=H", kind) * k) // 2)

    def _tally(self, pieces: list, acc: dict) -> bool:
        """Count pieces of like records [(data, start, count, length)], each in one state.

        Counts nothing and returns False if a piece mixes states.
        """
        states = []
        for data, start, count, ln in pieces:
            st = data[start + _NLMSG_HDR + 1:start + count * ln:ln]
            if st != st[:1] * count:
                return False
            states.append(st[0] if count else None)
        for (data, start, count, ln), st in zip(pieces, states, strict=True):
            a = acc.get(st)
            if a is None:
                continue
            a[0] += count
            end = start + count * ln
            width = len(self._row)
            for field, counts in ((_SPORT, a[1]), (_DPORT, a[2])):
                # each record becomes 3 bytes: the port (network order) and a
                # byte that no wanted port has, so a pattern only matches at a
                # record; with peers, 8: port, remote address, family, filler
                rows = bytearray(self._row) * count
                rows[0::width] = data[start + field:end:ln]
                rows[1::width] = data[start + field + 1:end:ln]
                if width > 3:
                    for k in range(4):
                        rows[2 + k::width] = data[start + _DST + k:end:ln]
                    rows[6::width] = data[start + _NLMSG_HDR:end:ln]
                for i, pattern in enumerate(self._patterns):
                    counts[i] += rows.count(pattern)
        return True

    def _walk(self, off: int, n: int, kind: int, acc: dict) -> bool:
        """Count records from `off` one by one; True at NLMSG_DONE."""
        buf = self._buf
        while off + _NLMSG_HDR <= n:
            ln, typ = struct.unpack_from("=IH", buf, off)
            if typ == NLMSG_DONE:
                return True
            if typ == NLMSG_ERROR:
                err = struct.unpack_from("=i", buf, off + _NLMSG_HDR)[0]
                if err:
                    raise _KernelError(-err, f"inet_diag: {os.strerror(-err)}")
            if ln < _NLMSG_HDR or off + ln > n:
                raise OSError(f"malformed netlink message (len {ln} at {off} of {n})")
            if typ == kind and ln >= _NLMSG_HDR + _DIAG_MSG:
                a = acc.get(buf[off + _NLMSG_HDR + 1])
                if a is not None:
                    a[0] += 1
                    sport, dport = struct.unpack_from("=HH", buf, off + _SPORT)
                    peer = bytes(buf[off + _DST:off + _DST + 4])
                    ipv4 = buf[off + _NLMSG_HDR] == socket.AF_INET
                    for i, (key, want) in enumerate(self._keys):
                        if want is not None and (peer != want or not ipv4):
                            continue
                        if sport == key:
                            a[1][i] += 1
                        if dport == key:
                            a[2][i] += 1
            off += (ln + 3) & ~3
        return False


def _common_prefix(a: bytes, b: bytes) -> int:
    """How many leading bytes two equal-length byte strings share (no Python loop)."""
    if a == b:
        return len(a)
    diff = int.from_bytes(a, "big") ^ int.from_bytes(b, "big")
    return len(a) - (diff.bit_length() + 7) // 8


class _KernelError(OSError):
    """The kernel answered a request with NLMSG_ERROR."""


class _Truncated(OSError):
    """A netlink message was larger than the receive buffer."""


class SsCounter:
    """The same counts from one `ss` call (a fork, and text for every socket)."""

    NAMES = {TCP_ESTABLISHED: "established", TCP_TIME_WAIT: "time-wait"}
    LABELS = {TCP_ESTABLISHED: b"ESTAB", TCP_TIME_WAIT: b"TIME-WAIT"}

    def __init__(self, netns: str | None = None) -> None:
        self._ss = shutil.which("ss") or shutil.which("ss", path="/usr/sbin:/sbin:/usr/bin")
        if not self._ss:
            raise OSError("ss not found (Debian/Ubuntu: apt-get install iproute2)")
        self.netns = netns

    def close(self) -> None:
        pass

    def count(self, ports: list[int], states: Iterable[int] = (TCP_ESTABLISHED, TCP_TIME_WAIT),
              peers: list[str] | None = None) -> dict[int, tuple[int, list[int], list[int]]]:
        """state -> (sockets, per port: local port == it, remote port == it); see DiagCounter."""
        states = tuple(states)
        cmd = ["ip", "netns", "exec", self.netns] if self.netns else []
        cmd += [self._ss, "-Htan"]
        for st in states:
            cmd += ["state", self.NAMES[st]]
        out = subprocess.run(cmd, capture_output=True, check=True).stdout
        keys = [(p, peers[i].encode() if peers is not None else None)
                for i, p in enumerate(ports)]
        acc = {st: [0, [0] * len(ports), [0] * len(ports)] for st in states}
        by_label = {self.LABELS[st]: acc[st] for st in states}
        only = acc[states[0]] if len(states) == 1 else None   # one state: no State column
        for line in out.splitlines():
            fields = line.split()
            if len(fields) < 4:
                continue
            a = only if only is not None else by_label.get(fields[0])
            if a is None:
                continue
            a[0] += 1
            lport = int(fields[-2].rsplit(b":", 1)[1])
            raddr, _, rport = fields[-1].rpartition(b":")
            rport = int(rport)
            for i, (port, peer) in enumerate(keys):
                if peer is not None and raddr != peer:
                    continue
                if lport == port:
                    a[1][i] += 1
                if rport == port:
                    a[2][i] += 1
        return {st: (a[0], a[1], a[2]) for st, a in acc.items()}


BACKENDS = {"netlink": DiagCounter, "ss": SsCounter}


def read_sockstat(path: str = "/proc/net/sockstat") -> dict[str, int]:
    """The TCP line of /proc/net/sockstat as numbers: inuse, orphan, tw, alloc, mem."""
    with open(path, "rb") as f:
        for line in f:
            if line.startswith(b"TCP:"):
                it = iter(line.split()[1:])
                return {k.decode(): int(v) for k, v in zip(it, it, strict=True)}
    raise OSError(f"no TCP line in {path}")


# --- processes ------------------------------------------------------------------

_CLK_TCK = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


def scan_processes() -> dict[int, tuple[int, int, int, int, int]]:
    """Every process: pid -> (ppid, starttime, own ticks, reaped children's ticks, RSS bytes).

    One read of /proc/PID/stat each (psutil.process_iter costs ~4x this).
    """
    stats = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb", buffering=0) as f:
                data = f.read()
        except OSError:   # gone since listdir
            continue
        f = data[data.rfind(b")") + 2:].split()
        # fields from `state` on: ppid=1, utime=11, stime=12, cutime=13, cstime=14,
        # starttime=19, rss=21 (proc(5) numbers them 3, 4, 14-17, 22, 24)
        stats[int(name)] = (int(f[1]), int(f[19]), int(f[11]) + int(f[12]),
                            int(f[13]) + int(f[14]), int(f[21]) * _PAGE)
    return stats


class Component:
    """CPU and RSS of the trees under some root PIDs, between two samples.

    CPU of a tree over an interval = for each member, growth of its own time
    and of its reaped children's time (a process new since the last sample
    counts from zero), less the last-seen total of every member that vanished
    while its parent stayed in the tree: the parent reaped it, so its whole
    time just moved into the parent's children time. Zombies stay members
    until reaped, so nothing is counted twice. A process reparented out of the
    tree stops counting; one reaped by a parent that ignores SIGCHLD loses its
    last interval.
    """

    def __init__(self, name: str, roots: Iterable[int], descendants: bool = True) -> None:
        self.name = name
        self.roots = list(dict.fromkeys(roots))
        self.descendants = descendants
        self._root_start: dict[int, int] = {}
        self._prev: dict[tuple[int, int], tuple[int, int, tuple[int, int] | None]] | None = None

    def members(self, stats: Mapping, children: Mapping[int, list[int]]) -> list[int]:
        out, todo, seen = [], [], set()
        for root in self.roots:
            st = stats.get(root)
            if st is None:
                if self._prev is None:
                    self._root_start[root] = -1   # not running at the start: never adopt the PID
                continue
            if self._root_start.setdefault(root, st[1]) != st[1]:
                continue   # the PID was reused: that is not our process
            todo.append(root)
        while todo:
            pid = todo.pop()
            if pid in seen:
                continue
            seen.add(pid)
            out.append(pid)
            if self.descendants:
                todo.extend(children.get(pid, ()))
        return out

    def update(self, stats: Mapping, children: Mapping[int, list[int]],
               dt: float | None) -> tuple[float | None, float | None]:
        """(CPU % of one core since the last update, RSS MiB); None when nothing runs."""
        cur: dict[tuple[int, int], tuple[int, int, tuple[int, int] | None]] = {}
        ticks, rss = 0, 0
        prev = self._prev
        for pid in self.members(stats, children):
            ppid, start, own, reaped, mem = stats[pid]
            parent = stats.get(ppid)
            cur[(pid, start)] = (own, reaped, (ppid, parent[1]) if parent else None)
            rss += mem
            if prev is not None:
                before = prev.get((pid, start))
                ticks += own + reaped - (before[0] + before[1] if before else 0)
        if prev is not None:
            for key, (own, reaped, parent) in prev.items():
                if key not in cur and parent in cur:
                    ticks -= own + reaped
        self._prev = cur
        if not cur:
            return None, None
        cpu = None if prev is None or not dt else max(0, ticks) / _CLK_TCK / dt * 100.0
        return cpu, rss / 1048576.0


# --- the sampler ----------------------------------------------------------------

_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")


def _split(spec: str, what: str) -> tuple[str, int]:
    name, sep, value = spec.partition("=")
    name = name.strip()
    if not sep or not _NAME.match(name):
        raise ValueError(f"{what} {spec!r}: expected NAME=NUMBER, NAME a letter then "
                         "letters, digits or _")
    try:
        number = int(value)
    except ValueError:
        raise ValueError(f"{what} {spec!r}: {value!r} is not a number") from None
    return name, number


def parse_classes(specs: Iterable[str]) -> dict[str, int]:
    """["redis=6379", "front=8000"] -> {"redis": 6379, "front": 8000} (order kept)."""
    classes: dict[str, int] = {}
    for spec in specs:
        name, port = _split(spec, "--class")
        if not 0 < port < 65536:
            raise ValueError(f"--class {spec!r}: port out of range")
        if name in classes:
            raise ValueError(f"--class {name} given twice")
        if name == "total":
            raise ValueError("--class total: the name is taken by tw_total/estab_total")
        classes[name] = port
    return classes


_PAIR = re.compile(r"^([A-Za-z][A-Za-z0-9_]*),([A-Za-z][A-Za-z0-9_]*):(\d+)$")


def parse_host_classes(specs: Iterable[str], hosts: Iterable[str]
                       ) -> dict[str, tuple[str, str, int]]:
    """["front=client,app:8000"] -> {"front": ("client", "app", 8000)}.

    A class between hosts: connections from host `client` to port 8000 of
    host `app` (FROM and TO among `hosts`).
    """
    hosts = list(hosts)
    classes: dict[str, tuple[str, str, int]] = {}
    for spec in specs:
        name, sep, value = spec.partition("=")
        pair = _PAIR.match(value.strip())
        if not sep or not _NAME.match(name.strip()) or not pair:
            raise ValueError(f"--class {spec!r}: with --host, expected NAME=FROM,TO:PORT "
                             "(e.g. front=client,app:8000)")
        name = name.strip()
        src, dst, port = pair.group(1), pair.group(2), int(pair.group(3))
        if not 0 < port < 65536:
            raise ValueError(f"--class {spec!r}: port out of range")
        for host in (src, dst):
            if host not in hosts:
                raise ValueError(f"--class {spec!r}: no --host {host} (hosts: "
                                 f"{', '.join(hosts) or 'none'})")
        if src == dst:
            raise ValueError(f"--class {spec!r}: FROM and TO are the same host")
        if name in classes:
            raise ValueError(f"--class {name} given twice")
        if name == "total":
            raise ValueError("--class total: the name is taken by tw_total/estab_total")
        classes[name] = (src, dst, port)
    return classes


def parse_hosts(specs: Iterable[str]) -> dict[str, str]:
    """["client=ftl-12-4-client"] -> {"client": "ftl-12-4-client"}: host name -> namespace."""
    hosts: dict[str, str] = {}
    for spec in specs:
        name, sep, netns = (part.strip() for part in spec.partition("="))
        if not sep or not _NAME.match(name) or not netns or "/" in netns:
            raise ValueError(f"--host {spec!r}: expected NAME=NETNS, NETNS a name from "
                             "`ip netns list`")
        if name in hosts:
            raise ValueError(f"--host {name} given twice")
        hosts[name] = netns
    return hosts


def parse_procs(specs: Iterable[str]) -> dict[str, list[int]]:
    """["app=120", "locust=300", "locust=301"] -> {"app": [120], "locust": [300, 301]}."""
    procs: dict[str, list[int]] = {}
    for spec in specs:
        name, pid = _split(spec, "--proc")
        if pid <= 0:
            raise ValueError(f"--proc {spec!r}: not a PID")
        if name == "sampler":
            raise ValueError("--proc sampler: the sampler adds itself under that name")
        procs.setdefault(name, []).append(pid)
    return procs


def columns(classes: Iterable[str], procs: Iterable[str], hosts: Iterable[str] = ()) -> list[str]:
    """The CSV header for these class, component and host names (`sampler` comes last)."""
    cols = ["ts", "elapsed_s", "tw_total", "estab_total"]
    for name in hosts:
        cols += [f"tw_total_{name}", f"estab_total_{name}"]
    for name in classes:
        cols += [f"tw_{name}", f"tw_{name}_client", f"tw_{name}_server", f"estab_{name}"]
    for name in [*procs, "sampler"]:
        cols += [f"cpu_{name}", f"rss_mb_{name}"]
    if len(set(cols)) != len(cols):
        raise ValueError(f"class/component names give the same column twice: {cols}")
    return cols


class _Table:
    """One network namespace's socket table, and which of its counts go to which class.

    Each key (a port, and in host mode the address at the other end) feeds
    one class: from the connecting side (`client`: TIME_WAIT held there, and
    ESTABLISHED, each connection once), from the listening side (`server`:
    TIME_WAIT held there), or, in one namespace, `both`.
    """

    def __init__(self, host: str | None, netns: str | None, backend: str) -> None:
        self.host, self.netns, self.backend = host, netns, backend
        self.counter: DiagCounter | SsCounter = BACKENDS[backend](netns)
        self.ports: list[int] = []
        self.peers: list[str] | None = [] if netns else None
        self.uses: list[tuple[int, str]] = []
        self._split = False
        self._sockstat = "/proc/thread-self/net/sockstat" if netns else "/proc/net/sockstat"

    def add(self, port: int, peer: str | None, cls: int, side: str) -> None:
        self.ports.append(port)
        if self.peers is not None:
            self.peers.append(peer)
        self.uses.append((cls, side))

    def close(self) -> None:
        self.counter.close()

    def time_wait(self) -> int:
        """TIME_WAIT of the namespace, from its /proc/net/sockstat."""
        with in_netns(self.netns):
            return read_sockstat(self._sockstat)["tw"]

    def count(self) -> dict[int, tuple[int, list[int], list[int]]]:
        """ESTABLISHED (and TIME_WAIT if there are keys) by key, in one dump or two.

        One dump walks the kernel's table once. But when both states are
        plentiful their records interleave so finely that the counter has to
        walk them one by one; then a dump per state is cheaper. The last
        sample's counts decide.
        """
        try:
            if not self.ports:
                return self.counter.count(self.ports, (TCP_ESTABLISHED,), self.peers)
            if not self._split:
                counts = self.counter.count(self.ports, (TCP_ESTABLISHED, TCP_TIME_WAIT),
                                            self.peers)
            else:
                counts = {**self.counter.count(self.ports, (TCP_ESTABLISHED,), self.peers),
                          **self.counter.count(self.ports, (TCP_TIME_WAIT,), self.peers)}
        except OSError as e:
            if self.backend != "netlink":
                raise
            where = f" (host {self.host})" if self.host else ""
            print(f"sampler: netlink sock_diag failed{where} ({e}); falling back to ss",
                  file=sys.stderr)
            self.backend, self.counter = "ss", SsCounter(self.netns)
            return self.count()
        few, many = sorted((counts[TCP_ESTABLISHED][0], counts[TCP_TIME_WAIT][0]))
        self._split = self.backend == "netlink" and few > 500 and few * 8 > many
        return counts


class Sampler:
    """Samples sockets and process trees; `run()` writes the CSV.

    One namespace (`hosts` None): `classes` is name -> port, counted in the
    network namespace the sampler runs in. Hosts: `hosts` is host name ->
    network namespace (its name under /run/netns) and `classes` is name ->
    (connecting host, listening host, port); each host's own socket table
    is counted, and a class counts only connections between its two hosts'
    addresses (found in their namespaces at the start). `procs`: name ->
    PID or PIDs (each with all its descendants).
    """

    def __init__(self, classes: Mapping[str, int | tuple[str, str, int]],
                 procs: Mapping[str, int | Iterable[int]],
                 out_path: str | os.PathLike, interval: float = 1.0,
                 backend: str = "netlink", hosts: Mapping[str, str] | None = None) -> None:
        if interval <= 0:
            raise ValueError("interval must be > 0")
        self.classes = dict(classes)
        self.hosts = dict(hosts or {})
        if "sampler" in procs:
            raise ValueError("the sampler adds itself as component `sampler`")
        self.components = [Component(name, [pids] if isinstance(pids, int) else pids)
                           for name, pids in procs.items()]
        # itself and the children it has reaped (`ss`), not whatever else the
        # process that imported it runs
        self.components.append(Component("sampler", [os.getpid()], descendants=False))
        self.columns = columns(self.classes, procs, self.hosts)
        self.out_path = Path(out_path)
        self.interval = float(interval)
        self.backend = backend
        self._tables = self._make_tables()
        self._t0 = self._last = 0.0

    def _make_tables(self) -> list[_Table]:
        if not self.hosts:
            if not all(isinstance(port, int) for port in self.classes.values()):
                raise ValueError("classes by host pair need hosts")
            table = _Table(None, None, self.backend)
            for i, port in enumerate(self.classes.values()):
                table.add(port, None, i, "both")
            return [table]
        for name, spec in self.classes.items():
            if isinstance(spec, int) or len(spec) != 3:
                raise ValueError(f"class {name}: with hosts, (FROM, TO, PORT), not {spec!r}")
            src, dst, _ = spec
            for host in (src, dst):
                if host not in self.hosts:
                    raise ValueError(f"class {name}: no host {host!r}")
            if src == dst:
                raise ValueError(f"class {name}: FROM and TO are the same host")
        addresses = {}
        for host, netns in self.hosts.items():
            if not os.path.exists(os.path.join(NETNS_DIR, netns)):
                raise ValueError(f"host {host}: no network namespace {netns!r} "
                                 "(see `ip netns list`)")
            addresses[host] = host_addresses(netns)
            if not addresses[host]:
                raise ValueError(f"host {host}: namespace {netns} has no IPv4 address "
                                 "besides loopback")
        tables = {host: _Table(host, netns, self.backend) for host, netns in self.hosts.items()}
        for i, (src, dst, port) in enumerate(self.classes.values()):
            for peer in addresses[dst]:
                tables[src].add(port, peer, i, "client")
            for peer in addresses[src]:
                tables[dst].add(port, peer, i, "server")
        return list(tables.values())

    def close(self) -> None:
        for table in self._tables:
            table.close()

    def namespaces_gone(self) -> list[str]:
        """Hosts whose namespace has been deleted (the lab is over: stop)."""
        return [h for h, ns in self.hosts.items()
                if not os.path.exists(os.path.join(NETNS_DIR, ns))]

    def prime(self) -> None:
        """Start the clock and the CPU baselines (the first row comes one interval later)."""
        self._t0 = self._last = time.monotonic()
        self._procs(None)

    def _procs(self, dt: float | None) -> list[tuple[float | None, float | None]]:
        stats = scan_processes()
        children: dict[int, list[int]] = {}
        for pid, st in stats.items():
            children.setdefault(st[0], []).append(pid)
        return [c.update(stats, children, dt) for c in self.components]

    def sample(self) -> list:
        """One row, in `columns` order (call `prime()` first)."""
        now = time.monotonic()
        ts = time.time()
        n = len(self.classes)
        tw_client, tw_server, estab = [0] * n, [0] * n, [0] * n
        per_host = []
        for table in self._tables:
            tw_total = table.time_wait()
            counts = table.count()
            estab_total, _, estab_remote = counts[TCP_ESTABLISHED]
            _, tw_local, tw_remote = counts.get(TCP_TIME_WAIT, (0, [], []))
            per_host.append((tw_total, estab_total))
            for k, (cls, side) in enumerate(table.uses):
                if side != "server":
                    tw_client[cls] += tw_remote[k]
                    estab[cls] += estab_remote[k]
                if side != "client":
                    tw_server[cls] += tw_local[k]
        row: list = [f"{ts:.3f}", f"{now - self._t0:.3f}", sum(tw for tw, _ in per_host),
                     sum(es for _, es in per_host)]
        if self.hosts:
            for tw_total, estab_total in per_host:
                row += [tw_total, estab_total]
        for i in range(n):
            row += [tw_client[i] + tw_server[i], tw_client[i], tw_server[i], estab[i]]
        for cpu, rss in self._procs(now - self._last):
            row += ["" if cpu is None else f"{cpu:.1f}", "" if rss is None else f"{rss:.1f}"]
        self._last = now
        return row

    def run(self, stop_event=None, duration: float | None = None) -> int:
        """Write the CSV until `stop_event` is set or `duration` s passed. Returns rows written.

        `stop_event`: anything with `wait(timeout) -> bool` (a threading.Event).
        On stop, a last row is written if a quarter interval has passed since the
        previous one.
        """
        stop = stop_event if stop_event is not None else threading.Event()
        self.out_path.parent.mkdir(parents=True, exist_ok=True)
        rows = 0
        try:
            with open(self.out_path, "w", newline="") as f:
                out = csv.writer(f, lineterminator="\n")
                out.writerow(self.columns)
                f.flush()
                self.prime()
                end = None if duration is None else self._t0 + duration
                tick = self._t0 + self.interval
                while True:
                    wake = tick if end is None else min(tick, end)
                    stopped = stop.wait(max(0.0, wake - time.monotonic()))
                    gone = self.namespaces_gone()
                    if gone:   # counting them now would fail, or count a dying namespace
                        print(f"sampler: host {gone[0]}'s namespace is gone; stopping",
                              file=sys.stderr)
                        return rows
                    now = time.monotonic()
                    last = stopped or (end is not None and now >= end - 1e-3)
                    if not last or now - self._last >= 0.25 * self.interval:
                        out.writerow(self.sample())
                        f.flush()
                        rows += 1
                    if last:
                        return rows
                    tick += self.interval
                    while tick <= now:   # stay on the grid; skip ticks missed while busy
                        tick += self.interval
        finally:
            self.close()


def command(out: str | os.PathLike, classes: Mapping[str, int | tuple[str, str, int]],
            procs: Mapping[str, int | Iterable[int]], interval: float = 1.0,
            duration: float | None = None, netns: str | None = None,
            python: str = sys.executable, backend: str | None = None,
            hosts: Mapping[str, str] | None = None) -> list[str]:
    """The command line that runs the sampler; run it from the repo root.

    One namespace: `classes` name -> port, counted where it runs (in `netns`
    if given). Hosts: `hosts` name -> namespace and `classes` name ->
    (connecting host, listening host, port); run it in the root namespace.
    """
    cmd = ["ip", "netns", "exec", netns] if netns else []
    cmd += [python, "-m", "benchmarks.capture.sampler", "--out", str(out),
            "--interval", f"{interval:g}"]
    if duration is not None:
        cmd += ["--duration", f"{duration:g}"]
    if backend:
        cmd += ["--backend", backend]
    for name, ns in (hosts or {}).items():
        cmd += ["--host", f"{name}={ns}"]
    for name, spec in classes.items():
        if isinstance(spec, int):
            cmd += ["--class", f"{name}={spec}"]
        else:
            src, dst, port = spec
            cmd += ["--class", f"{name}={src},{dst}:{port}"]
    for name, pids in procs.items():
        for pid in [pids] if isinstance(pids, int) else pids:
            cmd += ["--proc", f"{name}={pid}"]
    return cmd


# --- end of stage: raw snapshots, peaks -----------------------------------------

SNAPSHOTS = {
    "ss-tanp.txt": ["ss", "-tanp"],
    "ss-s.txt": ["ss", "-s"],
    "netstat-tan.txt": ["netstat", "-tan"],
    "sockstat.txt": ["cat", "/proc/net/sockstat"],
}


def snapshot(out_dir: str | os.PathLike, netns: str | None = None,
             timeout: float = 120.0) -> dict[str, Path]:
    """Raw `ss -tanp`, `ss -s`, `netstat -tan` and /proc/net/sockstat into `out_dir`.

    Of the namespace this runs in, or of `netns` (through `ip netns exec`).
    A tool that is missing or fails leaves a `# ...` line saying so in its
    file. Returns file name -> path.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    prefix = ["ip", "netns", "exec", netns] if netns else []
    written = {}
    for name, cmd in SNAPSHOTS.items():
        path = out / name
        exe = shutil.which(cmd[0]) or shutil.which(cmd[0], path="/usr/sbin:/sbin:/usr/bin:/bin")
        if not exe:
            path.write_text(f"# {cmd[0]} not found; Debian/Ubuntu: apt-get install "
                            f"{'net-tools' if cmd[0] == 'netstat' else 'iproute2'}\n")
        else:
            try:
                done = subprocess.run([*prefix, exe, *cmd[1:]], capture_output=True,
                                      timeout=timeout)
                text = done.stdout
                if done.returncode:
                    text += (f"# {' '.join(cmd)} exited {done.returncode}: ".encode()
                             + done.stderr[-2000:])
            except subprocess.TimeoutExpired:
                text = f"# {' '.join(cmd)} took over {timeout:g} s\n".encode()
            path.write_bytes(text)
        written[name] = path
    return written


def _number(text: str) -> int | float:
    try:
        return int(text)
    except ValueError:
        return float(text)


def peaks(csv_path: str | os.PathLike) -> dict[str, int | float | None]:
    """Column -> its largest value in the sampler's CSV (None: never a value).

    Empty cells (a component not running) and a torn last line are skipped.
    """
    with open(csv_path, newline="") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if not header:
            return {}
        best: dict[str, int | float | None] = dict.fromkeys(header)
        for row in reader:
            if len(row) != len(header):
                continue
            for col, cell in zip(header, row, strict=True):
                if cell:
                    try:
                        value = _number(cell)
                    except ValueError:
                        continue
                    top = best[col]
                    if top is None or value > top:
                        best[col] = value
    return best


# --- command line -----------------------------------------------------------------

class _SignalStop:
    """A stop flag safe to set from a signal handler (threading.Event is not)."""

    def __init__(self) -> None:
        self._r, self._w = os.pipe()
        os.set_blocking(self._w, False)
        self._set = False

    def set(self, *_args) -> None:
        self._set = True
        try:
            os.write(self._w, b"x")
        except OSError:
            pass

    def is_set(self) -> bool:
        return self._set

    def wait(self, timeout: float | None = None) -> bool:
        if not self._set:
            select.select([self._r], [], [], timeout)
        return self._set

    def close(self) -> None:
        os.close(self._r)
        os.close(self._w)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.capture.sampler",
        description="Sample TIME_WAIT/ESTABLISHED sockets by connection class and CPU/RSS "
                    "by component into a CSV, until SIGTERM/SIGINT or --duration.")
    p.add_argument("--out", help="the CSV to write")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between rows (1.0)")
    p.add_argument("--duration", type=float, help="stop after this many seconds")
    p.add_argument("--host", dest="hosts", action="append", default=[], metavar="NAME=NETNS",
                   help="a host: a network namespace (`ip netns list`) whose own sockets are "
                        "counted (repeatable; needs root)")
    p.add_argument("--class", dest="classes", action="append", default=[],
                   metavar="NAME=PORT|NAME=FROM,TO:PORT",
                   help="a connection class: sockets with this port at one end; with --host, "
                        "connections from host FROM to port PORT of host TO (repeatable)")
    p.add_argument("--proc", dest="procs", action="append", default=[], metavar="NAME=PID",
                   help="a component: PID and all its descendants (repeatable; a name "
                        "given twice sums the trees)")
    p.add_argument("--backend", choices=sorted(BACKENDS), default="netlink",
                   help="how sockets are counted (netlink: cheapest, the default)")
    p.add_argument("--snapshot", metavar="DIR",
                   help="write raw ss -tanp, ss -s, netstat -tan, sockstat into DIR and exit")
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.snapshot:
        for path in snapshot(args.snapshot).values():
            print(path)
        return 0
    if not args.out:
        parser.error("--out FILE.csv is required (or --snapshot DIR)")
    if args.interval <= 0 or (args.duration is not None and args.duration <= 0):
        parser.error("--interval and --duration must be > 0")
    try:
        hosts = parse_hosts(args.hosts)
        classes = (parse_host_classes(args.classes, hosts) if hosts
                   else parse_classes(args.classes))
        procs = parse_procs(args.procs)
        sampler = Sampler(classes, procs, args.out, args.interval, backend=args.backend,
                          hosts=hosts)
    except (ValueError, OSError) as e:
        parser.error(str(e))
    for name, pids in procs.items():
        for pid in pids:
            if not os.path.exists(f"/proc/{pid}"):
                print(f"sampler: --proc {name}={pid}: no such process (its columns stay "
                      "empty)", file=sys.stderr)
    stop = _SignalStop()
    signal.signal(signal.SIGTERM, stop.set)
    signal.signal(signal.SIGINT, stop.set)
    try:
        sampler.run(stop_event=stop, duration=args.duration)
    finally:
        stop.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
