"""Service-level objectives as gates: `lab run --slo 'p99<500ms,failures<0.1%'`.

Each objective names a figure of a measured stage (metrics.json) or of a `--target`
run (Locust's totals), a comparison and a value with its unit. Latencies are the
client's, what a user waits (Locust's percentiles; the open model's from its
.hlog, benchmarks/run/open_model.py); the entry point's own are
`server_p50`... and are shown beside the client's. A stage that misses one makes
`lab run` exit 1, so the lab can gate a CI job against a service; a malformed
objective is refused before anything starts (exit 2), with the grammar.
"""

from __future__ import annotations

import json
import operator
import re
from dataclasses import dataclass
from pathlib import Path

SLO_JSON = "slo.json"  # in the stage folder: each objective, what was measured, met or not

# name -> (metrics.json key, unit kind, what it is)
FIGURES = {
    "p50": ("p50_ms", "time", "the client's median latency"),
    "p95": ("p95_ms", "time", "the client's 95th percentile latency"),
    "p99": ("p99_ms", "time", "the client's 99th percentile latency"),
    "server_p50": ("server_p50_ms", "time", "the entry point's own median"),
    "server_p95": ("server_p95_ms", "time", "the entry point's own 95th percentile"),
    "server_p99": ("server_p99_ms", "time", "the entry point's own 99th percentile"),
    "failures": ("failure_share", "share", "failed requests over all requests"),
    "rps": ("rps", "count", "answered HTTP requests a second (Locust's)"),
}
OPS = {"<=": operator.le, ">=": operator.ge, "<": operator.lt, ">": operator.gt}
UNITS = {"time": {"ms": 1.0, "s": 1000.0}, "share": {"%": 0.01, "": 1.0}, "count": {"": 1.0}}
GRAMMAR = ("NAME OP VALUE[UNIT], comma-separated. NAME: " + ", ".join(FIGURES) +
           "; OP: < <= > >=; a latency takes ms or s, failures a % (or a fraction), rps a "
           "number. Example: --slo 'p99<500ms,failures<0.1%,rps>=200'")
TERM = re.compile(r"^\s*([a-z_0-9]+)\s*(<=|>=|<|>)\s*([0-9]*\.?[0-9]+)\s*(ms|s|%)?\s*$")


class SLOError(ValueError):
    """A malformed --slo: the message names the term and gives the grammar."""


@dataclass(frozen=True)
class Objective:
    name: str
    op: str
    value: float  # in the metric's own unit: ms, a fraction, requests a second
    text: str  # as given, for the report

    @property
    def metric(self) -> str:
        return FIGURES[self.name][0]

    def judge(self, figures: dict) -> dict:
        """This objective against a stage's figures: measured (None: not measured, which
        counts as missed: a gate that cannot see its figure does not pass)."""
        measured = figures.get(self.metric)
        met = measured is not None and OPS[self.op](measured, self.value)
        server = FIGURES.get(f"server_{self.name}", (None,))[0]
        return {"objective": self.text, "metric": self.metric, "measured": measured,
                "server": figures.get(server) if server else None, "met": met}


def term(text: str) -> Objective:
    found = TERM.match(text)
    if not found:
        raise SLOError(f"--slo: {text.strip()!r} is not an objective. {GRAMMAR}")
    name, op, number, unit = found[1], found[2], float(found[3]), found[4] or ""
    if name not in FIGURES:
        raise SLOError(f"--slo: unknown figure {name!r}. {GRAMMAR}")
    units = UNITS[FIGURES[name][1]]
    if unit not in units:
        raise SLOError(f"--slo: {text.strip()!r}: {name} takes "
                       f"{' or '.join(u or 'no unit' for u in units)}. {GRAMMAR}")
    return Objective(name, op, number * units[unit], text.strip())


def parse(spec: str | None) -> tuple[Objective, ...]:
    """`p99<500ms,failures<0.1%` -> its objectives; "" or None -> none."""
    if not spec or not spec.strip():
        return ()
    return tuple(term(part) for part in spec.split(","))


def judge(objectives: tuple[Objective, ...], figures: dict) -> list[dict]:
    """Each objective judged; the figures are metrics.json's or Locust's totals, with
    `failure_share` added from requests and failures."""
    figures = dict(figures)
    if "failure_share" not in figures and figures.get("requests"):
        figures["failure_share"] = (figures.get("failures") or 0) / figures["requests"]
    return [o.judge(figures) for o in objectives]


def missed(judged: list[dict]) -> list[str]:
    return [j["objective"] for j in judged if not j["met"]]


def line(j: dict) -> str:
    """`[slo met] p99<500ms: measured 170 (server 110)`, as a run prints it."""
    server = f" (server {j['server']:g})" if j.get("server") is not None else ""
    measured = "not measured" if j["measured"] is None else f"measured {j['measured']:g}"
    return f"  [slo {'met' if j['met'] else 'MISSED'}] {j['objective']}: {measured}{server}"


def read(stage_dir: Path) -> list[dict]:
    """A stage folder's judged objectives (none: the run had no --slo)."""
    path = Path(stage_dir) / SLO_JSON
    return json.loads(path.read_text()) if path.exists() else []
