"""A minimal trace collector: an OTLP/HTTP traces endpoint (``POST /v1/traces``, protobuf ExportTraceServiceRequest)
on a loopback port, each export decoded with OpenTelemetry's own protobuf classes into plain span dicts and kept
(at most ``max_spans``). For `make demo` (it prints a request's trace), `zoo bench fuzz` (both processes trace
into it) and the tests; a real fleet sends its spans to a real collector (Jaeger, Tempo, the OpenTelemetry
Collector)."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

KINDS = {1: "internal", 2: "server", 3: "client"}


def _value(v: AnyValue):
    which = v.WhichOneof("value")
    if which == "array_value":
        return [_value(x) for x in v.array_value.values]
    return getattr(v, which) if which else None


def _span(resource: dict, span) -> dict:
    return {
        "service": resource.get("service.name"),
        "name": span.name,
        "trace_id": int.from_bytes(span.trace_id, "big"),
        "span_id": int.from_bytes(span.span_id, "big"),
        "parent_span_id": int.from_bytes(span.parent_span_id, "big") if span.parent_span_id else 0,
        "kind": KINDS.get(span.kind, str(span.kind)),
        "start_ns": span.start_time_unix_nano,
        "end_ns": span.end_time_unix_nano,
        "attributes": {a.key: _value(a.value) for a in span.attributes},
        "events": [(e.name, e.time_unix_nano, {a.key: _value(a.value) for a in e.attributes}) for e in span.events],
        "error": span.status.message if span.status.code == 2 else None,
        "trace_state": span.trace_state,
    }


class OtlpReceiver:
    """``with OtlpReceiver() as rx``: ``rx.endpoint`` takes exports; ``rx.spans`` what came; ``rx.wait_for(n)``.
    ``decode``: False takes each export unread (``requests`` counts them; a benchmark's collector costs nothing).
    A body that is not an export is answered 400."""

    def __init__(self, max_spans: int = 100_000, decode: bool = True) -> None:
        self.spans: list[dict] = []
        self.max_spans = max_spans
        self.requests = 0
        self.refused = 0
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                spans = []
                if decode:
                    try:
                        request = ExportTraceServiceRequest.FromString(body)
                    except DecodeError:
                        receiver.refused += 1
                        self.send_response(400)
                        self.send_header("content-length", "0")
                        self.end_headers()
                        return
                    for rs in request.resource_spans:
                        resource = {a.key: _value(a.value) for a in rs.resource.attributes}
                        spans += [_span(resource, s) for ss in rs.scope_spans for s in ss.spans]
                with receiver._lock:
                    receiver.spans += spans[: max(receiver.max_spans - len(receiver.spans), 0)]
                    receiver.requests += 1
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}/v1/traces"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def start(self) -> OtlpReceiver:
        self._thread.start()
        return self

    def __enter__(self) -> OtlpReceiver:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def wait_for(self, predicate, timeout_s: float = 30.0) -> list[dict]:
        """The spans once ``predicate(spans)`` holds; TimeoutError with what came if it does not in time."""
        deadline = time.monotonic() + timeout_s
        while True:
            with self._lock:
                spans = list(self.spans)
            if predicate(spans):
                return spans
            if time.monotonic() > deadline:
                raise TimeoutError(f"the collector got {spans}")
            time.sleep(0.05)
