"""A request's trace through a control plane and an in-process agent (trivial engine): the control plane's
``llm_request`` span is the caller's child, the node's ``node_request`` span is its child, each with vLLM's
attribute names; refused, cancelled and unsampled requests, and a control plane that does not trace."""

from __future__ import annotations

import anyio
import pytest

from agent.agent_config import AgentConfig
from agent.node_agent import NodeAgent
from backends.fake import build_trivial_engine, cpu_test_hardware
from controlplane.frontend import FrontendError
from controlplane.request_spans import RequestSpans
from engine.sampling_params import SamplingParams
from observe.node_spans import NodeSpans
from transport.trace_context import SpanRecord

pytestmark = pytest.mark.anyio

CALLER_TRACE, CALLER_SPAN = 0xABC, 0x123
CALLER = {"traceparent": f"00-{CALLER_TRACE:032x}-{CALLER_SPAN:016x}-01"}


class Sink:
    def __init__(self) -> None:
        self.records: list[SpanRecord] = []

    def emit(self, record: SpanRecord) -> None:
        self.records.append(record)

    def named(self, name: str) -> list[SpanRecord]:
        return [r for r in self.records if r.name == name]


async def _fleet(tg, cp, step_s: float = 0.0, node_sink: Sink | None = None) -> None:
    tracer = NodeSpans(node_sink, "n0") if node_sink is not None else None
    agent = NodeAgent(
        cp.agent_endpoint,
        build_trivial_engine(step_s=step_s),
        AgentConfig(node_id="n0", model_name="fake-bytes"),
        hardware=cpu_test_hardware(),
        tracer=tracer,
    )
    await tg.start(agent.run)
    await cp.wait_until(lambda: len(cp.registry) == 1, 30)


async def _run(cp, request_id: str, headers=None, max_tokens: int = 4, model: str | None = None) -> list:
    chunks = cp.generate(
        request_id, model=model, prompt="hello", sampling=SamplingParams(max_tokens=max_tokens, ignore_eos=True),
        trace_headers=headers,
    )  # fmt: skip
    return [c async for c in chunks]


async def test_the_node_span_is_the_child_of_the_control_planes_which_is_the_callers(controlplane):
    sink = Sink()
    async with controlplane() as cp, anyio.create_task_group() as tg:
        cp.path.spans = RequestSpans(sink)
        await _fleet(tg, cp, node_sink=sink)
        chunks = await _run(cp, "r1", CALLER)
        await cp.wait_until(lambda: len(sink.records) == 2, 30)
        tg.cancel_scope.cancel()
    assert sum(len(c.token_ids) for c in chunks) == 4
    (top,) = sink.named("llm_request")
    (node,) = sink.named("node_request")
    assert (top.context.trace_id, top.context.parent_span_id) == (CALLER_TRACE, CALLER_SPAN)
    assert (node.context.trace_id, node.context.parent_span_id) == (CALLER_TRACE, top.context.span_id)
    a = top.attributes
    assert a["gen_ai.request.id"] == "r1" and a["gen_ai.request.max_tokens"] == 4
    assert (a["gen_ai.usage.prompt_tokens"], a["gen_ai.usage.completion_tokens"]) == (5, 4)  # "hello": 5 bytes
    assert a["gen_ai.response.finish_reasons"] == ["length"] and a["gen_ai.response.model"] == "fake-bytes"
    assert 0 <= a["zoo.latency.routing"] <= a["gen_ai.latency.time_to_first_token"] <= a["gen_ai.latency.e2e"]
    assert (a["zoo.node_id"], a["zoo.outcome"], a["zoo.num_resumes"]) == ("n0", "completed", 0)
    assert [e[0] for e in top.events] == ["routed", "first_token"] and top.error is None
    assert top.start_ns <= top.events[0][1] <= top.events[1][1] <= top.end_ns
    n = node.attributes
    assert (n["zoo.node_id"], n["zoo.gpu_type"], n["zoo.outcome"]) == ("n0", "cpu", "completed")
    assert (n["gen_ai.usage.prompt_tokens"], n["gen_ai.usage.completion_tokens"]) == (5, 4)
    queue, prefill, decode = (n[f"gen_ai.latency.time_in_{k}"] for k in ("queue", "model_prefill", "model_decode"))
    assert queue >= 0 and prefill >= 0 and decode >= 0
    assert n["gen_ai.latency.time_in_model_inference"] == pytest.approx(prefill + decode)
    assert [e[0] for e in node.events] == ["scheduled", "first_token"]
    assert top.start_ns <= node.start_ns <= node.end_ns <= top.end_ns + 10**9  # one wall clock (±1 s of skew)


async def test_a_refused_request_has_a_span_that_says_why(controlplane):
    sink = Sink()
    async with controlplane() as cp, anyio.create_task_group() as tg:
        cp.path.spans = RequestSpans(sink)
        await _fleet(tg, cp)
        with pytest.raises(FrontendError):
            await _run(cp, "r1", CALLER, model="no-such-model")
        tg.cancel_scope.cancel()
    (span,) = sink.records
    assert span.context.trace_id == CALLER_TRACE and span.error is not None and "no-such-model" in span.error
    assert span.attributes["zoo.outcome"] == "refused" and span.attributes["zoo.error_code"]


async def test_a_cancelled_request_ends_both_spans_as_cancelled(controlplane):
    sink = Sink()
    async with controlplane() as cp, anyio.create_task_group() as tg:
        cp.path.spans = RequestSpans(sink)
        await _fleet(tg, cp, step_s=0.02, node_sink=sink)
        chunks = cp.generate(
            "r1", model=None, prompt="hi", sampling=SamplingParams(max_tokens=500, ignore_eos=True),
            trace_headers=CALLER,
        )  # fmt: skip
        async for _ in chunks:
            break
        await chunks.aclose()  # the client went away
        await cp.wait_until(lambda: len(sink.records) == 2, 30)
        tg.cancel_scope.cancel()
    (top,) = sink.named("llm_request")
    (node,) = sink.named("node_request")
    assert top.attributes["zoo.outcome"] == node.attributes["zoo.outcome"] == "cancelled"
    assert node.context.parent_span_id == top.context.span_id
    assert 1 <= top.attributes["gen_ai.usage.completion_tokens"] < 500


async def test_a_caller_that_does_not_sample_gets_no_spans_and_is_served(controlplane):
    sink = Sink()
    unsampled = {"traceparent": f"00-{CALLER_TRACE:032x}-{CALLER_SPAN:016x}-00"}
    async with controlplane() as cp, anyio.create_task_group() as tg:
        cp.path.spans = RequestSpans(sink)
        await _fleet(tg, cp, node_sink=sink)
        chunks = await _run(cp, "r1", unsampled)
        await _run(cp, "r2", CALLER)  # a sampled one after it: both of its spans come, none of r1's
        await cp.wait_until(lambda: len(sink.records) == 2, 30)
        tg.cancel_scope.cancel()
    assert chunks[-1].finished
    assert {r.attributes["gen_ai.request.id"] for r in sink.records} == {"r2"}


async def test_a_control_plane_that_does_not_trace_passes_the_callers_context_to_the_node(controlplane):
    sink = Sink()
    async with controlplane() as cp, anyio.create_task_group() as tg:
        await _fleet(tg, cp, node_sink=sink)  # cp.path.spans stays None
        await _run(cp, "r1", CALLER)
        await _run(cp, "r2")  # no caller context: nothing to hang a node span on
        await cp.wait_until(lambda: len(sink.records) == 1, 30)
        await _run(cp, "r3", CALLER)
        await cp.wait_until(lambda: len(sink.records) == 2, 30)
        tg.cancel_scope.cancel()
    assert [r.attributes["gen_ai.request.id"] for r in sink.records] == ["r1", "r3"]
    assert all(r.context.parent_span_id == CALLER_SPAN for r in sink.records)


async def test_a_zeromq_client_passes_its_trace_context(controlplane, client):
    sink = Sink()
    async with controlplane() as cp, anyio.create_task_group() as tg:
        cp.path.spans = RequestSpans(sink)
        await _fleet(tg, cp, node_sink=sink)
        async with client(cp) as c:
            done = await c.generate("hello", max_tokens=3, ignore_eos=True, trace_headers=CALLER)
        await cp.wait_until(lambda: len(sink.records) == 2, 30)
        tg.cancel_scope.cancel()
    assert done.num_output_tokens == 3
    (top,) = sink.named("llm_request")
    assert (top.context.trace_id, top.context.parent_span_id) == (CALLER_TRACE, CALLER_SPAN)
    assert sink.named("node_request")[0].context.parent_span_id == top.context.span_id


async def test_the_sample_ratio_applies_to_new_traces_only(controlplane):
    sink = Sink()
    async with controlplane() as cp, anyio.create_task_group() as tg:
        cp.path.spans = RequestSpans(sink, sample_ratio=0.0)
        await _fleet(tg, cp, node_sink=sink)
        await _run(cp, "r1")  # no caller context, ratio 0: not traced, anywhere
        await _run(cp, "r2", CALLER)  # the caller sampled it: traced
        await cp.wait_until(lambda: len(sink.records) == 2, 30)
        tg.cancel_scope.cancel()
    assert {r.attributes["gen_ai.request.id"] for r in sink.records} == {"r2"}
