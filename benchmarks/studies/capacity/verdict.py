"""A capacity step's figures, whether it held its objective, and what limited it.

A step holds when every user connected, no connected user dropped, every message was
acked and delivered to every member within the grace, the server's own counts agree
with the client's (the websockets it holds, the messages it stored), and the delivery
p99 is within the objective. The first step that does not hold ends the stage; the one
before it is what the stage "holds".

What limited it is read from the failing step's own figures, the first that applies:
the load side (a load process's CPU over 90% of a core, or its event loop late, even
once, by half the objective and by more than the server's longest collection: such a
pause alone breaks the objective); a limit a server's log names (Nginx's
"worker_connections are not enough", "Too many open files": servers.SIGNS); garbage
collection (a collection of the real-time server's that paused it for half the
objective or more, app/watchers/gc_log.py's lines); the server's
CPU (the server roles together over 90% of their CPU set's time); descriptors (the
real-time server within 5% of its `nofile`); the box's threads (the real-time server's
at 80% of kernel.pid_max or threads-max, which every process's threads share); memory
(the box's available memory under 10%); a cap on connections (connects failed or timed
out with CPU to spare: a pool of threads, gunicorn's `worker_connections`, an accept
queue); else "unclear", with the figures to look at.
"""

from __future__ import annotations

from collections import Counter

import psutil
from hdrh.histogram import HdrHistogram

from benchmarks import latency_log
from benchmarks.run import limits
from benchmarks.studies.capacity.servers import Reading, gc_pauses

LOAD_CPU_MAX = 90.0  # % of a core a load process may use before it is the limit
SERVER_CPU_MAX = 90.0  # % of the server CPU set's time
NOFILE_MARGIN = 0.95
THREADS_SHARE = 0.8  # of the box's thread cap (limits.thread_cap): the rest of the box has some
MEMORY_MIN = 0.10  # of the box's memory, available
UNCLEAR = "unclear"  # no limit of the list above in the step's figures


def limited_by(limit: str | None) -> str:
    """A step's limit as the end of a sentence."""
    if limit == UNCLEAR:
        return "what limited it is none of the study's limits (its row in capacity.json)"
    return f"limited by {limit}"


def merged(events: list[dict], kind: str) -> HdrHistogram:
    hist = latency_log.new()
    for e in events:
        hist.decode_and_add(e["histograms"][kind])
    return hist


def ms(hist: HdrHistogram, q: float | None) -> float | None:
    if hist.get_total_count() == 0:
        return None
    value = hist.get_max_value() if q is None else hist.get_value_at_percentile(q)
    return round(value / 1000, 2)


def roles_row(rest: Reading, before: Reading, after: Reading, wall: float,
              delivered: int, users: int, cpus: int) -> dict:
    """Each role's CPU (% of a core, µs per delivery) and memory (MiB, and KiB per
    connected user above its rest: RSS and PSS); the real-time server's descriptors and
    threads."""
    row = {}
    for name, end in after.roles.items():
        spent = end.cpu_s - before.roles[name].cpu_s
        base = rest.roles[name]
        row[f"{name}_cpu_percent"] = round(spent / wall * 100, 1)
        row[f"{name}_us_per_delivery"] = round(spent * 1e6 / delivered, 1) if delivered else None
        row[f"{name}_rss_mib"] = round(end.rss_kib / 1024, 1)
        row[f"{name}_pss_mib"] = round(end.pss_kib / 1024, 1)
        for kind in ("rss", "pss"):
            grown = getattr(end, f"{kind}_kib") - getattr(base, f"{kind}_kib")
            row[f"{name}_{kind}_kib_per_user"] = round(grown / users, 1) if users else None
    rt = after.roles["realtime"]
    row.update({
        "rss_kib_per_user": row["realtime_rss_kib_per_user"],
        "pss_kib_per_user": row["realtime_pss_kib_per_user"],
        "realtime_fds": rt.fds, "realtime_nofile": rt.nofile, "realtime_threads": rt.threads,
        "realtime_processes": rt.processes,
        "server_cpu_percent_of_set": round(sum(row[f"{n}_cpu_percent"] for n in after.roles)
                                           / cpus, 1)})
    return row


def step_row(step: int, users: int, connected: list[dict], held: list[dict], rest: Reading,
             before: Reading, after: Reading, wall: float, objective_ms: float,
             server_cpus: int, signs: dict[str, int]) -> dict:
    """One step's row: the client's counts, the server's own, latencies, costs, verdict."""
    count = {k: sum(e[k] for e in held) for k in ("sent", "acked", "ack_errors", "expected",
                                                   "received", "stale", "dropped")}
    failed = sum((Counter(e["failed"]) for e in connected), Counter())
    delivery, ack, connect = (merged(held, "delivery"), merged(held, "ack"),
                              merged(connected, "connect"))
    lost = count["expected"] - count["received"]
    if lost > 0:  # never arrived: slower than any that did (lab 14), not left out
        delivery.record_value(int(wall * 1e6), lost)
    row = {"step": step, "users": users, "connected": sum(e["users"] for e in connected),
           "connect_failed": sum(failed.values()), "connect_failures": dict(failed),
           **count, "lost": lost, "not_acked": count["sent"] - count["acked"],
           "server_held": after.held, "server_stored": after.stored - before.stored,
           "delivered_per_s": round(count["received"] / wall, 1),
           "expected_per_s": round(count["expected"] / wall, 1),
           "delivery_p50_ms": ms(delivery, 50), "delivery_p99_ms": ms(delivery, 99),
           "delivery_max_ms": ms(delivery, None), "ack_p50_ms": ms(ack, 50),
           "ack_p99_ms": ms(ack, 99), "connect_p99_ms": ms(connect, 99),
           "load_cpu_percent_max": max(e["cpu_percent"] for e in held),
           "load_rss_mib": round(sum(e["rss_kib"] for e in held) / 1024, 1),
           "load_lag_p99_ms": max(ms(merged([e], "lag"), 99) or 0 for e in held),
           "load_lag_max_ms": max(ms(merged([e], "lag"), None) or 0 for e in held),
           "load_processes": len(held), "seconds": round(wall, 2), "log_signs": signs,
           **pauses_row(gc_pauses(before.logs))}
    row.update(roles_row(rest, before, after, wall, count["received"], row["connected"],
                         server_cpus))
    row["broke"] = broke(row, objective_ms)
    row["limit"] = limit(row, objective_ms) if row["broke"] else None
    return row


def pauses_row(pauses: list[tuple[int, int]]) -> dict:
    """The real-time server's collections of the step (app/watchers/gc_log.py): how many, the
    longest, and the objects tracked then."""
    longest = max(pauses, default=(0, 0))
    return {"gc_pauses": len(pauses), "gc_pause_max_ms": longest[0],
            "gc_objects": longest[1] or None}


def broke(row: dict, objective_ms: float) -> list[str]:
    """What the step failed of its objective, in words; [] when it held."""
    why = []
    if row["connect_failed"]:
        why.append(f"{row['connect_failed']} connects failed "
                   f"({', '.join(f'{k}: {v}' for k, v in row['connect_failures'].items())})")
    if row["dropped"]:
        why.append(f"{row['dropped']} connected users dropped")
    if row["lost"] > 0:
        why.append(f"{row['lost']:,} of {row['expected']:,} deliveries did not arrive (counted "
                   f"as {row['seconds']:g} s in the percentiles)")
    if row["not_acked"]:
        why.append(f"{row['not_acked']:,} of {row['sent']:,} sends not acked")
    if row["server_held"] != row["connected"]:
        why.append(f"the server holds {row['server_held']} websockets, the load "
                   f"{row['connected']}")
    if row["server_stored"] != row["acked"]:
        why.append(f"the server stored {row['server_stored']:,} messages, "
                   f"{row['acked']:,} were acked")
    p99 = row["delivery_p99_ms"]
    if p99 is None or p99 > objective_ms:
        why.append(f"delivery p99 {p99} ms > {objective_ms:g} ms")
    return why


def load_late(row: dict, objective_ms: float) -> bool:
    """The load's event loop late by half the objective, and longer than the real-time
    server's longest collection: a paused server answers in a flood once it resumes,
    which makes a load loop late too (stage 9 at 7,500 users: a 1,127 ms collection, the
    loop late by 142 ms), so a lag within the pause is the pause's, not the load's."""
    lag = row["load_lag_max_ms"]
    return lag >= objective_ms / 2 and lag > (row.get("gc_pause_max_ms") or 0)


def limit(row: dict, objective_ms: float) -> str:
    """The limiting factor a failing step's figures show (module docstring)."""
    if row["load_cpu_percent_max"] > LOAD_CPU_MAX or load_late(row, objective_ms):
        return (f"the load side (a load process at {row['load_cpu_percent_max']}% of a core, "
                f"its loop late by up to {row['load_lag_max_ms']} ms)")
    if row["log_signs"]:
        return "; ".join(f"{limit} (the logs say so {n} times)"
                         for limit, n in row["log_signs"].items())
    if row["gc_pause_max_ms"] >= objective_ms / 2:
        return (f"garbage collection (a full collection paused the real-time server "
                f"{row['gc_pause_max_ms']} ms, {row['gc_objects']:,} objects tracked)")
    if row["server_cpu_percent_of_set"] > SERVER_CPU_MAX:
        return f"the server's CPU ({row['server_cpu_percent_of_set']}% of its CPU set)"
    if row["realtime_nofile"] and row["realtime_fds"] >= NOFILE_MARGIN * row["realtime_nofile"]:
        return f"file descriptors ({row['realtime_fds']} of nofile {row['realtime_nofile']})"
    cap = limits.thread_cap()
    if cap and row["realtime_threads"] >= THREADS_SHARE * cap:
        return (f"the box's threads ({row['realtime_threads']:,} in the real-time server; "
                f"kernel.pid_max and threads-max allow {cap:,} in all)")
    memory = psutil.virtual_memory()
    if memory.available < MEMORY_MIN * memory.total:
        return f"memory ({memory.available // 2**20} MiB available)"
    if row["connect_failed"]:
        return (f"a cap on connections with CPU to spare ({row['realtime_threads']} threads, "
                f"{row['realtime_fds']} fds: a thread pool, worker_connections or a queue)")
    return UNCLEAR


def summary(stage_key: str, rows: list[dict]) -> str:
    """"holds N users; at M: what broke, and what limited it", from one run's steps."""
    held = [r for r in rows if not r["broke"]]
    failing = next((r for r in rows if r["broke"]), None)
    said = f"stage {stage_key} holds {held[-1]['users'] if held else 0} users"
    if held:
        last = held[-1]
        said += (f" ({last['pss_kib_per_user']} KiB PSS a user, "
                 f"{last['realtime_us_per_delivery']} µs of its CPU a delivery, "
                 f"p99 {last['delivery_p99_ms']} ms)")
    if failing is None:
        return said + "; every step held (raise --users to find its limit)"
    return (f"{said}; at {failing['users']}: {'; '.join(failing['broke'])}; "
            f"{limited_by(failing['limit'])}")
