"""Turn one stage's captures into the numbers its checks and the summary use.

Reads, from a stage folder of a results run: Locust's `locust_stats.csv`, the
sampler's `sampler.csv`, py-spy's `profile.folded`, `nginx/errors.json` (counted
from Nginx's error log when the stage ends), `verify.json` and `sysctl.json`. Every metric is a
plain number (or None when it does not apply to the stage), so `checks.json`
and `summary.csv` can show where it came from. `CATALOGUE` names each one,
with its source and meaning; a test keeps it and `compute` in step.
"""

from __future__ import annotations

import csv
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from benchmarks import latency_log
from benchmarks.analysis import nginx_errors, stats, window
from benchmarks.capture import csvfile
from benchmarks.capture.tables import KERNEL_COUNTERS
from benchmarks.profile import buckets, threads
from benchmarks.run import crash, open_model, results, spans
from benchmarks.stages import Stage

# TIME_WAIT lasts 60 s on Linux (TCP_TIMEWAIT_LEN, not a sysctl).
TIME_WAIT_SECONDS = 60
CLIENT_CPU_LIMIT = 90.0  # % of one core: past it, Locust measures itself, not the server
# % of the server's CPU set that other processes used: past it, the report flags the stage
FOREIGN_CPU_LIMIT = 10.0
SUMMARY_COLUMNS = ("stage", "rps", "rps_independent", "p50_ms", "p95_ms", "p99_ms",
                   "server_p50_ms", "server_p95_ms", "server_p99_ms", "failures",
                   "tw_redis_peak", "tw_upstream_peak", "tw_front_peak", "client_cpu_mean",
                   "client_cpu_p95", "foreign_cpu_pct", "foreign_cpu_p95", "sio_rps",
                   "sio_p95_ms", "sio_sessions", "sio_sessions_failed", "sio_session_p50_ms",
                   "sio_session_p95_ms", "app_cpu_ms_per_request", "server_cpu_ms_per_request")
# Locust imports its locustfile and spawns its users in the first seconds of the
# sampler's series: its CPU then says nothing about the load it generates.
CLIENT_START_S = 2.0
# Locust's request type for a Socket.IO ack (benchmarks/chat.py): reported beside the
# HTTP headline, never mixed into it.
SOCKETIO_TYPE = "WSIO"
# Past this relative gap between Locust's answered requests and the server's own
# count, the report flags the stage: one of the two is not counting what it should.
COUNT_GAP_LIMIT = 0.02
# The sampler's connection classes (benchmarks/stages.py: Stage.connection_classes).
CLASSES = ("redis", "upstream", "upstream_socketio", "front")


@dataclass(frozen=True)
class Metric:
    source: str  # file (and column) in the stage folder it is computed from
    meaning: str


_LOCUST = f"{results.LOCUST_JSON}, HTTP entries (old runs: {results.LOCUST_STATS})"
_PERCENTILES = f"{_LOCUST}; the open model's: {results.LATENCY_HLOG}'s (open_model.py)"
_LOCUST_SIO = f"{results.LOCUST_JSON}, {SOCKETIO_TYPE} entries"
_LOCUST_SESSION = f"{results.SESSIONS_JSON} (chat.py's SESSIONS, every worker's added up)"
_SAMPLER = results.SAMPLER_CSV
_WINDOW = f"{results.LOCUST_JSON} num_reqs_per_sec over {_SAMPLER}'s rows (window.py)"
_CLIENT_SIDE = "most TIME_WAIT held by the connecting side (it closed first)"
_SERVER_SIDE = "most TIME_WAIT held by the listening side (it closed first)"
_PER_REQUEST = (f"TIME_WAIT of this class made during the load, per request of the last "
                f"{TIME_WAIT_SECONDS} s, both in the sampler's window: ~1 a connection per "
                "request, ~0 reused connections")


def class_metrics(cls: str) -> dict[str, Metric]:
    """The metrics of one connection class (CLASSES): its peaks and its per request."""
    return {f"tw_{cls}_peak": Metric(f"{_SAMPLER} tw_{cls}", "most TIME_WAIT sockets"),
            f"tw_{cls}_client_peak": Metric(f"{_SAMPLER} tw_{cls}_client", _CLIENT_SIDE),
            f"tw_{cls}_server_peak": Metric(f"{_SAMPLER} tw_{cls}_server", _SERVER_SIDE),
            f"estab_{cls}_peak": Metric(f"{_SAMPLER} estab_{cls}",
                                        "most ESTABLISHED connections"),
            f"tw_{cls}_per_request": Metric(f"{_SAMPLER} tw_{cls}, {_WINDOW}", _PER_REQUEST)}


CATALOGUE: dict[str, Metric] = {
    "requests": Metric(_LOCUST, "HTTP requests Locust sent and timed"),
    "failures": Metric(_LOCUST, "HTTP requests that failed (e.g. 502s)"),
    "rps": Metric(_LOCUST, "answered (not failed) HTTP requests a second: the headline"),
    "locust_rps": Metric(_LOCUST, "Locust's own figure, failures included"),
    "rps_independent": Metric(
        f"{results.COUNT_JSON} answered, {_LOCUST}",
        "answered requests a second as the server counted them in its access log (the "
        "entry point's: Nginx, else the app), over Locust's own window"),
    "rps_gap": Metric("rps, rps_independent",
                      f"|rps - rps_independent| / rps_independent; over {COUNT_GAP_LIMIT:.0%} "
                      "the report flags it"),
    "p50_ms": Metric(_PERCENTILES, "median HTTP response time, ms"),
    "p95_ms": Metric(_PERCENTILES, "95th percentile HTTP response time, ms"),
    "p99_ms": Metric(_PERCENTILES, "99th percentile HTTP response time, ms"),
    **{f"server_p{q}_ms": Metric(
        f"{results.COUNT_JSON} server_p{q}_ms",
        f"{q}th percentile of the request times the entry point logged while measured "
        "(Nginx's $request_time, gunicorn's %(L)s, the app's own under `flask run`), ms: "
        "the server's side of Locust's p" + str(q)) for q in (50, 95, 99)},
    "sio_requests": Metric(_LOCUST_SIO, "Socket.IO messages sent (stages 3+), beside the headline"),
    "sio_failures": Metric(_LOCUST_SIO, "messages whose ack never came or was an error"),
    "sio_rps": Metric(_LOCUST_SIO, "acknowledged messages a second"),
    "sio_locust_rps": Metric(_LOCUST_SIO, "messages a second, failures included"),
    "sio_p50_ms": Metric(_LOCUST_SIO, "median ack round trip, ms"),
    "sio_p95_ms": Metric(_LOCUST_SIO, "95th percentile ack round trip, ms"),
    "sio_p99_ms": Metric(_LOCUST_SIO, "99th percentile ack round trip, ms"),
    "sio_sessions": Metric(_LOCUST_SESSION, "Socket.IO sessions created (connects tried)"),
    "sio_sessions_failed": Metric(_LOCUST_SESSION, "sessions that failed: a connect or "
                                  "joinRoom refused, or the server closing one under its user"),
    "sio_sessions_completed": Metric(_LOCUST_SESSION, "sessions open until their user stopped"),
    "sio_session_p50_ms": Metric(_LOCUST_SESSION, "median session length, ms"),
    "sio_session_p95_ms": Metric(_LOCUST_SESSION, "95th percentile session length, ms"),
    # each connection class: app -> Redis, Nginx -> app (stages with a front), Nginx -> the
    # Socket.IO server (stage 9: /socket.io/ on a server of its own), client -> entry port
    **{name: metric for cls in CLASSES for name, metric in class_metrics(cls).items()},
    "tw_total_peak": Metric(f"{_SAMPLER} tw_total", "most TIME_WAIT sockets in the stage"),
    # with several client hosts (--client-hosts 2: cpu_locust, cpu_locust_client2), each
    # client_cpu_* is the busiest host's
    "client_cpu_peak": Metric(f"{_SAMPLER} cpu_locust", "Locust's highest CPU, % of one core"),
    "client_cpu_mean": Metric(f"{_SAMPLER} cpu_locust",
                              f"Locust's mean CPU after its first {CLIENT_START_S:g} s "
                              "(start-up), % of one core"),
    "client_cpu_p95": Metric(f"{_SAMPLER} cpu_locust",
                             f"95th percentile of Locust's CPU samples after its first "
                             f"{CLIENT_START_S:g} s: past {CLIENT_CPU_LIMIT:g}% the numbers "
                             "measure the client"),
    "app_cpu_peak": Metric(f"{_SAMPLER} cpu_app", "the app server's highest CPU, % of one core"),
    # what else ran (benchmarks/capture/cpu_sets.py): CPU the set's CPUs spent on processes
    # that are not the stage's, % of the set
    "foreign_cpu_pct": Metric(f"{_SAMPLER} foreign_cpu_server",
                              "mean share of the server's CPU set used by other processes "
                              f"(a neighbour); past {FOREIGN_CPU_LIMIT:g}% the report flags it"),
    "foreign_cpu_p95": Metric(f"{_SAMPLER} foreign_cpu_server",
                              "95th percentile of that share over the samples"),
    "client_foreign_cpu_pct": Metric(f"{_SAMPLER} foreign_cpu_client",
                                     "mean share of Locust's CPU set used by processes other "
                                     "than Locust and the sampler: the lab's py-spy counts "
                                     "here (about 20% of a core at 50 Hz)"),
    # the kernel's own counters, each host's, while the load ran (None: a run without hosts)
    "tw_overflow": Metric(f"{_SAMPLER} tw_overflow_HOST",
                          "TIME_WAIT sockets the kernel did not keep (TCPTimeWaitOverflow: "
                          "net.ipv4.tcp_max_tw_buckets reached), every host's"),
    "listen_overflows": Metric(f"{_SAMPLER} listen_overflows_HOST",
                               "connections turned away by a full accept queue "
                               "(ListenOverflows: the listen backlog), every host's"),
    "listen_drops": Metric(f"{_SAMPLER} listen_drops_HOST",
                           "every connection dropped at a listener (ListenDrops), every host's"),
    "sampler_cpu_peak": Metric(f"{_SAMPLER} cpu_sampler", "the sampler's own highest CPU"),
    "app_cpu_ms_per_request": Metric(
        f"{_SAMPLER} cpu_app (and cpu_app2), {_WINDOW}",
        "the app servers' CPU per answered request over the sampler's window, ms"),
    "server_cpu_ms_per_request": Metric(
        f"{_SAMPLER} cpu_* of the server roles (app, Nginx, Redis), {_WINDOW}",
        "every server role's CPU per answered request over the sampler's window, ms"),
    **{f"cpu_share_{bucket}": Metric(
        results.PROFILE_STACKS,
        f"the share of the first app host's profiled CPU samples in {what} "
        "(benchmarks/profile/buckets.py; None: not profiled)")
       for bucket, what in buckets.BUCKETS.items()},
    "native_cpu_share": Metric(
        results.THREADS_JSON,
        "the share of the profiled servers' CPU on threads with no Python frame, which "
        "py-spy cannot see (granian's Rust: benchmarks/profile/threads.py; None: not "
        "measured)"),
    "profile_samples": Metric(results.PROFILE_STACKS,
                              "the first app host's profiled CPU samples, which the cpu_share_* "
                              "checks allow for (benchmarks/checks.py Z)"),
    "local_ports": Metric(f"{results.SYSCTL_JSON} net.ipv4.ip_local_port_range",
                          "how many local ports the connecting side may use: the proxy "
                          "host's toward the app, else the app host's toward Redis"),
    "nginx_eaddrnotavail": Metric(
        f"{results.NGINX_ERRORS} eaddrnotavail",
        f"lines of Nginx's error log with `{nginx_errors.EADDRNOTAVAIL}`: connect() found "
        "no free port"),
    "nginx_worker_connections": Metric(
        f"{results.NGINX_ERRORS} worker_connections",
        f"lines of Nginx's error log with `{nginx_errors.NOT_ENOUGH}`: a worker at its "
        "connection limit (None: captured before the lab counted them)"),
    "upstream_prematurely_closed": Metric(
        f"{results.NGINX_ERRORS} upstream_closed",
        f"lines of Nginx's error log with `{nginx_errors.UPSTREAM_CLOSED[0]}` or "
        f"`{nginx_errors.UPSTREAM_CLOSED[1]}`: "
        "the app closed a connection Nginx had just sent a request on (None: captured "
        "before the lab counted them)"),
    "upstream_reused_share": Metric(
        f"{results.COUNT_JSON} app_accepted, app_responses",
        "the share of the app's measured requests that came on a connection Nginx "
        "already had: 1 - connections the app hosts accepted (PassiveOpens) / requests "
        "in their access logs; ~0 a connection per request, ~1 reused"),
    "post_502s": Metric(f"{results.COUNT_JSON} post_502",
                        "POSTs the entry point answered 502 while measured (its access log): "
                        "Nginx resends a failed GET on a new connection, never a POST"),
    "upstream_resent": Metric(f"{results.COUNT_JSON} resent",
                              "requests Nginx sent to the app a second time (two upstream "
                              "times in its access log): a GET whose reused connection was "
                              "closed under it"),
    "upstream_ports_in_time_wait": Metric(
        f"{_SAMPLER} tw_upstream_client, estab_upstream, {results.SYSCTL_JSON}",
        "the share of the local port range that Nginx's TIME_WAIT held at the peak, of "
        "the ports no open connection (a websocket, a request under way) held"),
    "server_keepalive": Metric(f"{results.VERIFY_JSON} server_keepalive",
                               "1 when the server answered `Connection: keep-alive`, 0 if not"),
    # stages with several app hosts (stage 6)
    "app_share_min": Metric(f"{results.COUNT_JSON} app_hosts",
                            "the smallest share of the measured requests one app host "
                            "answered (its own access log)"),
    "app_share_max": Metric(f"{results.COUNT_JSON} app_hosts",
                            "the largest share of the measured requests one app host answered"),
    "cross_host_delivered": Metric(
        f"{results.DELIVERY_JSON} received, sent",
        "the share of Socket.IO messages sent on one app host that reached a room member "
        "connected to the other (benchmarks/run/delivery.py)"),
    "cross_host_seq_gaps": Metric(f"{results.DELIVERY_JSON} seq_gaps",
                                  "messages after which the member's next `seq` was not +1"),
    "sio_session_400s": Metric(f"{results.COUNT_JSON} socketio_400",
                               "Socket.IO requests the app hosts answered 400 while measured: "
                               "a poll for a session another host (or worker) holds"),
}
CATALOGUE.update({name: Metric(results.CRASH_JSON, meaning)  # the crash twins (8k, 9k)
                  for name, meaning in crash.METRICS.items()})
CATALOGUE.update({name: Metric(spans.SPANS_JSON, meaning)  # stages that trace (9o, 9o10)
                  for name, meaning in spans.METRICS.items()})


def locust_totals(stage_dir: Path) -> dict:
    """Locust's totals for the stage's HTTP requests, and its Socket.IO acks beside them.

    From `locust.json` (`--json-file`: written as Locust exits, so it holds every
    request; its CSV is rewritten once a second and misses the last one). A run from
    before that file has only the CSV, whose Aggregated row mixes in the acks.
    """
    path = stage_dir / results.LOCUST_JSON
    if not path.exists():
        return {**_csv_totals(stage_dir / results.LOCUST_STATS), **_group_totals([], "sio_"),
                **sessions(stage_dir)}
    entries = results.read_json(path)
    http = [e for e in entries if e["method"] != SOCKETIO_TYPE]
    if not http:
        raise ValueError(f"{path}: no HTTP request (did Locust run any?)")
    return {**_group_totals(http, ""),
            **_group_totals([e for e in entries if e["method"] == SOCKETIO_TYPE], "sio_"),
            **open_model.tail_figures(stage_dir, http_tag), **sessions(stage_dir)}


def http_tag(tag: str) -> bool:
    """A .hlog row (latency_log.tag) of an HTTP request, not a Socket.IO ack."""
    return latency_log.method_of(tag) != SOCKETIO_TYPE


def sessions(stage_dir: Path) -> dict:
    """The Socket.IO sessions' counts and lengths (chat.py's SESSIONS, written by the
    master with every worker's added up); None for a stage without them."""
    path = stage_dir / results.SESSIONS_JSON
    found = [results.read_json(path)] if path.exists() else []
    if not found:
        return dict.fromkeys(("sio_sessions", "sio_sessions_failed", "sio_sessions_completed",
                              "sio_session_p50_ms", "sio_session_p95_ms"))
    lengths = Counter(seconds * 1000 for f in found for seconds in f["lengths"])

    def at(q):
        return round(stats.percentile(lengths, q)) if lengths else None

    return {"sio_sessions": sum(f["created"] for f in found),
            "sio_sessions_failed": sum(f["failed"] for f in found),
            "sio_sessions_completed": sum(f["completed"] for f in found),
            "sio_session_p50_ms": at(0.5), "sio_session_p95_ms": at(0.95)}


def _float(value) -> float | None:
    return None if value is None else float(value)


def group_rps(entries: list[dict]) -> float | None:
    """Answered HTTP requests a second of a --json-file's entries (None: none)."""
    http = [e for e in entries if e["method"] != SOCKETIO_TYPE]
    return _group_totals(http, "")["rps"]


def _group_totals(entries: list[dict], prefix: str) -> dict:
    """Requests, failures, answered requests a second and percentiles of some entries,
    computed as Locust computes them for its Aggregated row."""
    keys = ("requests", "failures", "rps", "locust_rps", "p50_ms", "p95_ms", "p99_ms")
    if not entries:
        return {f"{prefix}{k}": None for k in keys}
    requests = sum(e["num_requests"] for e in entries)
    failures = sum(e["num_failures"] for e in entries)
    start = min(e["start_time"] for e in entries)
    last = max(e["last_request_timestamp"] or start for e in entries)
    all_rps = requests / (last - start) if last > start else 0.0
    times: dict[int, int] = {}
    for e in entries:
        for ms, n in e["response_times"].items():
            times[int(ms)] = times.get(int(ms), 0) + n
    values = {
        "requests": requests, "failures": failures,
        # answered requests a second: Locust's own figure counts failures too, and in
        # stage 4 those are fast 502s from Nginx
        "rps": round(all_rps * (requests - failures) / max(1, requests), 1),
        "locust_rps": round(all_rps, 1),
        **{f"p{p}_ms": _float(stats.percentile(times, p / 100)) for p in (50, 95, 99)},
    }
    return {f"{prefix}{k}": v for k, v in values.items()}


def _csv_totals(stats_csv: Path) -> dict:
    """The `Aggregated` row of Locust's --csv stats file."""
    with open(stats_csv, newline="") as f:
        for row in csv.DictReader(f):
            if row["Name"] == "Aggregated":
                requests, failures = int(row["Request Count"]), int(row["Failure Count"])
                all_rps = float(row["Requests/s"])
                return {
                    "requests": requests,
                    "failures": failures,
                    "rps": round(all_rps * (requests - failures) / max(1, requests), 1),
                    "locust_rps": round(all_rps, 1),
                    "p50_ms": _num(row["50%"]),
                    "p95_ms": _num(row["95%"]),
                    "p99_ms": _num(row["99%"]),
                }
    raise ValueError(f"{stats_csv}: no Aggregated row (did Locust run any request?)")


def _num(text: str) -> float | None:
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def port_range_size(value: str | None) -> int | None:
    """`50000 50999` -> 1000."""
    if not value:
        return None
    low, high = (int(x) for x in value.split())
    return high - low + 1


def local_ports(stage_dir: Path, stage: Stage) -> int | None:
    """The size of the connecting side's port range (sysctl.json: host -> sysctls; a
    run from before hosts has one flat set)."""
    path = stage_dir / results.SYSCTL_JSON
    if not path.exists():
        return None
    sysctls = results.read_json(path)
    host = "proxy" if stage.front else "app"
    if isinstance(sysctls.get(host), dict):
        sysctls = sysctls[host]
    return port_range_size(sysctls.get("net.ipv4.ip_local_port_range"))


def kernel_counts(samples: Path) -> dict[str, int | None]:
    """What each KERNEL_COUNTERS column grew by from the first row to the last (the
    measured window), summed over the hosts; None where the run has no such columns."""
    first, last = csvfile.first_row(samples), csvfile.latest(samples) or {}
    found = {}
    for stem in KERNEL_COUNTERS:
        cols = [c for c in first if c.startswith(f"{stem}_") and last.get(c) is not None]
        found[stem] = int(sum(last[c] - first[c] for c in cols)) if cols else None
    return found


def compute(stage_dir: Path, stage: Stage) -> dict:
    """All metrics of one stage run."""
    m: dict = locust_totals(stage_dir)
    first = csvfile.first_row(stage_dir / results.SAMPLER_CSV)
    peaks = csvfile.peaks(stage_dir / results.SAMPLER_CSV)
    # TIME_WAIT sockets made while the load ran (the peak less what was there when
    # it started: warm-up and set-up leave a few), per request that can still have
    # one at the peak (those of the last minute), both over the sampler's own window
    # (window.py: Locust's totals run past the sampler's rows). ~1: a connection per request.
    recent = window.recent_requests(stage_dir, m["requests"], m["locust_rps"],
                                    TIME_WAIT_SECONDS)
    for cls in CLASSES:
        present = f"tw_{cls}" in peaks  # `upstream` exists only behind Nginx
        for col in (f"tw_{cls}", f"tw_{cls}_client", f"tw_{cls}_server", f"estab_{cls}"):
            m[f"{col}_peak"] = int(peaks[col]) if present else None
        grown = peaks[f"tw_{cls}"] - first[f"tw_{cls}"] if present else None
        m[f"tw_{cls}_per_request"] = round(max(0.0, grown) / recent, 3) if present else None
    m["tw_total_peak"] = int(peaks.get("tw_total") or 0)
    samples = stage_dir / results.SAMPLER_CSV
    clients = client_cpu(samples)  # several client hosts: the busiest one's figures
    m["client_cpu_peak"] = round(max(peaks.get(f"cpu_{c}") or 0.0 for c in clients), 1)
    m["client_cpu_mean"] = _busiest(c["mean"] for c in clients.values())
    m["client_cpu_p95"] = _busiest(c["p95"] for c in clients.values())
    m["app_cpu_peak"] = round(peaks.get("cpu_app") or 0.0, 1)
    m["foreign_cpu_pct"] = mean_cpu(samples, "foreign_cpu_server")
    m["foreign_cpu_p95"] = cpu_percentile(samples, "foreign_cpu_server", 0.95)
    m["client_foreign_cpu_pct"] = mean_cpu(samples, "foreign_cpu_client")
    m.update(kernel_counts(samples))
    m["sampler_cpu_peak"] = round(peaks.get("cpu_sampler") or 0.0, 1)
    m.update(cpu_per_request(samples, window.answered_rate(stage_dir, m["rps"])))
    m.update(buckets.share_metrics(stage_dir / results.PROFILE_STACKS))
    m["native_cpu_share"] = threads.native_share(threads.read(stage_dir))

    m["local_ports"] = local_ports(stage_dir, stage)
    m.update(front_metrics(stage_dir, stage, m))
    m.update(independent_rps(stage_dir, m))
    count = results.read_json(stage_dir / results.COUNT_JSON) \
        if (stage_dir / results.COUNT_JSON).exists() else {}
    m["post_502s"] = count.get("post_502")
    m.update({f"server_p{q}_ms": count.get(f"server_p{q}_ms") for q in (50, 95, 99)})
    m["upstream_resent"] = count.get("resent") if stage.front else None
    m["upstream_reused_share"] = reused_share(count)

    verify = results.read_json(stage_dir / results.VERIFY_JSON)
    m["server_keepalive"] = verify.get("server_keepalive")
    m.update(scale_out(stage_dir))
    m.update(crash.metrics(stage_dir))
    m.update(spans.metrics(stage_dir))
    return m


def front_metrics(stage_dir: Path, stage: Stage, m: dict) -> dict:
    """Nginx's error counts and its share of local ports in TIME_WAIT (None without a
    front)."""
    if not stage.front:
        return dict.fromkeys(("nginx_eaddrnotavail", "nginx_worker_connections",
                              "upstream_prematurely_closed", "upstream_ports_in_time_wait"))
    errors = nginx_errors.counts(stage_dir)
    return {"nginx_eaddrnotavail": errors["eaddrnotavail"],
            "nginx_worker_connections": errors.get("worker_connections"),
            "upstream_prematurely_closed": errors.get("upstream_closed"),
            "upstream_ports_in_time_wait": ports_in_time_wait(
                stage_dir / results.SAMPLER_CSV, m["local_ports"])}


def ports_in_time_wait(sampler_csv: Path, ports: int | None) -> float | None:
    """The largest share, over the sampler's rows, of the proxy's local ports toward the
    app that TIME_WAIT held, of those no open connection held at that moment. Once the
    range is full, a port is in TIME_WAIT or under an open connection: the websockets
    for their whole session, the requests under way until they end. Those are few on a
    fast box and a third of a small range on one half as fast (more requests under way
    at once), so the share counts the ports left to TIME_WAIT. None without a range."""
    if not ports:
        return None
    shares = [row["tw_upstream_client"] / max(1, ports - (row.get("estab_upstream") or 0))
              for row in csvfile.rows(sampler_csv) if row.get("tw_upstream_client") is not None]
    return round(max(shares), 3) if shares else None


def cpu_per_request(sampler_csv: Path, rps: float | None) -> dict:
    """app_cpu_ms_per_request and server_cpu_ms_per_request: the mean CPU (% of one
    core) of the app servers, and of every server role (what is not Locust or the
    sampler), over the answered requests a second (in the sampler's window: window.py)."""
    cpus = [c for c in csvfile.first_row(sampler_csv) if c.startswith("cpu_")]
    servers = [c for c in cpus if c != "cpu_sampler" and c not in locust_columns(cpus)]
    apps = [c for c in servers if c.startswith("cpu_app")]

    def per_request(columns) -> float | None:
        means = [mean_cpu(sampler_csv, c) for c in columns]
        if not rps or not means or None in means:
            return None
        return round(10 * sum(means) / rps, 3)  # % of a core / req/s = 10 * ms a request

    return {"app_cpu_ms_per_request": per_request(apps),
            "server_cpu_ms_per_request": per_request(servers)}


def reused_share(count: dict) -> float | None:
    """1 - the connections the app hosts accepted / the requests they logged, while
    measured (count.json): the share of requests Nginx sent on a connection it kept.
    None without a front, on the machine, or for a run without the counts."""
    accepted, requests = count.get("app_accepted"), count.get("app_responses")
    if accepted is None or not requests:
        return None
    return round(max(0.0, 1 - accepted / requests), 3)


def scale_out(stage_dir: Path) -> dict:
    """How the requests split over the app hosts (count.json) and whether a Socket.IO
    message crossed from one to the other (delivery.json); None without them."""
    m = dict.fromkeys(("app_share_min", "app_share_max", "cross_host_delivered",
                       "cross_host_seq_gaps", "sio_session_400s"))
    count = results.read_json(stage_dir / results.COUNT_JSON) \
        if (stage_dir / results.COUNT_JSON).exists() else {}
    per_host = count.get("app_hosts")
    m["sio_session_400s"] = count.get("socketio_400")
    if per_host and len(per_host) > 1 and sum(per_host.values()):
        shares = [n / sum(per_host.values()) for n in per_host.values()]
        m["app_share_min"], m["app_share_max"] = round(min(shares), 3), round(max(shares), 3)
    delivery = stage_dir / results.DELIVERY_JSON
    if delivery.exists():
        probe = results.read_json(delivery)
        m["cross_host_delivered"] = round(probe["received"] / probe["asked"], 3)
        m["cross_host_seq_gaps"] = probe["seq_gaps"]
    return m


def client_cpu(sampler_csv: Path) -> dict[str, dict]:
    """Locust's CPU on each client host after its start-up: {component: {mean, p95}},
    `locust` (the only client host, or the master's with its worker), `locust_client2`..."""
    names = [c[4:] for c in locust_columns(csvfile.first_row(sampler_csv))]
    return {name: {"mean": mean_cpu(sampler_csv, f"cpu_{name}", after=CLIENT_START_S),
                   "p95": cpu_percentile(sampler_csv, f"cpu_{name}", 0.95,
                                         after=CLIENT_START_S)}
            for name in names or ["locust"]}


def locust_columns(columns) -> list[str]:
    """The sampler's Locust CPU columns among `columns`: `cpu_locust`, `cpu_locust_client2`..."""
    return [c for c in columns if c == "cpu_locust" or c.startswith("cpu_locust_")]


def _busiest(values) -> float | None:
    values = [v for v in values if v is not None]
    return max(values) if values else None


def independent_rps(stage_dir: Path, m: dict) -> dict:
    """rps_independent and rps_gap from count.json (None for a run without one).

    The server's count over Locust's window (its requests / its requests a second), so
    the two figures differ only by what each side counted."""
    path = stage_dir / results.COUNT_JSON
    if not path.exists() or not m.get("requests"):
        return {"rps_independent": None, "rps_gap": None}
    counted = results.read_json(path)["answered"]
    rps_independent = round(counted * m["locust_rps"] / m["requests"], 1)
    gap = (round(abs(m["rps"] - rps_independent) / rps_independent, 3)
           if rps_independent else None)
    return {"rps_independent": rps_independent, "rps_gap": gap}


def count_gap_too_big(metrics: dict) -> bool:
    return metrics.get("rps_gap") is not None and metrics["rps_gap"] > COUNT_GAP_LIMIT


def answered(metrics: dict) -> int:
    return (metrics.get("requests") or 0) - (metrics.get("failures") or 0)


def evaluate(stage: Stage, metrics: dict, leave_out: tuple[str, ...] = ()) -> list[dict]:
    """The stage's checks against its metrics: [{name, expected, measured, passed, why}].

    A stage that answered no request shows nothing, whatever its numbers say: every
    check fails then, and says why. An optional check without its figure is left out.
    A check named in `leave_out` is judged all the same and marked `left_out`
    (checks.counted leaves it out of every count).
    """
    served = answered(metrics) > 0
    return [{"name": c.metric, "expected": c.expected(metrics), "measured": metrics.get(c.metric),
             "passed": served and c.passes(metrics.get(c.metric),
                                           metrics.get("profile_samples"), metrics),
             "why": c.why if served else f"no request was answered; {c.why}",
             **({"left_out": True} if c.metric in leave_out else {})}
            for c in stage.checks if not (c.optional and metrics.get(c.metric) is None)]


def neighbour_cost(metrics: dict) -> float | None:
    """The RPS a stage whose server CPU set lost more than FOREIGN_CPU_LIMIT to others
    would have had with all of it, if bound by that CPU (RPS x 100 / (100 - lost));
    None when it lost less."""
    lost, rps = metrics.get("foreign_cpu_pct"), metrics.get("rps")
    if lost is None or rps is None or lost <= FOREIGN_CPU_LIMIT:
        return None
    return round(rps * 100 / max(1.0, 100 - lost), 1)


def client_bound(metrics: dict) -> bool:
    """Did Locust pass CLIENT_CPU_LIMIT (its p95 over the load; a run from before that
    figure: its peak)? Then the numbers measure the client."""
    figure = metrics.get("client_cpu_p95", metrics.get("client_cpu_peak"))
    return (figure or 0) > CLIENT_CPU_LIMIT


def _cpu_samples(sampler_csv: Path, column: str, after: float) -> list[tuple[float, float]]:
    """(interval, CPU %) of each sample of a column that ends after `after` seconds: a
    row's CPU covers the time since the row before."""
    out, prev = [], 0.0
    for row in csvfile.rows(sampler_csv):
        elapsed = row["elapsed_s"]
        dt, prev = max(0.0, elapsed - prev), elapsed
        if elapsed > after and column in row:
            out.append((dt, row[column]))
    return out


def mean_cpu(sampler_csv: Path, column: str, after: float = 0.0) -> float | None:
    """Mean of a sampler CPU column over the measured run (from `after` seconds on),
    weighted by each sample's interval. None if never sampled."""
    samples = _cpu_samples(sampler_csv, column, after)
    weight = sum(dt for dt, _ in samples)
    return round(sum(dt * v for dt, v in samples) / weight, 1) if weight > 0 else None


def cpu_percentile(sampler_csv: Path, column: str, fraction: float,
                   after: float = 0.0) -> float | None:
    """The CPU % that `fraction` of the samples (from `after` seconds on) stay at or under."""
    value = stats.percentile(Counter(v for _, v in _cpu_samples(sampler_csv, column, after)),
                             fraction)
    return None if value is None else round(value, 1)
