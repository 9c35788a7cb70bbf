from __future__ import annotations

import pytest

from backends.sim.cost_model import NodeHardware
from backends.sim.model_shapes import sim_model
from backends.sim.runner import SimModelRunner
from engine.clock import ManualClock
from engine.config import CacheConfig, SchedulerConfig
from engine.model_runner import KVCacheSpec, ModelRunner
from engine.request import FinishReason, Request
from engine.sampling_params import SamplingParams
from engine.scheduler import Scheduler


def _runner(**kwargs) -> SimModelRunner:
    return SimModelRunner(sim_model("llama-3-8b"), NodeHardware("a100-80gb"), **kwargs)


def test_implements_the_model_runner_protocol():
    runner = _runner()
    assert isinstance(runner, ModelRunner)
    assert runner.max_model_len == 8192
    assert runner.kv_bytes_per_block(16) == 16 * 131072
    with pytest.raises(ValueError, match="sim:"):
        SimModelRunner(sim_model("llama-3-8b").__class__(**{**_fields(), "name": "llama"}), NodeHardware("l4"))


def _fields() -> dict:
    config = sim_model("llama-3-8b")
    return {name: getattr(config, name) for name in config.__dataclass_fields__}


def test_samples_a_non_eos_token_for_sampling_rows_and_reports_the_prediction(make_batch, make_scheduled):
    runner = _runner()
    batch = make_batch(
        make_scheduled("a", 100), make_scheduled("b", 1, start_pos=50), make_scheduled("c", 64, sample=False)
    )
    out = runner.execute(batch)
    assert set(out.sampled_token_ids) == {"a", "b"}
    assert out.sampled_token_ids["a"] != [runner.model.eos_token_id]
    assert out.step_time_s == pytest.approx(runner.predict_step_s(batch)) and out.step_time_s > 0
    moved = make_batch(make_scheduled("b", 1, start_pos=50), blocks_to_swap_out=[(1, 2)] * 100)
    assert runner.predict_step_s(moved) > runner.predict_step_s(make_batch(make_scheduled("b", 1, start_pos=50)))


def test_drives_the_real_scheduler_until_max_tokens():
    runner = _runner()
    cache = CacheConfig(block_size=16, num_device_blocks=64, num_host_blocks=16)
    runner.initialize_kv_cache(KVCacheSpec(64, 16, 16))
    clock = ManualClock()
    scheduler = Scheduler(SchedulerConfig(max_num_batched_tokens=64), cache, clock)
    for i in range(3):
        scheduler.add_request(
            Request(f"r{i}", list(range(10, 110)), SamplingParams(max_tokens=5), 0.0, eos_token_id=128001)
        )
    finished = {}
    while scheduler.has_unfinished_requests():
        out = scheduler.schedule()
        result = runner.execute(out)
        clock.advance(result.step_time_s)
        for u in scheduler.update_from_output(out, result):
            if u.finished:
                finished[u.req_id] = u.finish_reason
    assert finished == {f"r{i}": FinishReason.LENGTH for i in range(3)}
    assert clock.now() == pytest.approx(runner.busy_time_s)
