"""An OTLP/HTTP trace receiver that counts spans and keeps nothing: a sink.

    python -m benchmarks.studies.instruments.otlp_sink --port 4318 [--host 127.0.0.1]

No OpenTelemetry collector is packaged here, so the instruments study sends the app's
traces to this: `POST /v1/traces` with an ExportTraceServiceRequest (protobuf, gzip
or not: Content-Encoding), decoded with opentelemetry-proto, answered 200 with an
ExportTraceServiceResponse. It counts the spans (total, by kind: SERVER for Flask's,
CLIENT for Redis's), the exports and the bytes; `GET /count` gives them as JSON. A
body that does not decode is answered 400 and counted under `rejected`, never
counted as spans. In a lab run it would be a host of its own; the study pins it to the
lab's client CPUs, apart from the app, and reads its CPU beside the app's.

Requirements: the venv (opentelemetry-proto). Overhead: a decode per export, a
thread per connection (the exporter keeps one open).
"""

from __future__ import annotations

import argparse
import gzip
import json
import signal
import sys
import threading
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PATH = "/v1/traces"
PROTOBUF = "application/x-protobuf"


class Counts:
    """What arrived, under a lock (a thread per connection)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.data = {"spans": 0, "exports": 0, "bytes": 0, "rejected": 0, "by_kind": {}}

    def add(self, request) -> None:
        from opentelemetry.proto.trace.v1.trace_pb2 import Span
        kinds: dict[str, int] = {}
        for resource in request.resource_spans:
            for scope in resource.scope_spans:
                for span in scope.spans:
                    name = Span.SpanKind.Name(span.kind).removeprefix("SPAN_KIND_")
                    kinds[name] = kinds.get(name, 0) + 1
        with self.lock:
            self.data["spans"] += sum(kinds.values())
            self.data["exports"] += 1
            for kind, n in kinds.items():
                self.data["by_kind"][kind] = self.data["by_kind"].get(kind, 0) + n

    def snapshot(self) -> dict:
        with self.lock:
            return json.loads(json.dumps(self.data))


def decode(body: bytes, encoding: str):
    """The ExportTraceServiceRequest in `body`; ValueError if it is not one."""
    from google.protobuf.message import DecodeError
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )
    try:
        if encoding == "gzip":
            body = gzip.decompress(body)
        elif encoding == "deflate":
            body = zlib.decompress(body)
        elif encoding not in ("", "identity"):
            raise ValueError(f"Content-Encoding {encoding!r} not supported")
        return ExportTraceServiceRequest.FromString(body)
    except (OSError, EOFError, zlib.error, DecodeError) as e:
        raise ValueError(f"not an ExportTraceServiceRequest: {e}") from None


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # the exporter keeps its connection
    counts: Counts

    def log_message(self, format, *args):  # quiet: a line per export would be most of its CPU
        pass

    def answer(self, status: int, body: bytes, kind: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceResponse,
        )
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path != PATH:
            return self.answer(404, b"only POST /v1/traces\n", "text/plain")
        try:
            request = decode(body, (self.headers.get("Content-Encoding") or "").lower())
        except ValueError as e:
            with self.counts.lock:
                self.counts.data["rejected"] += 1
            return self.answer(400, f"{e}\n".encode(), "text/plain")
        self.counts.add(request)
        with self.counts.lock:
            self.counts.data["bytes"] += len(body)
        self.answer(200, ExportTraceServiceResponse().SerializeToString(), PROTOBUF)

    def do_GET(self):
        if self.path != "/count":
            return self.answer(404, b"GET /count\n", "text/plain")
        self.answer(200, json.dumps(self.counts.snapshot()).encode(), "application/json")


def serve(host: str, port: int) -> ThreadingHTTPServer:
    """A sink listening on host:port (not yet serving: call serve_forever)."""
    handler = type("SinkHandler", (Handler,), {"counts": Counts()})
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    return server


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.studies.instruments.otlp_sink",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--port", type=int, required=True, help="TCP port (OTLP/HTTP's is 4318)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if not 0 < args.port < 65536:
        print(f"otlp_sink: --port {args.port}: a TCP port is 1-65535", file=sys.stderr)
        return 2
    try:
        server = serve(args.host, args.port)
    except OSError as e:
        print(f"otlp_sink: cannot listen on {args.host}:{args.port}: {e}", file=sys.stderr)
        return 1

    def stop(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    print(f"otlp_sink: POST http://{args.host}:{args.port}{PATH}, GET /count", flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
