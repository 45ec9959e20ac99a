"""The instruments study: stage 8's app bare and with each instrument, and the OTLP sink.

Real parts: a real redis-server, OpenTelemetry's own OTLP/HTTP exporter sending to the
sink over loopback, each instrument's app in a process of its own. Figures are
asserted for their shape and the span counts exactly, never a speed.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import sys
import urllib.error
import urllib.request

import pytest
from conftest import run_module

from benchmarks.chat_mix import WEIGHTS
from benchmarks.run import options, results
from benchmarks.sandbox import procs
from benchmarks.stages import ROOT
from benchmarks.studies.instruments import served, study, table

SINK = "benchmarks.studies.instruments.otlp_sink"


def post(url: str, body: bytes, encoding: str | None = None) -> int:
    headers = {"Content-Type": "application/x-protobuf",
               **({"Content-Encoding": encoding} if encoding else {})}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, body, headers), timeout=10) as a:
            return a.status
    except urllib.error.HTTPError as e:
        return e.code


def test_the_sink_decodes_a_real_export_and_counts_every_span(tmp_path):
    from opentelemetry.exporter.otlp.proto.http import Compression
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.trace import SpanKind

    port = procs.free_port()
    sink = procs.start([sys.executable, "-m", SINK, "--port", str(port)],
                       log=tmp_path / "sink.log", env=procs.child_env(), cwd=ROOT)
    try:
        procs.wait_for_port(port, proc=sink)
        url = f"http://127.0.0.1:{port}/v1/traces"
        for compression, n in ((Compression.Gzip, 700), (Compression.NoCompression, 301)):
            provider = TracerProvider()
            provider.add_span_processor(BatchSpanProcessor(
                OTLPSpanExporter(endpoint=url, compression=compression)))
            tracer = provider.get_tracer("test")
            for _ in range(n):
                with tracer.start_as_current_span("request", kind=SpanKind.SERVER), \
                        tracer.start_as_current_span("GET", kind=SpanKind.CLIENT):
                    pass
            assert provider.force_flush(10_000)
            provider.shutdown()
        assert post(url, gzip.compress(b"not protobuf at all"), "gzip") == 400
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/count", timeout=10) as answer:
            counts = json.loads(answer.read())
    finally:
        procs.stop(sink)
    assert counts["spans"] == 2 * 1001
    assert counts["by_kind"] == {"SERVER": 1001, "CLIENT": 1001}
    assert counts["rejected"] == 1 and counts["exports"] >= 2  # a batch holds 512 at most
    assert sink.returncode is not None


def test_a_short_run_gives_every_instrument_a_figure_and_loses_no_span(tmp_path):
    names = ["bare", "flask-exporter", "otel", "otel-10"]
    if importlib.util.find_spec("app.watchers.metrics"):
        names.insert(1, "prometheus")
    code, output = run_module("benchmarks.studies.instruments", "--instruments",
                              ",".join(names), "--repeats", "1", "--seconds", "0.05",
                              "--results", str(tmp_path), timeout=120)
    assert code == 0, output
    [folder] = list(tmp_path.iterdir())
    data = json.loads((folder / results.INSTRUMENTS_JSON).read_text())
    rows = {r["instrument"]: r for r in table.summarize(data)}
    assert list(rows) == names
    for name, row in rows.items():
        assert row["cpu_us"]["mean"] > 0 and row["requests"] > 0, name
        assert (row["step"] is None) == (name == "bare")
    everything = rows["otel"]["spans"]
    # at 100%: every request the app served (sign-in, warm-up, timed) is one SERVER span
    # at the sink, and every span the app made arrived
    assert everything["server_received"] == everything["requests"] > 0
    assert everything["lost"] == 0 and everything["received"] == everything["made"]
    for kind, figures in data["repeats"][0]["otel"]["types"].items():
        # the request's span and one per Redis command or pipeline, at least one
        assert figures["spans_made"] % figures["requests"] == 0, kind
        assert figures["spans_made"] // figures["requests"] >= 2, kind
    tenth = rows["otel-10"]["spans"]
    assert tenth["lost"] == 0 and 0 < tenth["server_received"] < tenth["requests"]
    assert data["box"]["others_cpu_pct"] >= 0 and len(data["repeats"]) == 1
    text = (folder / results.REPORT_MD).read_text()
    assert data["command"] in text and table.table(table.summarize(data)) in text
    assert table.table(table.summarize(data)) in output
    assert (folder / results.INSTRUMENTS_CSV).read_text().count("\n") == len(names) + 1
    assert set(data["repeats"][0]["bare"]["types"]) == set(WEIGHTS)


@pytest.mark.parametrize("args, said", [
    (["--instruments", "bare,statsd"], "'statsd' is not an instrument"),
    (["--instruments", "bare,otel-150"], "otel-150: the share of traces kept is a percentage"),
    (["--instruments", "otel"], "add bare"),
    (["--instruments", "bare,otel,otel"], "an instrument named twice"),
    (["--instruments", "bare,otel", "--seconds", "0"], "--seconds 0.05-60"),
    (["--instruments", "bare,otel", "--sink-cpus", "999"], "--sink-cpus: CPU set '999'"),
    (["--instruments", "bare", "--app-cpus", "x"], "--app-cpus: CPU set 'x'"),
    (["--instruments", "bare", "--redis-cpus", "999"], "--redis-cpus: CPU set '999'"),
])
def test_bad_input_is_refused_before_anything_starts(tmp_path, args, said):
    parsed = study.build_parser().parse_args([*args, "--results", str(tmp_path)])
    with pytest.raises(options.OptionsError, match=said):
        study.run(parsed)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args, said", [
    (["--workers", "1"], "--workers must be at least 2"),
    (["--rate", "0"], "--rate above 0"),
    (["--seconds", "500"], "--seconds 2-120"),
])
def test_the_served_part_refuses_bad_input_before_anything_starts(tmp_path, args, said):
    parsed = served.build_parser().parse_args([*args, "--results", str(tmp_path)])
    with pytest.raises(options.OptionsError, match=said):
        served.run(parsed)
    assert list(tmp_path.iterdir()) == []


MULTIPROCESS = ROOT / "notebooks" / "watching-run" / "multiprocess"


def test_the_served_parts_report_counts_its_steps_and_adjusts_them():
    """The multiprocess capture's report, as the served part writes it from its
    served.json: each mode against bare and multiprocess against single, the 3 steps'
    count stated and their p adjusted together (Holm's method, stats.family)."""
    data = json.loads((MULTIPROCESS / served.SERVED_JSON).read_text())
    text = served.report(data)
    assert text == (MULTIPROCESS / results.REPORT_MD).read_text()
    assert "3 steps tested; each p adjusted for the 3 by Holm's method" in text
    assert all("(Holm, 3 steps)" in line for line in text.splitlines()
               if line.startswith(("- single:", "- multiprocess")))
    modes = {r["mode"] for r in data["rows"]}
    assert modes == {"bare", "single", "multiprocess"} and len(data["rows"]) == 3 * len(
        {r["repeat"] for r in data["rows"]})
