"""Turn one stage's captures into the numbers its checks and the summary use.

Reads, from a stage folder of a results run: Locust's `locust_stats.csv`, the
sampler's `sampler.csv`, Nginx's `nginx/error.log`, `verify.json` and
`sysctl.json`. Every metric is a plain number (or None when it does not apply
to the stage), so `checks.json` and `summary.csv` can show where it came from.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

from benchmarks import sampler
from benchmarks.stages import Stage

# TIME_WAIT lasts 60 s on Linux (TCP_TIMEWAIT_LEN, not a sysctl).
TIME_WAIT_SECONDS = 60
EADDRNOTAVAIL = "(99: Cannot assign requested address)"
CLIENT_CPU_LIMIT = 90.0  # % of one core: past it, Locust measures itself, not the server
SUMMARY_COLUMNS = ("stage", "rps", "p50_ms", "p95_ms", "p99_ms", "failures",
                   "tw_redis_peak", "tw_upstream_peak", "tw_front_peak", "client_cpu_peak")


def locust_totals(stats_csv: Path) -> dict:
    """The `Aggregated` row of Locust's --csv stats file."""
    with open(stats_csv, newline="") as f:
        for row in csv.DictReader(f):
            if row["Name"] == "Aggregated":
                requests, failures = int(row["Request Count"]), int(row["Failure Count"])
                all_rps = float(row["Requests/s"])
                return {
                    "requests": requests,
                    "failures": failures,
                    # answered requests a second: Locust's own Requests/s counts failures
                    # too, and in stage 4 those are fast 502s from Nginx
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


def count_in_file(path: Path, needle: str) -> int:
    if not path.exists():
        return 0
    with open(path, errors="replace") as f:
        return sum(line.count(needle) for line in f)


def first_sample(sampler_csv: Path) -> dict[str, float]:
    """The sampler's first row as numbers: what was there when the load started."""
    with open(sampler_csv, newline="") as f:
        row = next(csv.DictReader(f), None)
    if row is None:
        raise ValueError(f"{sampler_csv}: the sampler wrote no row")
    return {k: float(v) for k, v in row.items() if v not in ("", None)}


def compute(stage_dir: Path, stage: Stage) -> dict:
    """All metrics of one stage run."""
    m: dict = locust_totals(stage_dir / "locust_stats.csv")
    first = first_sample(stage_dir / "sampler.csv")
    peaks = sampler.peaks(stage_dir / "sampler.csv")
    # TIME_WAIT sockets made while the load ran (the peak less what was there when
    # it started: warm-up and set-up leave a few), per request that can still have
    # one at the peak (those of the last minute). ~1: a connection per request.
    recent = max(1, min(m["requests"], m["locust_rps"] * TIME_WAIT_SECONDS))
    for cls in ("redis", "upstream", "front"):
        present = f"tw_{cls}" in peaks  # `upstream` exists only behind Nginx
        for col in (f"tw_{cls}", f"tw_{cls}_client", f"tw_{cls}_server", f"estab_{cls}"):
            m[f"{col}_peak"] = int(peaks[col]) if present else None
        grown = peaks[f"tw_{cls}"] - first[f"tw_{cls}"] if present else None
        m[f"tw_{cls}_per_request"] = round(max(0.0, grown) / recent, 3) if present else None
    m["tw_total_peak"] = int(peaks.get("tw_total") or 0)
    m["client_cpu_peak"] = round(peaks.get("cpu_locust") or 0.0, 1)
    m["app_cpu_peak"] = round(peaks.get("cpu_app") or 0.0, 1)
    m["sampler_cpu_peak"] = round(peaks.get("cpu_sampler") or 0.0, 1)

    sysctls = json.loads((stage_dir / "sysctl.json").read_text())
    ports = port_range_size(sysctls.get("net.ipv4.ip_local_port_range"))
    m["local_ports"] = ports
    if stage.front:
        m["nginx_eaddrnotavail"] = count_in_file(stage_dir / "nginx" / "error.log", EADDRNOTAVAIL)
        m["upstream_ports_in_time_wait"] = (
            round(m["tw_upstream_client_peak"] / ports, 3) if ports else None)
    else:
        m["nginx_eaddrnotavail"] = None
        m["upstream_ports_in_time_wait"] = None

    verify = json.loads((stage_dir / "verify.json").read_text())
    m["server_keepalive"] = verify.get("server_keepalive")
    return m


def evaluate(stage: Stage, metrics: dict) -> list[dict]:
    """The stage's checks against its metrics: [{name, expected, measured, passed, why}]."""
    return [{"name": c.metric, "expected": c.expected(), "measured": metrics.get(c.metric),
             "passed": c.passes(metrics.get(c.metric)), "why": c.why} for c in stage.checks]


def summary_row(stage: Stage, metrics: dict) -> dict:
    row = {"stage": stage.dirname}
    for col in SUMMARY_COLUMNS[1:]:
        row[col] = metrics.get(col)
    return row
