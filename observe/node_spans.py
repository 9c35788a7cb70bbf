"""A node's span of each request it serves (OpenTelemetry): the engine's part of the request's trace.

    GenerateRequest (trace_headers: the control plane's span) ─► on_generate: its context kept, by request id
    EngineObservation.finished (the engine's time stamps) ─► observe ─► a span, the child of the control plane's
    CancelRequest ─► on_cancel: a span ended at the cancel (the engine reports nothing for an aborted request)

The span, ``node_request`` (kind SERVER), runs from the GenerateRequest's arrival at the agent to the request's
end there, with vLLM's engine-side latencies under vLLM's names (``vllm/tracing/utils.py`` SpanAttributes, as
``vllm/v1/engine/output_processor.py`` ``do_tracing`` derives them from the engine's stamps):

    gen_ai.latency.time_in_queue          arrival here → first scheduled
    gen_ai.latency.time_in_model_prefill  first scheduled → first token
    gen_ai.latency.time_in_model_decode   first token → last token
    gen_ai.latency.time_in_model_inference first scheduled → last token

and the usage (prompt, completion, cached tokens), the finish reason, the node and its GPU type, and the
preemptions it suffered (``zoo.num_preemptions``: swapped or recomputed). A request the control plane resumed
here after another node was lost carries ``zoo.num_resumed_tokens``. Only requests that came with sampled trace
headers are traced; at most ``max_pending`` wait for their end (the oldest context is dropped past it: a request
that migrated away ends elsewhere and is never reported here).

The engine's stamps are its clock's (``time.monotonic`` on an agent); ``clock`` maps them to wall time.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import Any

from agent.node_core import EngineObservation, FinishedRequest
from transport.messages import GenerateRequest, NodeHello
from transport.trace_context import SpanRecord, SpanSink, TraceContext, WallClock, child_of, incoming

SPAN_NAME = "node_request"


class NodeSpans:
    """One agent's request spans, sent to ``export`` (a SpanSink: observe/span_export.py)."""

    def __init__(
        self, export: SpanSink, node_id: str = "", clock: WallClock | None = None, max_pending: int = 65536
    ) -> None:
        self.export = export
        self.clock = clock if clock is not None else WallClock()
        self.max_pending = max_pending
        self.node: dict[str, Any] = {"zoo.node_id": node_id or None}
        self._pending: OrderedDict[str, tuple[TraceContext, int, int]] = OrderedDict()

    def describe_node(self, hello: NodeHello) -> None:
        """What every span says about the node (its hello)."""
        self.node = {
            "zoo.node_id": hello.node_id,
            "zoo.gpu_type": hello.hardware.gpu_type,
            "zoo.backend": hello.backend,
            "gen_ai.response.model": hello.model,
        }

    def on_generate(self, msg: GenerateRequest, recv_ns: int) -> None:
        """A request arrived (``recv_ns``: its receipt, monotonic): traced when it carries a traceparent."""
        parent = incoming(msg.trace_headers)
        if parent is None or not parent.trace_flags.sampled:
            return
        self._pending[msg.request_id] = (child_of(msg.trace_headers), recv_ns, msg.num_resumed_tokens)
        self._pending.move_to_end(msg.request_id)
        while len(self._pending) > self.max_pending:
            self._pending.popitem(last=False)

    def on_cancel(self, request_id: str, now_ns: int | None = None) -> None:
        """The control plane cancelled it here: its span ends now."""
        pending = self._pending.pop(request_id, None)
        if pending is None:
            return
        context, recv_ns, num_resumed = pending
        now_ns = time.monotonic_ns() if now_ns is None else now_ns
        attributes = {**self.node, "gen_ai.request.id": request_id, "zoo.outcome": "cancelled"}
        if num_resumed:
            attributes["zoo.num_resumed_tokens"] = num_resumed
        wall = self.clock.wall_ns
        self.export.emit(SpanRecord(SPAN_NAME, context, wall(recv_ns), wall(now_ns), attributes))

    def observe(self, obs: EngineObservation) -> None:
        """A step's finished requests: the traced ones' spans."""
        for finished in obs.finished:
            pending = self._pending.pop(finished.request_id, None)
            if pending is not None:
                self.export.emit(self._record(finished, *pending))

    def _record(self, f: FinishedRequest, context: TraceContext, recv_ns: int, num_resumed: int) -> SpanRecord:
        wall, wall_s = self.clock.wall_ns, self.clock.wall_ns_of_s
        attributes: dict[str, Any] = {
            **self.node,
            "gen_ai.request.id": f.request_id,
            "gen_ai.usage.prompt_tokens": f.num_prompt_tokens,
            "gen_ai.usage.completion_tokens": f.num_output_tokens,
            "gen_ai.usage.cached_tokens": f.num_cached_tokens,
            "gen_ai.response.finish_reasons": [f.finish_reason] if f.finish_reason else None,
            "zoo.outcome": "completed",
            "zoo.num_resumed_tokens": num_resumed or None,
        }
        m = f.metrics
        events: list[tuple[str, int, dict[str, Any]]] = []
        end_ns = time.monotonic_ns()
        if m is not None:
            arrival_s = recv_ns / 1e9
            scheduled, first, last = m.first_scheduled_time_s, m.first_token_time_s, m.last_token_time_s
            if scheduled is not None:
                attributes["gen_ai.latency.time_in_queue"] = max(scheduled - arrival_s, 0.0)
                events.append(("scheduled", wall_s(scheduled), {}))
            if scheduled is not None and first is not None:
                attributes["gen_ai.latency.time_in_model_prefill"] = first - scheduled
            if first is not None:
                events.append(("first_token", wall_s(first), {}))
                if last is not None:
                    attributes["gen_ai.latency.time_in_model_decode"] = last - first
            if scheduled is not None and last is not None:
                attributes["gen_ai.latency.time_in_model_inference"] = last - scheduled
            attributes["zoo.num_preemptions"] = m.num_preemptions
            if m.finished_time_s is not None:
                end_ns = round(m.finished_time_s * 1e9)
        return SpanRecord(SPAN_NAME, context, wall(recv_ns), wall(end_ns), attributes, events)
