"""The span sink of a stage that traces (FLASK_TRACING in its env: 9o, 9o10): a role the
lab starts and stops with the stage's servers, and what it received against what the
app served.

  otlp_sink   on the metrics host (stages.METRICS_ROLE, the one --metrics puts Prometheus
              on: a stage that traces has it even without --metrics), on the client's
              CPUs, off the measured servers' core, and not among the stage's server
              processes: its CPU is its host's. It listens on OTLP/HTTP's port
              (stages.OTLP_PORT), decodes each export and counts the spans
              (benchmarks/studies/instruments/otlp_sink.py); the app's servers get
              OTEL_EXPORTER_OTLP_ENDPOINT pointing at it.

The count is taken when the stage stops: the app's servers first (granian and gunicorn
on TERM/QUIT: their Python exits, and the SDK's TracerProvider shuts down at exit,
which makes its BatchSpanProcessor export what it still queues), then `GET /count`,
then the sink. So every span the servers made has arrived or is lost, none is on its
way (the processor exports every 5 s, or 512 spans at a time: a count taken at the
window's end would miss up to 5 s of them). It is set against the requests that
reached Flask in the stage's whole life (the HTTP server's own access log, and the
Socket.IO server's lines that are not Socket.IO's: its /healthz), each of which made one
SERVER span: at 100% sampling, SERVER spans = requests, and any difference is a span
lost (a BatchSpanProcessor drops what arrives while its queue of 2048 is full, or an
export the sink did not answer). In the stage's folder: spans.json, and the metrics
below (benchmarks/analysis/metrics.py), which the 9o twin's check reads.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from benchmarks import stages
from benchmarks.analysis.access_logs import REQUEST_LINE
from benchmarks.run import results

NAME = "otlp_sink"  # its process (and log: otlp_sink.log)
MODULE = "benchmarks.studies.instruments.otlp_sink"
SPANS_JSON = results.SPANS_JSON
# name -> meaning, each a figure of spans.json (None in a stage that does not trace)
METRICS = {
    "spans_received": "spans the sink received in the stage's life (SERVER and CLIENT)",
    "spans_server": "SERVER spans received: one per request Flask served, kept",
    "spans_requests": "requests that reached Flask in the stage's life (the servers' "
                      "access logs), each a SERVER span made",
    "spans_kept_share": "SERVER spans per request: the sampling ratio, as received",
    "spans_lost": "requests less SERVER spans, at 100% sampling (None below it)",
}


def app_env(box) -> dict[str, str]:
    """What the app's servers export to: the sink on the metrics host."""
    where = f"http://{box.address(stages.METRICS_ROLE)}:{box.port('otlp')}"
    return {"OTEL_EXPORTER_OTLP_ENDPOINT": where}


def start(stack) -> None:
    """The sink on the metrics host, waited for, before the app's servers start."""
    box = stack.box
    stack._start(NAME, stages.METRICS_ROLE,
                 [sys.executable, "-m", MODULE, "--host", box.address(stages.METRICS_ROLE),
                  "--port", str(box.port("otlp"))], port=box.port("otlp"), watcher=True)


def read_count(box) -> dict:
    """The sink's GET /count, asked from its own host."""
    url = f"http://{box.address(stages.METRICS_ROLE)}:{box.port('otlp')}/count"
    ask = ("import sys, urllib.request\n"
           "print(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())")
    out = subprocess.run([*box.prefix(stages.METRICS_ROLE), sys.executable, "-c", ask, url],
                         capture_output=True, text=True, timeout=30, start_new_session=True)
    if out.returncode != 0:
        raise OSError(f"GET {url}: {out.stderr.strip()[-500:]}")
    return json.loads(out.stdout)


def flask_requests(stage: stages.Stage, stage_dir: Path) -> int:
    """Requests that reached Flask, from the servers' access logs: every line of the HTTP
    server's (the app writes it, in Flask), and the Socket.IO server's lines but
    Socket.IO's own (which its middleware answers before Flask)."""
    logs = [results.app_access_log(r) for r in stage.app_roles]
    if stage.socketio_server:
        logs += [results.socketio_access_log(r) for r in stage.app_roles]
    total = 0
    for name in logs:
        path = stage_dir / name
        for line in path.read_text(errors="replace").splitlines() if path.exists() else ():
            match = REQUEST_LINE.search(line)
            total += bool(match) and not match["path"].startswith("/socket.io/")
    return total


def record(stack) -> dict:
    """After the app's servers stopped, before the sink does: spans.json in the stage's
    folder (the count, the requests, the ratio, what was lost); what it holds."""
    stage = stack.stage
    ratio = float(stage.env.get("FLASK_TRACE_SAMPLE", "1"))
    try:
        count, error = read_count(stack.box), None
    except (OSError, subprocess.SubprocessError, ValueError) as e:
        count, error = {}, f"{type(e).__name__}: {e}"
    served = flask_requests(stage, stack.dir)
    server = count.get("by_kind", {}).get("SERVER")
    out = {"sample_ratio": ratio, "sink": count, "error": error,
           "spans_received": count.get("spans"), "spans_server": server,
           "spans_requests": served,
           "spans_kept_share": round(server / served, 4) if server is not None and served
           else None,
           "spans_lost": served - server if server is not None and ratio == 1 else None}
    results.write_json(stack.dir / SPANS_JSON, out)
    return out


def say_recorded(out: dict, stage_dir: Path, say=print) -> None:
    """One line of what the sink received, or why nothing."""
    if out["error"]:
        say(f"  WARNING: no count from the span sink: {out['error']}")
        return
    lost = "" if out["spans_lost"] is None else f", {out['spans_lost']} lost"
    say(f"  spans: {out['spans_server']} SERVER spans ({out['spans_received']} in all) for "
        f"{out['spans_requests']} requests served, {out['spans_kept_share']} a request at "
        f"sampling {out['sample_ratio']:g}{lost} ({results.rel(stage_dir / SPANS_JSON)})")


def metrics(stage_dir: Path) -> dict:
    """The stage's span metrics from spans.json; None each without one."""
    path = stage_dir / SPANS_JSON
    found = json.loads(path.read_text()) if path.exists() else {}
    return {name: found.get(name) for name in METRICS}
