"""The Sockets tab's numbers, live: the sampler's latest row, read as the lesson reads it.

`lab up` runs the sampler until the stage stops (results/up/<stage>/sampler.csv)
and writes `sockets.json` beside it: the stage's connection classes (which host
connects to which) and each host's local port range. From those two files and
Locust's request count this module derives, per connection class and per host:

  time_wait, established     sockets now (the sampler's columns tw_*, estab_*)
  held_by                    which host holds the TIME_WAIT: the side that closed
                             first (tw_CLS_client is in the connecting host's table,
                             tw_CLS_server in the listening host's)
  tw_per_request             TIME_WAIT of the class per request of the last 60 s
                             (TIME_WAIT lasts 60 s), as the server counted them in
                             the stage's count log (sockets.json `count_log`, the
                             entry point's access log: whatever sends the load,
                             the Start button or `lab exec -- locust`): ~1 when
                             every request opens a connection, ~0 when connections
                             are reused; the live twin of metrics.py's
                             tw_CLS_per_request
  ports_in_use, port_range   a connecting host's local ports held by its classes
                             (its TIME_WAIT plus ESTABLISHED) against the size of
                             its net.ipv4.ip_local_port_range: stage 4 runs out
  cpu                        each role's CPU, % of one core (client = Locust)
  foreign_cpu                each CPU set's share used by processes not the stage's
                             (the sampler's foreign_cpu_SET): a neighbour, live

One place for these derivations: the web UI (benchmarks/sockets_tab/plugin.py), its
JSON at /sockets/stats and the headless line all call `snapshot`.
"""

from __future__ import annotations

import time
from collections import deque
from pathlib import Path

from benchmarks import stages
from benchmarks.analysis import access_logs, metrics
from benchmarks.capture import csvfile
from benchmarks.run import results

# the sampler's component for each host's role (benchmarks/run/runner.py names them)
ROLE_COMPONENT = {"client": "locust", "proxy": "nginx", "app": "app", "redis": "redis"}
TAIL_BYTES = 256 * 1024  # enough for the chart's window of rows


def read_rows(sampler_csv: Path, last: int | None = None) -> list[dict[str, float]]:
    """The sampler's rows as numbers (the last `last` of them, from the file's last
    TAIL_BYTES), oldest first."""
    return csvfile.rows(sampler_csv, last=last, tail_bytes=TAIL_BYTES)


class RequestWindow:
    """Locust's total request count over time, for requests sent in the last 60 s, and
    the TIME_WAIT that was already there when the count (re)started.

    TIME_WAIT left by an earlier run (or another client) would inflate the ratio until
    it expires: what was there at the start is taken off, less and less as its 60 s
    run out (as if made evenly over the minute before). A new swarm resets Locust's
    count: the window starts over.
    """

    def __init__(self, seconds: float = metrics.TIME_WAIT_SECONDS):
        self.seconds = seconds
        self.points: deque[tuple[float, int]] = deque()
        self.started: float | None = None
        self.stale: dict[str, float] = {}

    def add(self, total: int, now: float | None = None,
            time_wait: dict[str, float] | None = None) -> None:
        now = time.monotonic() if now is None else now
        if not self.points or total < self.points[-1][1]:
            self.points.clear()
            self.started, self.stale = now, dict(time_wait or {})
        self.points.append((now, total))
        while len(self.points) > 2 and self.points[1][0] <= now - self.seconds:
            self.points.popleft()

    def recent(self) -> int:
        if not self.points:
            return 0
        return max(0, self.points[-1][1] - self.points[0][1])

    def left_over(self, cls: str, now: float | None = None) -> float:
        """TIME_WAIT of `cls` from before the count started that has not expired yet."""
        if self.started is None:
            return 0.0
        now = time.monotonic() if now is None else now
        return self.stale.get(cls, 0.0) * max(0.0, 1 - (now - self.started) / self.seconds)


class ServerCount:
    """The server's count of the chat API's requests in the stage's count log, from where
    the log ended when first read: complete lines only, so a line being written is
    counted once, when whole."""

    def __init__(self, log: Path):
        self.log = Path(log)
        self.offset = access_logs.log_size(self.log)
        self.total = 0

    def read(self) -> int:
        size = access_logs.log_size(self.log)
        if size < self.offset:  # a new stage's log: count it from its start
            self.offset = 0
        if size > self.offset:
            with open(self.log, "rb") as f:
                f.seek(self.offset)
                data = f.read(size - self.offset)
            whole = data[:data.rfind(b"\n") + 1]
            self.offset += len(whole)
            self.total += access_logs.tally(whole.splitlines())["responses"]
        return self.total


def _int(row: dict, key: str) -> int | None:
    return int(row[key]) if key in row else None


def snapshot(row: dict[str, float] | None, layout: dict, recent_requests: int,
             left_over=lambda cls: 0.0) -> dict:
    """The numbers of one sampler row: classes, hosts, CPU (see the module docstring).

    `left_over(cls)`: TIME_WAIT of the class from before the requests counted
    (RequestWindow.left_over), kept out of the per-request figure.
    """
    if not row:
        return {"elapsed_s": None, "classes": [], "hosts": [], "cpu": {}, "foreign_cpu": {}}
    classes, in_use = [], {}
    for name, (src, dst, port) in layout["classes"].items():
        tw, client, server = (_int(row, f"tw_{name}{s}") for s in ("", "_client", "_server"))
        estab = _int(row, f"estab_{name}")
        holders = [f"{src} {client}" if client else "", f"{dst} {server}" if server else ""]
        classes.append({
            "class": name, "from": src, "to": dst, "port": port,
            "time_wait": tw, "time_wait_client": client, "time_wait_server": server,
            "held_by": ", ".join(h for h in holders if h) or "-",
            "established": estab,
            "tw_per_request": round(max(0.0, tw - left_over(name)) / recent_requests, 3)
            if tw is not None and recent_requests else None})
        in_use[src] = in_use.get(src, 0) + (client or 0) + (estab or 0)
    hosts = []
    for host, value in layout.get("port_ranges", {}).items():
        size = metrics.port_range_size(value)
        used = in_use.get(host)
        hosts.append({
            "host": host, "time_wait": _int(row, f"tw_total_{host}"),
            "established": _int(row, f"estab_total_{host}"),
            "ports_in_use": used, "port_range": size,
            "ports_share": round(used / size, 3) if used is not None and size else None,
            "cpu": _cpu(row, host)})
    cpu = {role: _cpu(row, role) for role in layout.get("port_ranges", ROLE_COMPONENT)}
    foreign = {k[len("foreign_cpu_"):]: round(v, 1) for k, v in row.items()
               if k.startswith("foreign_cpu_")}
    return {"elapsed_s": row.get("elapsed_s"), "ts": row.get("ts"),
            "requests_last_60s": recent_requests, "classes": classes, "hosts": hosts,
            "cpu": cpu, "foreign_cpu": foreign}


def _cpu(row: dict, role: str) -> float | None:
    name = (results.locust_component(role) if role in stages.CLIENT_ROLES
            else ROLE_COMPONENT.get(role, role))
    value = row.get(f"cpu_{name}")
    return round(value, 1) if value is not None else None


def table_rows(snap: dict) -> list[dict]:
    """The Sockets tab's table: a row per connection class, then one per host."""
    rows = []
    for c in snap["classes"]:
        rows.append({"name": f"class {c['class']}: {c['from']} -> {c['to']}:{c['port']}",
                     "tw": c["time_wait"], "side": c["held_by"], "estab": c["established"],
                     "twreq": "-" if c["tw_per_request"] is None else c["tw_per_request"],
                     "ports": "", "cpu": ""})
    for h in snap["hosts"]:
        ports = "" if h["ports_in_use"] is None else f"{h['ports_in_use']} / {h['port_range']}"
        rows.append({"name": f"host {h['host']}", "tw": h["time_wait"], "side": "",
                     "estab": h["established"], "twreq": "", "ports": ports,
                     "cpu": "-" if h["cpu"] is None else h["cpu"]})
    for name, value in snap.get("foreign_cpu", {}).items():
        if name == "client":  # a `lab exec -- locust` runs there, and is not the stage's
            continue
        rows.append({"name": f"others on the {name}'s CPUs (% of them)", "tw": "", "side": "",
                     "estab": "", "twreq": "", "ports": "", "cpu": value})
    return rows


TABLE_STRUCTURE = [
    {"key": "name", "title": "Connection class / host"},
    {"key": "tw", "title": "TIME_WAIT"},
    {"key": "side", "title": "TIME_WAIT held by"},
    {"key": "estab", "title": "ESTABLISHED"},
    {"key": "twreq", "title": "TIME_WAIT / request (60 s)"},
    {"key": "ports", "title": "Local ports in use / range"},
    {"key": "cpu", "title": "CPU % of one core"},
]


def line(snap: dict) -> str:
    """One line for a headless run: TIME_WAIT (holder), ESTABLISHED, per request, CPU."""
    if snap["elapsed_s"] is None:
        return "sockets: (sampler starting)"
    parts = []
    for c in snap["classes"]:
        per = "" if c["tw_per_request"] is None else f" {c['tw_per_request']:g}/req"
        parts.append(f"{c['class']} TW {c['time_wait']} ({c['held_by']}){per} "
                     f"EST {c['established']}")
    for h in snap["hosts"]:
        if h["ports_share"] is not None and h["ports_in_use"]:
            parts.append(f"{h['host']} ports {h['ports_in_use']}/{h['port_range']}")
    cpu = " ".join(f"{role} {v:.0f}%" for role, v in snap["cpu"].items() if v is not None)
    others = snap.get("foreign_cpu", {}).get("server")
    others = "" if others is None else f"; others on the server's CPUs {others:.0f}%"
    return f"sockets {snap['elapsed_s']:.0f}s: " + "; ".join(parts) + f"; CPU {cpu}{others}"


def series(rows: list[dict], layout: dict) -> dict:
    """The chart's data: seconds, and per class its TIME_WAIT and ESTABLISHED."""
    out = {"elapsed_s": [r.get("elapsed_s") for r in rows]}
    for name in layout["classes"]:
        out[f"tw_{name}"] = [r.get(f"tw_{name}") for r in rows]
        out[f"estab_{name}"] = [r.get(f"estab_{name}") for r in rows]
    return out


def read_layout(sampler_csv: Path) -> dict:
    """sockets.json beside the sampler's CSV (written by `lab up`)."""
    path = Path(sampler_csv).parent / results.SOCKETS_JSON
    if not path.exists():
        return {"classes": {}, "port_ranges": {}}
    layout = results.read_json(path)
    layout["classes"] = {k: tuple(v) for k, v in layout["classes"].items()}
    return layout
