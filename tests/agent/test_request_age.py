"""A request's age at the agent (agent/request_age.py) and the engine clocks it starts (NodeCore.add(age_s)):
TTFT and E2E count from the gateway's arrival; the prefix cache hit of each request travels in its chunks."""

from __future__ import annotations

import pytest

from agent.node_core import NodeCore
from agent.request_age import request_age_s
from backends.fake import ByteTokenizer, TrivialRunner
from engine.clock import ManualClock
from engine.config import CacheConfig, SchedulerConfig
from engine.llm_engine import LLMEngine
from engine.sampling_params import SamplingParams

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
