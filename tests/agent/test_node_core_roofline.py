"""NodeCore measures decode steps against the bandwidth roofline and says its kernels in the hello."""

from __future__ import annotations

import pytest

from agent.node_core import NodeCore
from backends.fake import ByteTokenizer, TrivialRunner, cpu_test_hardware
from engine.batch import RunnerOutput, SchedulerOutput
from engine.clock import ManualClock
from engine.config import CacheConfig, SchedulerConfig
from engine.llm_engine import LLMEngine
from engine.sampling_params import SamplingParams


class _MeteredRunner(TrivialRunner):
    """Reads 1 MB of weights and 16 B of KV per token (64 B per 4-token block); every step takes 10 ms."""

    weight_bytes = 1_000_000
    kernels = "triton_paged kv=auto graphs=on (cuda SM89)"

    def kv_bytes_per_block(self, block_size: int) -> int:
        return 16 * block_size

    def execute(self, batch: SchedulerOutput) -> RunnerOutput:
        out = super().execute(batch)
        out.step_time_s = 0.01
        return out


def _core(bandwidth_gbps: float) -> NodeCore:
    engine = LLMEngine(
        _MeteredRunner(max_model_len=64),
        ByteTokenizer(),
        SchedulerConfig(max_num_batched_tokens=64, max_num_seqs=8, max_model_len=64),
        CacheConfig(block_size=4, num_device_blocks=64, num_host_blocks=0),
        ManualClock(),
    )
    return NodeCore(engine, "n0", observe=True, memory_bandwidth_gbps=bandwidth_gbps)


def test_load_report_and_observation_carry_the_decode_roofline_fraction():
    core = _core(bandwidth_gbps=1.0)  # 1 GB/s: 1 MB of weights takes 1 ms, a tenth of each 10 ms step
    core.add("r", [5, 6, 7], SamplingParams(temperature=0.0, max_tokens=3))
    core.step()  # the prompt: not a decode step
    assert core.load_report().decode_roofline_fraction == 0.0
    outputs = core.step()  # decode at position 3: 4 context tokens
    obs = core.observation(outputs, 0.01)
    want = (1_000_000 + 16 * 4) / 1e9 / 0.01
    assert obs.decode_roofline_fraction == pytest.approx(want)
    assert core.load_report().decode_roofline_fraction == pytest.approx(want)


def test_without_bandwidth_nothing_is_measured_and_the_hello_says_the_kernels():
    core = _core(bandwidth_gbps=0.0)
    assert core.roofline is None
    core.add("r", [5, 6, 7], SamplingParams(temperature=0.0, max_tokens=3))
    core.step()
    core.step()
    assert core.load_report().decode_roofline_fraction == 0.0
    hello = core.hello(model="m", backend="torch", hardware=cpu_test_hardware(), cell="c")
    assert hello.kernels == "triton_paged kv=auto graphs=on (cuda SM89)"
