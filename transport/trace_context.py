"""A request's spans across hops: the W3C Trace Context a caller's ``traceparent`` / ``tracestate`` carry, the
context of a span a process records as their child, and the finished span's record (sans-IO: no export here;
observe/span_export.py sends records to a collector).

    HTTP headers / ClientGenerate.trace_headers ─► incoming() ─► child_of() ─► TraceContext (this span's ids)
                                                                                  └─ headers() ─► the next hop

The headers are vLLM's (``vllm/tracing/utils.py`` ``TRACE_HEADERS``: traceparent, tracestate) and are parsed by
OpenTelemetry's own propagator (``TraceContextTextMapPropagator``): a malformed or all-zero traceparent is no
parent (the span starts a new trace), never an error. The sampling decision is the parent's, as the SDK's
ParentBased sampler makes it: a caller that says "not sampled" gets no spans here, and its flag travels on. A
new trace is sampled at ``root_ratio`` by OpenTelemetry's TraceIdRatioBased rule (its trace id's low 64 bits
below ``ratio * 2**64``: the same id gets the same decision everywhere); 1, the default, samples every one.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from opentelemetry import trace
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

TRACE_HEADERS = ("traceparent", "tracestate")
MAX_HEADER_CHARS = 512  # W3C: a tracestate is at most 32 members; longer ones are dropped, not cut

_PROPAGATOR = TraceContextTextMapPropagator()
_IDS = RandomIdGenerator()
_ID_MASK = (1 << 64) - 1


@dataclass(frozen=True, slots=True)
class TraceContext:
    """One span's place in a trace: its ids, its parent's span id (0: a root span), and the caller's sampling
    flag and tracestate, passed on unchanged."""

    trace_id: int
    span_id: int
    parent_span_id: int = 0
    sampled: bool = True
    tracestate: str = ""

    def headers(self) -> dict[str, str]:
        """The headers that make this span the parent of the next hop's."""
        flags = "01" if self.sampled else "00"
        headers = {"traceparent": f"00-{self.trace_id:032x}-{self.span_id:016x}-{flags}"}
        if self.tracestate:
            headers["tracestate"] = self.tracestate
        return headers


def trace_headers(headers: Mapping[str, str] | None) -> dict[str, str] | None:
    """The trace headers among ``headers`` (an HTTP request's, or a message's ``trace_headers``), each at most
    ``MAX_HEADER_CHARS``; None when there are none."""
    if not headers:
        return None
    found = {}
    for name in TRACE_HEADERS:
        value = headers.get(name)
        if isinstance(value, str) and value and len(value) <= MAX_HEADER_CHARS:
            found[name] = value
    return found or None


def root_sampled(trace_id: int, ratio: float) -> bool:
    """OpenTelemetry's TraceIdRatioBased decision (opentelemetry-sdk ``sampling.py``): the low 64 bits of the trace
    id below ``round(ratio * 2**64)``."""
    return (trace_id & _ID_MASK) < round(min(max(ratio, 0.0), 1.0) * (_ID_MASK + 1))


def incoming(headers: Mapping[str, str] | None) -> trace.SpanContext | None:
    """The caller's span, when ``headers`` carry a valid traceparent."""
    found = trace_headers(headers)
    if found is None or "traceparent" not in found:
        return None
    context = trace.get_current_span(_PROPAGATOR.extract(found)).get_span_context()
    return context if context.is_valid else None


def child_of(headers: Mapping[str, str] | None, root_ratio: float = 1.0) -> TraceContext:
    """A new span's context: the child of the caller's span in ``headers``, else the root of a new trace (sampled
    at ``root_ratio``)."""
    parent = incoming(headers)
    if parent is None:
        trace_id = _IDS.generate_trace_id()
        return TraceContext(trace_id, _IDS.generate_span_id(), sampled=root_sampled(trace_id, root_ratio))
    return TraceContext(
        parent.trace_id,
        _IDS.generate_span_id(),
        parent.span_id,
        sampled=parent.trace_flags.sampled,
        tracestate=parent.trace_state.to_header() if parent.trace_state else "",
    )


@dataclass(slots=True)
class SpanRecord:
    """A finished span: times are wall-clock nanoseconds (Unix epoch); ``events``: (name, time, attributes);
    ``kind``: OpenTelemetry's span kind by name ("server", "internal"); ``error``: the status description of a
    span that failed (None: it did not). Attributes whose value is None are left out."""

    name: str
    context: TraceContext
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    events: list[tuple[str, int, dict[str, Any]]] = field(default_factory=list)
    kind: str = "server"
    error: str | None = None


class SpanSink(Protocol):
    """Where finished spans go (observe/span_export.py's SpanExport: OTLP to a collector). Never blocks."""

    def emit(self, record: SpanRecord) -> None: ...


class WallClock:
    """Monotonic stamps (``time.monotonic_ns``, what requests are timed by) as wall-clock nanoseconds, by the
    offset between the two clocks when it was made (a span's times are Unix time)."""

    def __init__(self, offset_ns: int | None = None) -> None:
        self.offset_ns = time.time_ns() - time.monotonic_ns() if offset_ns is None else offset_ns

    def wall_ns(self, monotonic_ns: int) -> int:
        return monotonic_ns + self.offset_ns

    def wall_ns_of_s(self, monotonic_s: float) -> int:
        return round(monotonic_s * 1e9) + self.offset_ns
