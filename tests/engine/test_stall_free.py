"""Stall-free batching (engine/stall_free.py) and its step-time fit (engine/step_time_fit.py): the fit on known
linear data, the cap on hand-made scheduler states, and an engine on a fake runner whose step time is a known
linear function of the step's shape (a manual clock: no wall time anywhere)."""

from __future__ import annotations

import math

import pytest

from engine.batch import RunnerOutput, SchedulerOutput
from engine.clock import ManualClock
from engine.config import CacheConfig, SchedulerConfig
from engine.llm_engine import LLMEngine
from engine.model_runner import KVCacheSpec
from engine.sampling_params import SamplingParams
from engine.scheduler import Scheduler
from engine.stall_free import MIN_PREFILL_TOKENS, StallFreeBudget
from engine.step_rates import classify_batch
from engine.step_time_fit import StepTimeFit

A, B, C = 0.030, 0.004, 0.001  # the fake node: 30 ms a step, 4 ms a decode row, 1 ms a prefill token


def _true_time(num_decode: int, num_prefill: int) -> float:
    return A + B * num_decode + C * num_prefill


def _calibrated_fit() -> StepTimeFit:
    fit = StepTimeFit()
    for d, p in [(0, 128), (0, 300), (1, 0), (8, 0), (3, 50), (16, 0), (5, 200)]:
        fit.observe(p, d, _true_time(d, p))
    return fit


# -- the fit ------------------------------------------------------------------------------------------------


def test_fit_recovers_a_linear_step_time():
    a, b, c = _calibrated_fit().coefficients
    assert a == pytest.approx(A, rel=1e-6) and b == pytest.approx(B, rel=1e-5) and c == pytest.approx(C, rel=1e-6)


def test_fit_is_not_calibrated_before_both_kinds_of_steps():
    fit = StepTimeFit()
    with pytest.raises(ValueError, match="no step-time fit"):
        fit.predict(1, 0)
    for p in (64, 128, 256):
        fit.observe(p, 0, _true_time(0, p))
    assert not fit.calibrated  # prefill steps only
    fit.observe(0, 1, _true_time(1, 0))
    assert not fit.calibrated  # one decode step
    fit.observe(0, 1, _true_time(1, 0))
    assert fit.calibrated


def test_fit_ignores_empty_steps_and_unusable_times():
    fit = _calibrated_fit()
    before = fit.coefficients
    for p, d, t in [(0, 0, 0.5), (10, 1, 0.0), (10, 1, -1.0), (10, 1, math.nan), (10, 1, math.inf)]:
        fit.observe(p, d, t)
    assert fit.coefficients == before
    with pytest.raises(ValueError, match="negative"):
        fit.observe(-1, 0, 0.1)
    with pytest.raises(ValueError, match="half_life"):
        StepTimeFit(half_life_steps=0)


def test_a_start_up_profile_alone_reads_zero_cost_per_decode_row():
    """One prefill and batch-1 decodes cannot separate a from b: the ridge term picks b ~ 0, so decode-only steps
    of larger batches are under-estimated (smaller caps: the safe side)."""
    fit = StepTimeFit()
    for _ in range(2):
        fit.observe(256, 0, _true_time(0, 256))
    for _ in range(8):
        fit.observe(0, 1, _true_time(1, 0))
    a, b, c = fit.coefficients
    assert fit.calibrated
    assert a == pytest.approx(A + B, rel=1e-3) and abs(b) < 1e-3 * B and c == pytest.approx((A + 256 * C - a) / 256)


def test_forgetting_follows_a_node_that_slows_down():
    fit = _calibrated_fit()
    for _ in range(40):  # the node is now twice as slow
        for d, p in [(0, 200), (4, 0), (12, 0), (6, 100)]:
            fit.observe(p, d, 2 * _true_time(d, p))
    slow_fit = StepTimeFit(half_life_steps=8)
    for d, p in [(0, 128), (0, 300), (1, 0), (8, 0), (3, 50), (16, 0), (5, 200)]:
        slow_fit.observe(p, d, _true_time(d, p))
    for _ in range(40):
        for d, p in [(0, 200), (4, 0), (12, 0), (6, 100)]:
            slow_fit.observe(p, d, 2 * _true_time(d, p))
    target = 2 * _true_time(4, 0)
    assert slow_fit.predict(4, 0) == pytest.approx(target, rel=1e-3)
    assert abs(fit.predict(4, 0) - target) > 10 * abs(slow_fit.predict(4, 0) - target)  # a long memory lags


# -- the cap ------------------------------------------------------------------------------------------------


def test_cap_keeps_a_step_within_k_times_its_decode_only_time():
    budget = StallFreeBudget(2.0, _calibrated_fit())
    assert budget.prefill_cap(0) is None  # nobody decodes: nobody is stalled
    for d in (1, 4, 32):
        cap = budget.prefill_cap(d)  # (k - 1) * t(d, 0) / c, floored (the fit is exact to ~1e-9)
        assert abs(cap - _true_time(d, 0) / C) <= 1
        assert _true_time(d, cap) <= 2 * _true_time(d, 0) * (1 + 1e-9)
    assert abs(StallFreeBudget(3.0, _calibrated_fit()).prefill_cap(4) - 2 * _true_time(4, 0) / C) <= 1


def test_cap_is_off_until_calibrated_and_has_a_floor():
    assert StallFreeBudget(2.0).prefill_cap(4) is None
    fit = StepTimeFit()
    for d, p in [(0, 100), (0, 200), (1, 0), (2, 0)]:
        fit.observe(p, d, 0.001 * p + 1e-4 * d + 1e-5)  # decode rows almost free: the raw cap is a few tokens
    assert StallFreeBudget(1.5, fit).prefill_cap(1) == MIN_PREFILL_TOKENS
    with pytest.raises(ValueError, match="stall_factor"):
        StallFreeBudget(1.0)
    for bad in (1.0, 0.5, math.nan):
        with pytest.raises(ValueError, match="stall_factor"):
            SchedulerConfig(stall_factor=bad)


# -- the scheduler on hand-made states -----------------------------------------------------------------------


def _scheduler(stall_factor: float | None, budget: int = 512, chunked: bool = True) -> Scheduler:
    return Scheduler(
        SchedulerConfig(
            max_num_batched_tokens=budget,
            max_num_seqs=64,
            max_model_len=budget if not chunked else 4096,
            enable_chunked_prefill=chunked,
            stall_factor=stall_factor,
        ),
        CacheConfig(block_size=16, num_device_blocks=512, num_host_blocks=0),
        ManualClock(),
    )


def _decoding_state(scheduler: Scheduler, make_request, constant_runner_cls, num_decoding: int, prompt: int):
    """``num_decoding`` requests past their prefill, then a waiting ``prompt``-token request; the next step's
    output (not applied)."""
    runner = constant_runner_cls()
    for i in range(num_decoding):
        scheduler.add_request(make_request(f"d{i}", prompt=20, max_tokens=50))
    out = scheduler.schedule()  # the 20-token prompts, no decode rows yet: no cap
    scheduler.update_from_output(out, runner.execute(out))
    scheduler.add_request(make_request("long", prompt=prompt, max_tokens=4))
    return scheduler.schedule()


@pytest.mark.parametrize("num_decoding", [1, 4, 16])
def test_scheduler_caps_the_prefill_chunk_next_to_decode_rows(make_request, constant_runner_cls, num_decoding):
    scheduler = _scheduler(2.0)
    scheduler.stall_free.fit = _calibrated_fit()
    out = _decoding_state(scheduler, make_request, constant_runner_cls, num_decoding, prompt=1000)
    num_prefill, num_decode = classify_batch(out)
    assert num_decode == num_decoding
    assert abs(num_prefill - _true_time(num_decoding, 0) / C) <= 1  # ~34, 46, 94 tokens
    assert [r.req_id for r in out.requests][-1] == "long"


def test_scheduler_without_stall_factor_fills_the_budget(make_request, constant_runner_cls):
    scheduler = _scheduler(None)
    assert scheduler.stall_free is None
    out = _decoding_state(scheduler, make_request, constant_runner_cls, 4, prompt=1000)
    assert classify_batch(out) == (508, 4)


def test_scheduler_leaves_steps_without_decode_rows_and_without_chunking_alone(make_request, constant_runner_cls):
    scheduler = _scheduler(2.0)
    scheduler.stall_free.fit = _calibrated_fit()
    scheduler.add_request(make_request("long", prompt=1000, max_tokens=4))
    assert classify_batch(scheduler.schedule()) == (512, 0)
    assert _scheduler(2.0, budget=1024, chunked=False).stall_free is None  # a cap could hold a prompt back


def test_capped_chunks_give_the_same_greedy_tokens(make_request, kv_runner_cls, run):
    """The paged-KV fake runner makes every token depend on the KV read back through the block tables: different
    chunk boundaries must not change a single token."""
    results = []
    for factor in (None, 2.0):
        scheduler = _scheduler(factor, budget=64)
        if factor is not None:
            scheduler.stall_free.fit = _calibrated_fit()
        for i, (p, o) in enumerate([(10, 30), (150, 8), (7, 25), (90, 12), (200, 5)]):
            scheduler.add_request(make_request(f"r{i}", prompt=p, max_tokens=o))
        results.append(run(scheduler, kv_runner_cls.for_scheduler(scheduler)).outputs)
    assert results[0] == results[1]


# -- an engine on a runner with a known step time ------------------------------------------------------------


class LinearTimeRunner:
    """Samples token 7; each step takes ``_true_time`` of its shape on the manual clock."""

    max_model_len = 8192

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.steps: list[tuple[int, int, float]] = []  # (decode rows, prefill tokens, time)
        self.finished_req_ids: list[str] = []

    def kv_bytes_per_block(self, block_size: int) -> int:
        return block_size

    def initialize_kv_cache(self, spec: KVCacheSpec) -> None:
        pass

    def execute(self, batch: SchedulerOutput) -> RunnerOutput:
        num_prefill, num_decode = classify_batch(batch)
        t = _true_time(num_decode, num_prefill)
        self.clock.advance(t)
        self.steps.append((num_decode, num_prefill, t))
        return RunnerOutput({r.req_id: [7] for r in batch.requests if r.sample}, step_time_s=t)


class _Tokenizer:
    eos_token_id = None
    vocab_size = 256

    def encode(self, text, add_special_tokens=False):
        return list(text.encode())

    def decode(self, ids, skip_special_tokens=True):
        return ""


LENGTHS = [(147, 14), (23, 20), (123, 50), (48, 10), (26, 20), (127, 50), (12, 15), (47, 8), (166, 8), (230, 16)]


def _serve(stall_factor: float | None) -> tuple[LinearTimeRunner, list[float]]:
    clock = ManualClock()
    runner = LinearTimeRunner(clock)
    engine = LLMEngine(
        runner,
        _Tokenizer(),
        SchedulerConfig(max_num_batched_tokens=256, max_num_seqs=64, stall_factor=stall_factor),
        CacheConfig(block_size=16, num_device_blocks=512, num_host_blocks=0),
        clock=clock,
        detokenize=False,
    )
    warm = SamplingParams(max_tokens=4, ignore_eos=True)
    engine.generate([[5] * 200, [6] * 30], warm)  # the node's first steps calibrate the fit
    runner.steps.clear()
    ids = [
        engine.add_request([10 + i] * p, SamplingParams(max_tokens=o, ignore_eos=True))
        for i, (p, o) in enumerate(LENGTHS * 2)
    ]
    final = engine.run_until_done()
    assert [final[r].num_output_tokens for r in ids] == [o for _, o in LENGTHS * 2]
    return runner, sorted(final[r].metrics.tpot_s for r in ids)


def test_engine_keeps_every_step_within_k_times_its_decode_only_step():
    runner, tpot = _serve(2.0)
    for num_decode, num_prefill, t in runner.steps:
        if num_decode:
            assert t <= 2 * _true_time(num_decode, 0) + 1e-9, (num_decode, num_prefill)
    plain_runner, plain_tpot = _serve(None)
    assert any(d and t > 2.5 * _true_time(d, 0) for d, _, t in plain_runner.steps)  # the stalls it removes
    assert tpot[-1] / tpot[len(tpot) // 2] < plain_tpot[-1] / plain_tpot[len(plain_tpot) // 2]
