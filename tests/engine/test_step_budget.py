"""engine/step_budget.py: Sarathi-Serve's token budget per node, on hand-made numbers."""

from __future__ import annotations

import math

import pytest

from engine.step_budget import budget_from_profile, per_token_prefill_s_from_profile, sarathi_step_budget


def test_an_l4_class_node_with_a_100_ms_slo_gets_about_380_tokens():
    # the example: ~3.8k prefill tok/s, a 100 ms TPOT SLO, no decode cost, no headroom: 1 + 380 tokens,
    # rounded down to a multiple of 16
    budget = sarathi_step_budget(1 / 3800, 0.0, 0.1, headroom=1.0, floor_tokens=16)
    assert budget.unclamped_tokens == pytest.approx(381.0)
    assert budget.tokens == 368


def test_the_decode_step_and_the_headroom_come_off_the_slo():
    # 80 ms of the 100 ms SLO, 20 ms of it the decode step: 60 ms of prefill at 100 us/token = 600 more tokens
    budget = sarathi_step_budget(100e-6, 0.020, 0.1)
    assert budget.unclamped_tokens == pytest.approx(601.0)
    assert budget.tokens == 592
    assert (budget.per_token_prefill_s, budget.decode_step_s, budget.tpot_slo_s) == (100e-6, 0.020, 0.1)
    assert "592 tokens" in budget.describe() and "100 ms" in budget.describe()


def test_a_faster_gpu_gets_a_larger_budget_and_the_limits_hold():
    slow = sarathi_step_budget(150e-6, 0.064, 0.1)  # L4-like
    fast = sarathi_step_budget(20e-6, 0.007, 0.1)  # H100-like
    assert slow.tokens == 256  # (80 - 64) / 0.15 = 107 tokens: below the floor
    assert fast.tokens == 3648  # 1 + 73 ms / 20 us = 3651, rounded down to a multiple of 16
    assert sarathi_step_budget(20e-6, 0.007, 0.1, ceiling_tokens=2048).tokens == 2048
    # a node whose decode step alone exceeds the SLO still serves, with the floor
    assert sarathi_step_budget(150e-6, 0.3, 0.1, floor_tokens=128).tokens == 128


@pytest.mark.parametrize(
    ("args", "kwargs", "match"),
    [
        ((0.0, 0.01, 0.1), {}, "per_token_prefill_s"),
        ((math.inf, 0.01, 0.1), {}, "per_token_prefill_s"),
        ((1e-4, -1.0, 0.1), {}, "decode_step_s"),
        ((1e-4, 0.01, 0.0), {}, "tpot_slo_s"),
        ((1e-4, 0.01, 0.1), {"headroom": 1.5}, "headroom"),
        ((1e-4, 0.01, 0.1), {"floor_tokens": 512, "ceiling_tokens": 256}, "floor_tokens"),
    ],
)
def test_bad_figures_are_refused(args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        sarathi_step_budget(*args, **kwargs)


def test_the_per_token_time_is_the_slope_between_the_profiles_two_steps():
    # a 256-token prefill at 2,560 tok/s is a 100 ms step; the decode step is 49 ms: 51 ms over 255 more tokens
    assert per_token_prefill_s_from_profile(2560.0, 49.0, 256) == pytest.approx(0.2e-3)
    # no positive slope (noise: the decode step measured slower than the prefill step): the mean time per token
    assert per_token_prefill_s_from_profile(2560.0, 150.0, 256) == pytest.approx(1 / 2560)
    assert per_token_prefill_s_from_profile(2560.0, 0.0, 256) == pytest.approx(1 / 2560)
    assert per_token_prefill_s_from_profile(2560.0, 10.0, 1) == pytest.approx(1 / 2560)
    with pytest.raises(ValueError, match="prefill_tok_per_s"):
        per_token_prefill_s_from_profile(0.0, 10.0, 256)
    with pytest.raises(ValueError, match="num_prompt_tokens"):
        per_token_prefill_s_from_profile(100.0, 10.0, 0)


def test_budget_from_profile_combines_the_two():
    budget = budget_from_profile(2560.0, 49.0, 256, 0.1, headroom=1.0, floor_tokens=16)
    # 1 + (100 - 49) / 0.2 = 256
    assert budget.unclamped_tokens == pytest.approx(256.0)
    assert budget.tokens == 256
    assert budget.decode_step_s == pytest.approx(0.049)
