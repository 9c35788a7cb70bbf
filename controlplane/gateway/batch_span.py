"""An OpenAI batch's own span (OpenTelemetry): from its creation to its end, the parent of its requests' spans.

    POST /v1/batches ─► begin(the caller's headers): a child of the caller's span, else a new trace (sampled at the
         control plane's ratio) ─► Batch.trace_headers (each of its requests' ``llm_request`` spans hangs under
         it), Batch.trace_parent_span_id, Batch.trace_start_ns
    the batch ends (completed, failed, expired, cancelled) ─► end(batch): the ``batch`` span, kind INTERNAL

Attributes: ``zoo.batch.id``, ``.endpoint``, ``.status``, ``.model``, ``zoo.batch.requests.total``, ``.completed``,
``.failed``, ``gen_ai.usage.prompt_tokens`` / ``.completion_tokens`` / ``.cached_tokens`` (the batch's totals) and
``zoo.tenant``; events ``in_progress`` and ``finalizing`` at the times the batch reports (whole seconds, as OpenAI's
``*_at`` fields). A batch that failed (its input refused) or expired has status ERROR. The span's ids and start live in
the batch, which is journaled: a batch resumed after a restart ends the span it began. Nothing of a request's content
is recorded. Sans-IO: spans go to a SpanSink (observe/span_export.py).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from controlplane.gateway.batches import Batch
from transport.trace_context import SpanRecord, SpanSink, TraceContext, child_of, incoming

SPAN_NAME = "batch"
_EVENTS = ("in_progress", "finalizing")


class BatchSpans:
    """Begins and ends batches' spans. ``sample_ratio``: the share of batches created without a caller's trace
    context that are recorded (the control plane's ``--otlp-traces-sample-ratio``)."""

    def __init__(self, export: SpanSink, sample_ratio: float = 1.0) -> None:
        self.export = export
        self.sample_ratio = sample_ratio

    def begin(self, batch: Batch, headers: Mapping[str, str] | None, now_ns: int | None = None) -> None:
        """Give ``batch`` its span's context (its requests' parent) and start."""
        context = child_of(headers, self.sample_ratio)
        batch.trace_headers = context.headers()
        batch.trace_parent_span_id = context.parent_span_id
        batch.trace_start_ns = time.time_ns() if now_ns is None else now_ns

    def end(self, batch: Batch, now_ns: int | None = None) -> None:
        """Record ``batch``'s span, ended now (nothing for a batch begun without a span, or not sampled)."""
        context = context_of(batch)
        if context is None or not context.sampled:
            return
        usage = batch.usage
        attributes: dict[str, Any] = {
            "zoo.batch.id": batch.id,
            "zoo.batch.endpoint": batch.endpoint,
            "zoo.batch.status": batch.status,
            "zoo.batch.model": batch.model,
            "zoo.batch.requests.total": batch.total,
            "zoo.batch.requests.completed": batch.completed,
            "zoo.batch.requests.failed": batch.failed,
            "gen_ai.usage.prompt_tokens": usage.get("input_tokens", 0),
            "gen_ai.usage.completion_tokens": usage.get("output_tokens", 0),
            "gen_ai.usage.cached_tokens": usage.get("cached_tokens", 0),
            "zoo.tenant": batch.tenant,
        }
        events = [
            (name, batch.times[f"{name}_at"] * 1_000_000_000, {}) for name in _EVENTS if f"{name}_at" in batch.times
        ]
        error = None
        if batch.status in ("failed", "expired"):
            first = (batch.errors or [{}])[0]
            error = f"{batch.status}: {first.get('code', '')}".rstrip(": ")[:512]
        end_ns = max(time.time_ns() if now_ns is None else now_ns, batch.trace_start_ns)
        record = SpanRecord(
            SPAN_NAME, context, batch.trace_start_ns, end_ns, attributes, events, kind="internal", error=error
        )
        self.export.emit(record)


def context_of(batch: Batch) -> TraceContext | None:
    """The batch's own span context (None: it was begun without one)."""
    if not batch.trace_start_ns:
        return None
    span = incoming(batch.trace_headers)
    if span is None:
        return None
    state = span.trace_state.to_header() if span.trace_state else ""
    return TraceContext(span.trace_id, span.span_id, batch.trace_parent_span_id, span.trace_flags.sampled, state)
