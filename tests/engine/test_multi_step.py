"""Multi-step decode (engine/multi_step.py): a planned run of k pure decode steps leaves the engine exactly as k
plain steps do — tokens, counters, block tables, free lists, prefix cache, step records, finishes."""

from __future__ import annotations

import pytest

from backends.sim.engine import build_sim_engine
from engine.config import CacheConfig, SchedulerConfig
from engine.kv.block_pool import Tier
from engine.sampling_params import SamplingParams

BLOCK = 16


class _Clock:
    """Set, not advanced by differences: the run's end times are sums of step times, as a plain step's are."""

    def __init__(self) -> None:
        self.now_s = 0.0

    def now(self) -> float:
        return self.now_s


def _engine(num_blocks: int = 64, max_num_batched_tokens: int = 512, detokenize: bool = False):
    clock = _Clock()
    engine = build_sim_engine(
        "sim:llama-3-8b",
        "h100-sxm",
        scheduler_config=SchedulerConfig(max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=64),
        cache_config=CacheConfig(block_size=BLOCK, num_device_blocks=num_blocks, num_host_blocks=64),
        realtime=False,
        clock=clock,
        keep_cache_blocks=True,
        detokenize=detokenize,
    )
    return engine, clock


def _plain_step(engine, clock):
    pending = engine.start_step()
    clock.now_s += pending.step_time_s
    return engine.finish_step(pending)


def _state(engine):
    """Everything a step may change, in comparable form."""
    scheduler = engine.scheduler
    kv = scheduler.kv_cache_manager
    device = kv.pool(Tier.DEVICE)
    requests = [scheduler.get_request(r.req_id) for r in scheduler.running_requests()]
    return {
        "requests": [
            (r.req_id, r.status, r.num_computed_tokens, list(r.all_token_ids), r.finish_reason) for r in requests
        ],
        "tables": kv.block_tables(Tier.DEVICE),
        "free": device.free_block_ids(),
        "evictable": device.evictable_block_ids(),
        "cached": sorted((h.hash_value, b) for h, b in device.cached_blocks().items()),
        "stats": engine.make_stats(),
        "steps": (engine.num_steps, engine.busy_time_s, engine.runner.num_steps, engine.runner.busy_time_s),
        "records": engine.take_step_records(),
        "step_id": scheduler._next_step_id,
        "metrics": {req_id: tracked.metrics for req_id, tracked in engine._tracked.items()},
    }


def _outputs(outputs):
    return [
        (o.req_id, o.new_token_ids, o.num_output_tokens, o.finished, o.finish_reason, o.metrics.last_token_time_s)
        for o in outputs
    ]


def _twins(prompts, max_tokens, **engine_kwargs):
    """Two identical engines with these requests, stepped until every request decodes."""
    pair = [_engine(**engine_kwargs) for _ in range(2)]
    for engine, _ in pair:
        for i, (prompt, n) in enumerate(zip(prompts, max_tokens)):
            engine.add_request(prompt, SamplingParams(max_tokens=n, ignore_eos=True), req_id=f"r{i}")
    for engine, clock in pair:
        while engine.scheduler._waiting or any(
            r.num_tokens - r.num_computed_tokens != 1 or not r.output_token_ids
            for r in engine.scheduler.running_requests()
        ):
            _plain_step(engine, clock)
    return pair


def _compare_run(pair, num_steps=None, stop_after_s=float("inf"), finished_only=False):
    (fast, fast_clock), (plain, plain_clock) = pair
    plan = fast.plan_decode_steps(fast_clock.now(), stop_after_s)
    assert plan is not None
    if num_steps is not None:
        plan.truncate(num_steps)
    fast_clock.now_s = plan.end_s
    fast_out = fast.finish_decode_steps(plan, finished_only=finished_only)
    plain_out = []
    for _ in range(plan.num_steps):
        plain_out = _plain_step(plain, plain_clock)
    if finished_only:
        plain_out = [o for o in plain_out if o.finished]
    assert plain_clock.now() == fast_clock.now()
    # the run's outputs carry all its tokens; the plain last step's carry one each
    assert [(o[0], o[2], o[3], o[4], o[5]) for o in _outputs(fast_out)] == [
        (o[0], o[2], o[3], o[4], o[5]) for o in _outputs(plain_out)
    ]
    assert all(len(o.new_token_ids) == plan.num_steps for o in fast_out)
    assert _state(fast) == _state(plain)
    return plan, fast_out


def test_a_run_equals_plain_steps_across_block_boundaries():
    prompts = [[10 + (i * 7 + j) % 500 for j in range(n)] for i, n in enumerate([5, 16, 31, 40, 47])]
    pair = _twins(prompts, [200] * 5)
    plan, _ = _compare_run(pair, num_steps=37)  # several blocks filled and appended per request
    assert plan.num_steps == 37


def test_a_run_ends_at_the_first_finish_and_finishes_like_a_step():
    prompts = [[10 + j for j in range(20 + i)] for i in range(4)]
    pair = _twins(prompts, [30, 12, 50, 12])
    plan, outputs = _compare_run(pair)
    assert plan.num_steps == 11  # 1 token from the prefill step, 11 more reach max_tokens=12
    assert [o.finished for o in outputs] == [False, True, False, True]
    # the next run goes on with the survivors
    _compare_run(pair)


def test_identical_prompts_share_prefix_cache_entries_as_plain_steps_do():
    prompt = [10 + j for j in range(40)]
    pair = _twins([prompt, prompt, prompt[:33]], [60, 60, 60])
    _compare_run(pair, num_steps=30)


def test_the_run_stops_where_the_free_blocks_end_and_never_preempts():
    prompts = [[10 + (i + j) % 300 for j in range(30)] for i in range(6)]
    pair = _twins(prompts, [400] * 6, num_blocks=20)
    plan, _ = _compare_run(pair)
    assert plan.num_steps < 399
    kv = pair[0][0].scheduler.kv_cache_manager
    assert kv.num_free_device_blocks < len(prompts)  # one more step for everyone would not fit
    assert pair[0][0].make_stats().num_preemptions_total == 0


def test_the_run_stops_after_the_step_ending_at_the_horizon():
    prompts = [[10 + j for j in range(25)] for _ in range(3)]
    pair = _twins(prompts, [100] * 3)
    engine, clock = pair[0]
    first = engine.plan_decode_steps(clock.now(), float("inf"), max_steps=5)
    horizon = (first.end_times_s[2] + first.end_times_s[3]) / 2
    # a plan stands for the steps that begin now: take it back by planning afresh on a twin
    pair = _twins(prompts, [100] * 3)
    plan, _ = _compare_run(pair, stop_after_s=horizon)
    assert plan.num_steps == 4
    assert plan.end_times_s[-2] < horizon <= plan.end_s


def test_no_run_while_a_request_waits_or_computes_its_prompt():
    engine, clock = _engine()
    engine.add_request([10 + j for j in range(40)], SamplingParams(max_tokens=8, ignore_eos=True), req_id="a")
    assert engine.plan_decode_steps(clock.now(), float("inf")) is None  # waiting
    _plain_step(engine, clock)
    assert engine.plan_decode_steps(clock.now(), float("inf")) is not None
    engine2, clock2 = _engine(max_num_batched_tokens=16)
    engine2.add_request([10 + j for j in range(40)], SamplingParams(max_tokens=8, ignore_eos=True), req_id="b")
    _plain_step(engine2, clock2)  # a 16-token chunk of 40
    assert engine2.plan_decode_steps(clock2.now(), float("inf")) is None


def test_a_stop_string_needs_plain_steps_when_the_engine_detokenizes():
    engine, clock = _engine(detokenize=True)
    engine.add_request([10 + j for j in range(20)], SamplingParams(max_tokens=8, stop=["x y"]), req_id="a")
    _plain_step(engine, clock)
    assert engine.plan_decode_steps(clock.now(), float("inf")) is None


def test_a_changed_running_set_refuses_the_commit():
    pair = _twins([[10 + j for j in range(20)]] * 2, [50, 50])
    engine, clock = pair[0]
    plan = engine.plan_decode_steps(clock.now(), float("inf"))
    engine.abort(["r0"])
    with pytest.raises(ValueError, match=r"decode run|running set changed"):
        engine.finish_decode_steps(plan)


def test_a_younger_request_ahead_on_the_same_tokens_registers_the_shared_block_first():
    """r1 repeats r0's tokens 6 positions ahead: it fills each block of their common content first, so (as with
    plain steps) its block is the one the prefix cache keeps for that hash, r0's the duplicate."""
    pair = [_engine() for _ in range(2)]
    for engine, clock in pair:
        params = SamplingParams(max_tokens=200, ignore_eos=True)
        engine.add_request([10 + j for j in range(40)], params, req_id="r0")
        for _ in range(6):
            _plain_step(engine, clock)
        r0 = engine.scheduler.get_request("r0")
        engine.add_request(list(r0.all_token_ids) + [engine.runner.decode_token_id] * 6, params, req_id="r1")
        _plain_step(engine, clock)
    _compare_run(pair, num_steps=40)


def test_finished_only_gives_the_finished_outputs_and_keeps_every_metric():
    prompts = [[10 + j for j in range(20 + i)] for i in range(4)]
    pair = _twins(prompts, [30, 12, 50, 12])
    _, outputs = _compare_run(pair, finished_only=True)
    assert [o.req_id for o in outputs] == ["r1", "r3"]
    _compare_run(pair, num_steps=5, finished_only=True)


def test_a_waiting_request_the_blocks_cannot_hold_waits_through_the_run():
    prompts = [[10 + (i + j) % 300 for j in range(30)] for i in range(4)]
    pair = _twins(prompts, [300] * 4, num_blocks=24)
    for engine, _ in pair:  # 16 of 24 blocks free: a 300-token prompt needs 19
        engine.add_request([20 + j % 200 for j in range(300)], SamplingParams(max_tokens=5), req_id="big")
    _compare_run(pair, num_steps=20)
    assert pair[0][0].scheduler.get_request("big").num_computed_tokens == 0
    assert pair[0][0].make_stats().num_waiting == 1


def test_no_run_when_the_waiting_request_fits_now():
    pair = _twins([[10 + j for j in range(30)]], [100])
    engine, clock = pair[0]
    engine.add_request([20 + j for j in range(40)], SamplingParams(max_tokens=5), req_id="small")
    assert engine.plan_decode_steps(clock.now(), float("inf")) is None
