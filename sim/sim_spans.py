"""A simulated run's requests as OpenTelemetry spans (`zoo sim --otlp-traces-endpoint URL`): each one's
``llm_request`` span as the control plane records a real request's (controlplane/request_spans.py: vLLM's
attribute names, ours under ``zoo.``), so a simulated run is read in the same trace tools (Jaeger, Tempo, Grafana)
and by the same queries as the fleet's own traces.

    start       the request's arrival               end   its last token (refused: its arrival; still running at
                                                          the drain limit: the run's end, outcome "unfinished")
    events      routed (its node), first_token
    attributes  gen_ai.request.id, .max_tokens, gen_ai.response.model, gen_ai.usage.prompt_tokens, .completion_tokens,
                .cached_tokens, gen_ai.latency.time_to_first_token, .e2e, zoo.node_id, zoo.traffic_class, zoo.outcome
                (completed | refused | unfinished), zoo.error_code (refused), zoo.num_preemptions, and the run's
                zoo.sim.policy, zoo.sim.seed, zoo.sim.trace (a refused span has status ERROR, as a real one)

Times are virtual seconds placed at ``epoch_ns`` (the wall clock when the run started). Each request is the root of
its own trace, as a request without a caller's traceparent is; ``sample_ratio`` keeps that share of them by
OpenTelemetry's trace-id ratio rule, over ids drawn from a generator seeded by the run's seed (the same run traces
the same requests). The spans go to the export ``batch`` at a time, a flush between, so a whole trace's requests
(19,366 for conv) are not turned away by its bounded queue.
"""

from __future__ import annotations

import random
from typing import Any

from sim.des import SimResult
from transport.trace_context import SpanRecord, SpanSink, TraceContext, root_sampled

SPAN_NAME = "llm_request"  # the control plane's (controlplane/request_spans.py)


def emit_sim_spans(
    result: SimResult,
    export: SpanSink,
    *,
    epoch_ns: int,
    seed: int,
    model: str,
    sample_ratio: float = 1.0,
    batch: int = 1024,
) -> int:
    """Send ``result``'s requests' spans to ``export``; the number sent."""
    rng = random.Random(f"sim-spans/{seed}/{result.policy}")
    flush = getattr(export, "flush", None)
    run = {"zoo.sim.policy": result.policy, "zoo.sim.seed": seed, "zoo.sim.trace": result.workload}
    sent = 0

    def at(s: float) -> int:
        return epoch_ns + round(s * 1e9)

    for record in result.records:
        trace_id = rng.getrandbits(128) or 1
        context = TraceContext(trace_id, rng.getrandbits(64) or 1)
        if not root_sampled(trace_id, sample_ratio):
            continue
        attributes: dict[str, Any] = {
            "gen_ai.request.id": record.req_id,
            "gen_ai.request.max_tokens": record.max_tokens,
            "zoo.traffic_class": record.traffic_class,
            **run,
        }
        events: list[tuple[str, int, dict[str, Any]]] = []
        error = None
        end_s = record.arrival_s
        if record.refusal is not None:
            attributes |= {"zoo.outcome": "refused", "zoo.error_code": record.refusal}
            error = f"{record.refusal}: refused"
        else:
            finished = record.finish_s is not None
            end_s = record.finish_s if finished else max(result.end_s, record.arrival_s)
            attributes |= {
                "gen_ai.response.model": model,
                "gen_ai.usage.prompt_tokens": record.num_prompt_tokens,
                "gen_ai.usage.completion_tokens": record.num_output_tokens,
                "gen_ai.usage.cached_tokens": record.num_cached_prompt_tokens,
                "zoo.node_id": record.node_id,
                "zoo.num_preemptions": record.num_preemptions,
                "zoo.outcome": "completed" if finished else "unfinished",
            }
            if record.node_id is not None:
                events.append(("routed", at(record.arrival_s), {"zoo.node_id": record.node_id}))
            if record.first_token_s is not None:
                attributes["gen_ai.latency.time_to_first_token"] = record.first_token_s - record.arrival_s
                events.append(("first_token", at(record.first_token_s), {}))
            if finished:
                attributes["gen_ai.latency.e2e"] = end_s - record.arrival_s
        export.emit(SpanRecord(SPAN_NAME, context, at(record.arrival_s), at(end_s), attributes, events, error=error))
        sent += 1
        if flush is not None and sent % batch == 0:
            flush()
    if flush is not None:
        flush()
    return sent


def send_run_spans(spans, result: SimResult, *, epoch_ns: int, seed: int, model: str, log=None) -> None:
    """``zoo sim``'s: a run's spans to ``spans`` (a SpanExport, observe/span_export.py: its sample ratio; None:
    nothing), and a log line saying how many went and how many its queue turned away so far."""
    if spans is None:
        return
    ratio = spans.config.sample_ratio if hasattr(spans, "config") else 1.0
    sent = emit_sim_spans(result, spans, epoch_ns=epoch_ns, seed=seed, model=model, sample_ratio=ratio)
    if log is not None:
        log(f"    spans: {sent} sent to the collector ({getattr(spans, 'dropped', 0)} turned away so far: queue full)")
