"""The control plane's span of each request (OpenTelemetry), from its arrival to its end, whatever the end.

    submit ─► begin(msg): its TraceContext (a child of the caller's traceparent, else a new trace) ─► Inflight.trace
         │      └─ GenerateRequest.trace_headers: this span is the parent of the serving node's span
         ├─ refused (bad request, no node, overloaded) ─► refused(): a span with status ERROR, its code
         └─ routed ─► chunks (first token, cached tokens, finish reason) ─► resumed elsewhere? (an event each)
               └─ completed / cancelled / failed ─► done(): the span, ended then

The span is vLLM's ``llm_request`` (kind SERVER) with vLLM's attribute names (``vllm/tracing/utils.py``
SpanAttributes, set as ``vllm/v1/engine/output_processor.py`` ``do_tracing`` sets them): gen_ai.request.id,
.max_tokens, .temperature, .top_p, gen_ai.response.model, .finish_reasons, gen_ai.usage.prompt_tokens,
.completion_tokens, .cached_tokens, gen_ai.latency.time_to_first_token and .e2e. vLLM's engine-side latencies
(time in queue, prefill, decode) are the serving node's own span's (observe/node_spans.py), a child of this one.
What only a fleet knows is under ``zoo.``: the node, the traffic class, the tenant, the routing wait, the
resumes, the outcome. Prompts and outputs are never recorded (vLLM's rule too: metadata only).

Sans-IO: spans go to ``export.emit`` (a SpanSink: observe/span_export.py queues them for its own thread).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from transport.messages import ClientGenerate, ErrorReply, TokenChunk
from transport.trace_context import SpanRecord, SpanSink, TraceContext, WallClock, child_of, trace_headers

SPAN_NAME = "llm_request"


@dataclass(slots=True)
class RequestTrace:
    """One request's span while it is in flight: its context and what its end will report."""

    context: TraceContext
    arrival_ns: int
    routed_ns: int = 0
    first_token_ns: int = 0
    finish_reason: str | None = None
    num_cached_tokens: int = 0
    events: list[tuple[str, int, dict[str, Any]]] = field(default_factory=list)

    def on_chunk(self, chunk: TokenChunk, recv_ns: int) -> None:
        if chunk.token_ids and not self.first_token_ns:
            self.first_token_ns = recv_ns
            self.events.append(("first_token", recv_ns, {}))
        if chunk.num_cached_tokens:
            self.num_cached_tokens = chunk.num_cached_tokens
        if chunk.finished:
            self.finish_reason = chunk.finish_reason


def forwarded_headers(msg: ClientGenerate, trace: RequestTrace | None) -> dict[str, str] | None:
    """The trace headers a request's GenerateRequest carries: this span's when the control plane traces, else the
    caller's own (a tracing node then hangs its span under the caller's)."""
    return trace.context.headers() if trace is not None else trace_headers(msg.trace_headers)


class RequestSpans:
    """Begins and ends the control plane's request spans. ``sample_ratio``: the share of requests without a
    caller's trace context that are recorded (a caller's decision is followed); ``clock``: monotonic → wall time."""

    def __init__(self, export: SpanSink, sample_ratio: float = 1.0, clock: WallClock | None = None) -> None:
        self.export = export
        self.sample_ratio = sample_ratio
        self.clock = clock if clock is not None else WallClock()

    def begin(self, msg: ClientGenerate, arrival_ns: int) -> RequestTrace:
        """The request's span context (sampled or not: its flag goes on to the node); only a sampled one is kept
        and recorded (request_path.py)."""
        return RequestTrace(child_of(msg.trace_headers, self.sample_ratio), arrival_ns)

    def routed(self, trace: RequestTrace, routed_ns: int, node_id: str) -> None:
        trace.routed_ns = routed_ns
        trace.events.append(("routed", routed_ns, {"zoo.node_id": node_id}))

    def resumed(self, trace: RequestTrace, now_ns: int, from_node: str, to_node: str) -> None:
        trace.events.append(("resumed", now_ns, {"zoo.from_node_id": from_node, "zoo.node_id": to_node}))

    def refused(self, trace: RequestTrace, msg: ClientGenerate, error: ErrorReply, now_ns: int) -> None:
        attributes = self._request_attributes(msg, trace)
        attributes |= {"zoo.outcome": "refused", "zoo.error_code": str(error.code)}
        self._emit(trace, now_ns, attributes, error=f"{error.code}: {error.message}"[:512])

    def done(self, trace: RequestTrace, inflight, outcome: str, now_ns: int) -> None:
        """``inflight`` (controlplane/request_table.py) left the table as ``outcome``."""
        msg: ClientGenerate = inflight.msg
        attributes = self._request_attributes(msg, trace)
        attributes |= {
            "gen_ai.response.model": inflight.model or None,
            "gen_ai.usage.prompt_tokens": inflight.num_prompt_tokens,
            "gen_ai.usage.completion_tokens": inflight.num_output_tokens,
            "gen_ai.usage.cached_tokens": trace.num_cached_tokens,
            "gen_ai.latency.e2e": (now_ns - trace.arrival_ns) / 1e9,
            "zoo.node_id": inflight.node_id,
            "zoo.traffic_class": inflight.traffic_class,
            "zoo.num_resumes": inflight.num_resumes,
            "zoo.outcome": outcome,
        }
        if trace.finish_reason is not None:
            attributes["gen_ai.response.finish_reasons"] = [trace.finish_reason]
        if trace.first_token_ns:
            attributes["gen_ai.latency.time_to_first_token"] = (trace.first_token_ns - trace.arrival_ns) / 1e9
        self._emit(trace, now_ns, attributes, error=None if outcome != "failed" else "failed")

    def _request_attributes(self, msg: ClientGenerate | None, trace: RequestTrace) -> dict[str, Any]:
        attributes: dict[str, Any] = {}
        if msg is not None:
            sampling = msg.sampling
            attributes |= {
                "gen_ai.request.id": msg.request_id,
                "gen_ai.request.model": msg.model,
                "gen_ai.request.max_tokens": sampling.max_tokens,
                "gen_ai.request.temperature": sampling.temperature,
                "gen_ai.request.top_p": sampling.top_p,
                "zoo.tenant": msg.tenant or None,
            }
        if trace.routed_ns:
            attributes["zoo.latency.routing"] = (trace.routed_ns - trace.arrival_ns) / 1e9
        return attributes

    def _emit(self, trace: RequestTrace, now_ns: int, attributes: dict[str, Any], error: str | None) -> None:
        wall = self.clock.wall_ns
        events = [(name, wall(t), a) for name, t, a in trace.events]
        self.export.emit(
            SpanRecord(SPAN_NAME, trace.context, wall(trace.arrival_ns), wall(now_ns), attributes, events, error=error)
        )
