"""A request's age at the agent (agent/request_age.py) and the engine clocks it starts (NodeCore.add(age_s)):
TTFT and E2E count from the gateway's arrival; the prefix cache hit of each request travels in its chunks.
End to end through a real NodeAgent and through the engine thread's inbox, with lower bounds only (a busy
machine lengthens every wait, never shortens one): no check here passes or fails on how loaded the CPUs are."""

from __future__ import annotations

import time

import anyio
import pytest
from prometheus_client.parser import text_string_to_metric_families

from agent.agent_config import AgentConfig
from agent.engine_thread import EngineThread
from agent.node_agent import NodeAgent
from agent.node_core import NodeCore
from agent.request_age import request_age_s
from backends.fake import ByteTokenizer, TrivialRunner, build_trivial_engine, cpu_test_hardware
from engine.clock import ManualClock
from engine.config import CacheConfig, SchedulerConfig
from engine.llm_engine import LLMEngine
from engine.sampling_params import SamplingParams
from observe.agent_exporter import AgentExporter
from transport.messages import GenerateRequest, NodeHello, TokenChunk, Welcome

MS = 1_000_000  # ns


@pytest.mark.parametrize(
    ("arrival_ns", "sent_ns", "recv_ns", "now_ns", "age_ms"),
    [
        (100 * MS, 130 * MS, 131 * MS, 135 * MS, 35.0),  # one host: control plane 30 + hop 1 + handler 4
        (100 * MS, 130 * MS, 10**15, 10**15 + 4 * MS, 34.0),  # another host's clock: the hop is left out
        (100 * MS, 130 * MS, 129 * MS, 129 * MS, 30.0),  # a "negative hop" is two clocks: left out
        (0, 130 * MS, 131 * MS, 131 * MS, 1.0),  # no arrival stamp: from the send on
        (0, 0, 131 * MS, 132 * MS, 1.0),  # nothing stamped: from the receipt on
    ],
)
def test_request_age(arrival_ns, sent_ns, recv_ns, now_ns, age_ms):
    assert request_age_s(arrival_ns, sent_ns, recv_ns, now_ns) == pytest.approx(age_ms / 1e3)


def _core() -> tuple[NodeCore, ManualClock]:
    clock = ManualClock(start_s=100.0)
    engine = LLMEngine(
        TrivialRunner(max_model_len=128),
        ByteTokenizer(),
        SchedulerConfig(max_num_batched_tokens=256, max_num_seqs=8, max_model_len=128),
        CacheConfig(block_size=4, num_device_blocks=64, num_host_blocks=0),
        clock,
    )
    return NodeCore(engine, "n0", observe=True), clock


def test_ttft_and_e2e_count_from_the_arrival_and_chunks_carry_the_cache_hit():
    core, clock = _core()
    prompt = [3 + i for i in range(10)]
    core.add("old", prompt, SamplingParams(temperature=0.0, max_tokens=1), age_s=0.25)
    clock.advance(0.5)
    outputs = core.step()
    (finished,) = core.observation(outputs, 0.5).finished
    assert finished.ttft_s == pytest.approx(0.75) and finished.e2e_s == pytest.approx(0.75)
    assert core.token_chunk(outputs[0]).num_cached_tokens == 0

    core.add("again", prompt, SamplingParams(temperature=0.0, max_tokens=1))  # the same prompt: 2 full blocks hit
    (output,) = core.step()
    assert core.token_chunk(output).num_cached_tokens == 8


@pytest.mark.anyio
async def test_the_agents_ttft_counts_from_the_gateways_arrival_not_the_engines_pickup(router_peer):
    """A real NodeAgent gets a GenerateRequest stamped as having arrived at the gateway 5 s before the control
    plane sent it: its vllm:time_to_first_token_seconds (and E2E) observe at least those 5 s. Load-proof: a
    slow machine only lengthens it; a clock started when the engine thread picks the request up (the bug
    this guards against) reads milliseconds."""
    cp = router_peer
    exporter = AgentExporter()
    waited_s = 5.0
    async with anyio.create_task_group() as tg:
        agent = NodeAgent(
            cp.endpoint,
            build_trivial_engine(),
            AgentConfig(node_id="n1", model_name="fake-bytes", hello_timeout_s=0.3),
            hardware=cpu_test_hardware(),
            exporter=exporter,
        )
        await tg.start(agent.run)
        peer, _ = await cp.expect(NodeHello)
        await cp.send(peer=peer, msg=Welcome(node_id="n1", heartbeat_interval_s=0.05, report_interval_s=0.05))
        now_ns = time.monotonic_ns()
        msg = GenerateRequest(
            request_id="old",
            prompt_token_ids=[5, 6, 7],
            sampling=SamplingParams(max_tokens=2),
            arrival_ns=now_ns - int(waited_s * 1e9),
            routed_ns=now_ns,
        )
        msg.sent_ns = now_ns  # what transport/sockets.py stamps at send
        await cp.send(peer=peer, msg=msg)
        await cp.expect(TokenChunk, where=lambda c: c.request_id == "old" and c.finished)
        with anyio.fail_after(10):  # the observation reaches the exporter through the engine's outbox
            while not (found := _histogram(exporter, "vllm:time_to_first_token_seconds")).get("count"):
                await anyio.sleep(0.01)
        tg.cancel_scope.cancel()
    assert found["count"] == 1 and found["sum"] >= waited_s
    e2e = _histogram(exporter, "vllm:e2e_request_latency_seconds")
    assert e2e["count"] == 1 and e2e["sum"] >= waited_s


def _histogram(exporter: AgentExporter, name: str) -> dict[str, float]:
    """{"sum": …, "count": …} of an agent histogram (its buckets left out)."""
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(exporter.render().decode()):
        if family.name == name:
            for sample in family.samples:
                kind = sample.name.rsplit("_", 1)[-1]
                if kind in ("sum", "count"):
                    found[kind] = found.get(kind, 0.0) + sample.value
    return found


def test_the_time_a_request_waits_in_the_engine_threads_inbox_counts_too():
    """The engine thread applies queued requests between steps: the time one waited in its inbox (here at
    least 0.2 s: a real sleep, which a busy machine only lengthens) is added to its age, so the engine's TTFT
    does not start when the thread picks it up."""
    core, _ = _core()
    thread = EngineThread(core, report_interval_s=1.0)
    thread.add("r", [3, 4, 5], SamplingParams(temperature=0.0, max_tokens=1), age_s=0.25)
    time.sleep(0.2)  # the engine thread is mid-step
    out: list = []
    thread._apply(thread.inbox.get(timeout=1), out)
    assert out == []
    (finished,) = core.observation(core.step(), 0.0).finished  # the manual clock did not move: TTFT = its age
    assert finished.ttft_s >= 0.25 + 0.2
