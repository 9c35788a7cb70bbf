"""Spans to an OpenTelemetry collector: OTLP over HTTP (protobuf), in batches, off the caller's thread.

    SpanRecord (finished: ids, times, attributes) ─► SpanExport.emit ─► the SDK's BatchSpanProcessor (bounded
    queue, its own thread) ─► OTLPSpanExporter ─► POST {endpoint} (e.g. http://collector:4318/v1/traces)

A span is recorded once it is finished, with the ids its ``TraceContext`` gave it when it began (its children on
other processes already carry them), so nothing lives between a request's start and end but that context. The
queue is the SDK's: at most ``max_queue_size`` spans wait; past it new ones are dropped (counted in ``dropped``),
so a collector that is down or slow never holds a request up or grows memory. ``close`` flushes what is queued.

vLLM's ``--otlp-traces-endpoint`` names the same thing (vllm/tracing/otel.py); vLLM defaults to OTLP over gRPC,
this product speaks OTLP/HTTP only (collectors take both: 4317 gRPC, 4318 HTTP), so it needs no gRPC stack.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanKind, Status, StatusCode

from transport.codec import clip
from transport.trace_context import SpanRecord

log = logging.getLogger(__name__)

MAX_ATTRIBUTE_CHARS = 256  # a caller's text in an attribute (a model name, a request id) is cut: bounded spans
SCOPE = InstrumentationScope("silicon-zoo", "0.1.0")
KINDS = {"server": SpanKind.SERVER, "internal": SpanKind.INTERNAL, "client": SpanKind.CLIENT}


@dataclass(slots=True)
class TracingConfig:
    """Where a process sends its spans.

    endpoint: the collector's OTLP/HTTP traces URL (``zoo controlplane|agent --otlp-traces-endpoint``).
    service_name: the resource's ``service.name`` (zoo-controlplane, zoo-agent).
    timeout_s: one export's HTTP timeout. max_queue_size: spans waiting for export at most (then dropped).
    schedule_delay_s: how long a span may wait for its batch.
    sample_ratio: the share of new traces (requests without a caller's traceparent) that are recorded; a caller's
        own decision is always followed (transport/trace_context.py). A span costs ~0.1 ms of CPU in this process
        (bench/results/2026-12-05-tracing-overhead.json): a busy control plane samples.
    """

    endpoint: str
    service_name: str
    timeout_s: float = 10.0
    max_queue_size: int = 2048
    schedule_delay_s: float = 1.0
    sample_ratio: float = 1.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.sample_ratio <= 1.0:
            raise ValueError(f"the sample ratio must be in [0, 1], got {self.sample_ratio}")
        if not self.endpoint.startswith(("http://", "https://")):
            raise ValueError(f"the OTLP traces endpoint must be an http(s) URL, got {self.endpoint!r}")
        if self.timeout_s <= 0 or self.schedule_delay_s <= 0 or self.max_queue_size < 1:
            raise ValueError("timeout_s and schedule_delay_s must be > 0 and max_queue_size >= 1")


class _Counted(SpanExporter):
    """The exporter, its batches counted by result (success: the collector took them)."""

    def __init__(self, exporter: SpanExporter) -> None:
        self.exporter = exporter
        self.batches = {"success": 0, "failure": 0}

    def export(self, spans) -> SpanExportResult:
        try:
            result = self.exporter.export(spans)
        except Exception:  # the SDK's thread would log it; counted as the failure it is
            result = SpanExportResult.FAILURE
        self.batches["success" if result is SpanExportResult.SUCCESS else "failure"] += 1
        return result

    def shutdown(self) -> None:
        self.exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.exporter.force_flush(timeout_millis)


class SpanExport:
    """One process's span exporter. ``exporter``: the SDK exporter to batch into (None: OTLP/HTTP to
    ``config.endpoint``; tests give an in-memory one)."""

    def __init__(self, config: TracingConfig, exporter: SpanExporter | None = None) -> None:
        if exporter is None:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            exporter = OTLPSpanExporter(endpoint=config.endpoint, timeout=config.timeout_s)
        self.config = config
        self._exporter = _Counted(exporter)
        self.resource = Resource.create({"service.name": config.service_name})
        self._processor = BatchSpanProcessor(
            self._exporter,
            max_queue_size=config.max_queue_size,
            max_export_batch_size=min(512, config.max_queue_size),
            schedule_delay_millis=1e3 * config.schedule_delay_s,
            export_timeout_millis=1e3 * config.timeout_s,
        )
        # the SDK's queue (a deque), read to turn a span away before the SDK would (it warns once per span)
        self._queue = getattr(getattr(self._processor, "_batch_processor", None), "_queue", ())
        self.emitted = 0  # spans handed to the queue
        self.dropped = 0  # spans turned away: the queue was full (the collector is down or slow)
        self.unsampled = 0  # spans not recorded: their caller said "not sampled"
        self.closed = False

    def emit(self, record: SpanRecord) -> None:
        """Queue a finished span for export (never blocks; nothing when its trace is not sampled or after close).
        Never raises: a span that cannot be made is logged and counted as dropped (tracing never fails a request)."""
        try:
            self._emit(record)
        except Exception:
            self.dropped += 1
            log.exception("a span could not be recorded (%s)", clip(record.name))

    def _emit(self, record: SpanRecord) -> None:
        ctx = record.context
        if not ctx.sampled:
            self.unsampled += 1
            return
        if self.closed:
            return
        if len(self._queue) >= self.config.max_queue_size:
            self.dropped += 1
            return
        flags = trace.TraceFlags(trace.TraceFlags.SAMPLED)
        state = trace.TraceState.from_header([ctx.tracestate]) if ctx.tracestate else None
        span_context = trace.SpanContext(ctx.trace_id, ctx.span_id, False, flags, state)
        parent = None
        if ctx.parent_span_id:
            parent = trace.SpanContext(ctx.trace_id, ctx.parent_span_id, True, flags, state)
        status = Status(StatusCode.ERROR, record.error) if record.error is not None else Status(StatusCode.UNSET)
        span = ReadableSpan(
            record.name,
            context=span_context,
            parent=parent,
            resource=self.resource,
            attributes=_bounded(record.attributes),
            events=[Event(name, _bounded(attributes), timestamp) for name, timestamp, attributes in record.events],
            kind=KINDS.get(record.kind, SpanKind.INTERNAL),
            status=status,
            start_time=record.start_ns,
            end_time=max(record.end_ns, record.start_ns),
            instrumentation_scope=SCOPE,
        )
        self._processor.on_end(span)
        self.emitted += 1

    @property
    def export_batches(self) -> dict[str, int]:
        """Batches sent to the collector, by result: "success", "failure" (refused, unreachable, timed out)."""
        return dict(self._exporter.batches)

    def flush(self, timeout_s: float = 5.0) -> bool:
        return self._processor.force_flush(int(1e3 * timeout_s))

    def close(self) -> None:
        """Export what is queued, then stop the export thread (idempotent)."""
        if not self.closed:
            self.closed = True
            self._processor.shutdown()


def _bounded(attributes: dict[str, Any]) -> dict[str, Any]:
    """The attributes without the unset ones, each text cut to ``MAX_ATTRIBUTE_CHARS`` (in a list too)."""
    bounded = {}
    for key, value in attributes.items():
        if isinstance(value, str):
            value = clip(value, MAX_ATTRIBUTE_CHARS)
        elif isinstance(value, list):
            value = [clip(v, MAX_ATTRIBUTE_CHARS) if isinstance(v, str) else v for v in value]
        if value is not None:
            bounded[key] = value
    return bounded
