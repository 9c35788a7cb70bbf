"""A pool's wake from zero sized by the capacity it held per arrival a second (controlplane/wake_sizing.py)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controlplane.wake_sizing import MAX_SAMPLE_S, WakeSizing


def spell(wake: WakeSizing, start_s: float, seconds: int, capacity: float, rate: float, sized: bool = True) -> float:
    for t in range(seconds + 1):
        wake.observe(start_s + t, capacity, rate, sized)
    return start_s + seconds


def test_what_is_learnt_is_the_capacity_held_per_arrival_a_second_weighted_by_the_arrivals():
    wake = WakeSizing(memory_s=1e12)  # no fading: the weighting alone
    assert wake.capacity(5.0) == 0.0  # nothing learnt: no size (the plan asks for one node)
    t = spell(wake, 0.0, 60, capacity=10.0, rate=5.0)  # a burst: 10 of capacity for 5 arrivals a second
    t = spell(wake, t + 1, 600, capacity=1.0, rate=0.1)  # then a trickle on one small node, ten times as long
    # Σ C dt / Σ r dt = (600 + 600) / (300 + 60): the burst counts for more than its share of time
    assert wake.held_per_rate == pytest.approx(1200 / 360, rel=1e-3)
    assert wake.capacity(3.0) == pytest.approx(3.0 * 1200 / 360, rel=1e-3)


def test_only_a_pool_its_load_sized_teaches_and_what_it_learnt_fades():
    wake = WakeSizing(memory_s=600.0)
    t = spell(wake, 0.0, 300, capacity=8.0, rate=2.0, sized=False)  # short of nodes on a ramp, or holding spares
    t = spell(wake, t, 300, capacity=0.0, rate=2.0)  # no capacity: nothing to learn either
    assert wake.held_per_rate == 0.0
    t = spell(wake, t, 300, capacity=4.0, rate=2.0)  # sized by its load: 2 per arrival a second
    assert wake.held_per_rate == pytest.approx(2.0)
    spell(wake, t, 3000, capacity=1.0, rate=1.0)  # five memories later, 1 per arrival a second
    assert wake.held_per_rate == pytest.approx(1.0, rel=0.01)


def test_a_gap_between_plans_weighs_at_most_max_sample_s():
    wake = WakeSizing(memory_s=1e12)
    wake.observe(0.0, 4.0, 1.0, True)
    wake.observe(10_000.0, 4.0, 1.0, True)  # a loop stalled (or a simulator paused) for hours
    wake.observe(10_001.0, 100.0, 100.0, True)
    # weights: MAX_SAMPLE_S of the first figures, 1 s of the second
    assert wake.held_per_rate == pytest.approx((4 * MAX_SAMPLE_S + 100) / (MAX_SAMPLE_S + 100))
    wake.observe(5.0, 4.0, 1.0, True)  # time going back: no weight, no error
    assert wake.held_per_rate == pytest.approx((4 * MAX_SAMPLE_S + 100) / (MAX_SAMPLE_S + 100))


finite = st.floats(allow_nan=True, allow_infinity=True)


@given(st.lists(st.tuples(finite, finite, finite, st.booleans()), max_size=30), finite)
def test_any_figures_give_a_finite_wake_and_never_an_error(samples, recent):
    wake = WakeSizing()
    for now_s, capacity, rate, sized in samples:
        wake.observe(now_s, capacity, rate, sized)
    woken = wake.capacity(recent)
    assert math.isfinite(woken) and woken >= 0


def test_a_broken_clock_reading_poisons_nothing():
    wake = WakeSizing()
    wake.observe(math.nan, 4.0, 2.0, True)
    wake.observe(math.inf, 4.0, 2.0, True)
    spell(wake, 0.0, 20, capacity=4.0, rate=2.0)
    assert wake.held_per_rate == pytest.approx(2.0)


@pytest.mark.parametrize("memory_s", [0.0, -1.0, math.inf, math.nan])
def test_a_memory_that_is_not_positive_and_finite_is_refused(memory_s):
    with pytest.raises(ValueError, match="memory_s"):
        WakeSizing(memory_s)
