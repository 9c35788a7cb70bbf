"""TrivialRunner: a ModelRunner that computes nothing, and the engine and hardware of a fake agent.

Control-plane tests and benchmarks (``zoo agent --fake-runner``, bench/controlplane_hop.py) use it to
measure everything but the model: every request that samples gets the same token, after an optional
fixed step time spent in the engine thread.
"""

from __future__ import annotations

import math
import time

from backends.fake.byte_tokenizer import ByteTokenizer
from backends.sleep_levels import SleepVerbs
from engine.batch import RunnerOutput, SchedulerOutput, TokenLogprob
from engine.config import CacheConfig, SchedulerConfig
from engine.llm_engine import LLMEngine
from engine.model_runner import KVCacheSpec
from transport.messages import HardwareInfo


class TrivialRunner(SleepVerbs):
    """Samples ``token_id`` ("z" by default) for every request that samples, optionally after a fixed step
    time (its stand-in for compute, spent in the engine thread). Never samples EOS: requests run to
    ``max_tokens``. Asked for logprobs, reports those of its point-mass distribution.

    ``sleep`` / ``wake_up`` (backends/sleep_levels.py) validate and track levels and tags as the real runners do,
    so control-plane tests can drive them; holding no tensors, a sleep frees 0 bytes."""

    def __init__(self, token_id: int = ord("z") + 3, step_s: float = 0.0, max_model_len: int = 4096) -> None:
        self.token_id = token_id
        self.step_s = step_s
        self._max_model_len = max_model_len

    @property
    def max_model_len(self) -> int:
        return self._max_model_len

    def kv_bytes_per_block(self, block_size: int) -> int:
        return 64 * block_size

    def initialize_kv_cache(self, spec: KVCacheSpec) -> None:
        pass

    def execute(self, batch: SchedulerOutput) -> RunnerOutput:
        start = time.perf_counter()
        self._check_awake()
        if self.step_s > 0:
            time.sleep(self.step_s)
        sampled = {r.req_id: [self.token_id] for r in batch.requests if r.sample}
        logprobs = {
            r.req_id: [self._logprob(r.sampling_params.logprobs)]
            for r in batch.requests
            if r.sample and r.sampling_params.logprobs is not None
        }
        return RunnerOutput(sampled_token_ids=sampled, logprobs=logprobs, step_time_s=time.perf_counter() - start)

    def _sleep_kv(self) -> int:
        return 0

    def _sleep_weights(self, level: int) -> int:
        return 0

    def _wake_weights(self) -> None:
        pass

    def _wake_kv(self) -> None:
        pass

    def _logprob(self, num_top: int) -> TokenLogprob:
        """Its distribution is all on ``token_id`` (logprob 0); the other top entries are the next ids, at -inf."""
        top = [(self.token_id, 0.0)] + [(self.token_id + 1 + i, -math.inf) for i in range(num_top - 1)]
        return TokenLogprob(token_id=self.token_id, logprob=0.0, top=top[:num_top])


def build_trivial_engine(step_s: float = 0.0, num_device_blocks: int = 4096, max_num_seqs: int = 256) -> LLMEngine:
    runner = TrivialRunner(step_s=step_s)
    return LLMEngine(
        runner,
        ByteTokenizer(),
        SchedulerConfig(max_num_batched_tokens=8192, max_num_seqs=max_num_seqs, max_model_len=runner.max_model_len),
        CacheConfig(block_size=16, num_device_blocks=num_device_blocks, num_host_blocks=0),
    )


def cpu_test_hardware(gpu_type: str = "cpu") -> HardwareInfo:
    """A fixed HardwareInfo for fake agents (no measurement)."""
    return HardwareInfo(
        device_name="fake cpu",
        gpu_type=gpu_type,
        compute_capability=None,
        memory_gib=8.0,
        memory_bandwidth_gbps=20.0,
        peak_tflops=0.5,
        source="fake",
    )
