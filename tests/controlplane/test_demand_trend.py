"""The capacity plan's forecast (controlplane/demand_trend.py): the growth of a pool's arrivals, lead_s ahead."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controlplane.demand_trend import DemandTrend


def feed(trend: DemandTrend, counts, start_s: float = 0.0, step_s: float = 5.0) -> float:
    """The counter's values every ``step_s``; the growth after the last."""
    for k, n in enumerate(counts):
        trend.observe(start_s + k * step_s, int(n))
    return trend.growth()


def ramp_counts(a: float, b: float, times) -> list[int]:
    """Arrivals so far of a rate a + b·t, rounded."""
    return [round(a * t + b * t * t / 2) for t in times]


def test_a_steady_rate_grows_nothing():
    trend = DemandTrend(window_s=120, lead_s=60)
    assert feed(trend, [50 * 5 * k for k in range(60)]) == 1.0


def test_a_steady_poisson_stream_seldom_reads_as_growth():
    """Its noise: two halves of a steady stream differ by about sqrt(c1 + c2); within twice that counts as none."""
    rng = np.random.default_rng(7)
    trend = DemandTrend(window_s=120, lead_s=60)
    counts = np.cumsum(rng.poisson(20 * 5, 720))  # 20 requests/s for an hour, sampled every 5 s
    growths = [feed(trend, [n], start_s=5 * k) for k, n in enumerate(counts)]
    assert sum(g > 1 for g in growths) <= 0.05 * len(growths)  # a one-sided 2σ test: about 2.3% expected
    assert max(growths) < 1.5


def test_on_a_linear_ramp_the_growth_is_the_rate_lead_s_ahead_over_the_rate_now():
    a, b = 10.0, 0.1  # 10 requests/s, +0.1 each second
    times = [5.0 * k for k in range(100)]
    trend = DemandTrend(window_s=120, lead_s=60)
    now = times[-1]
    assert feed(trend, ramp_counts(a, b, times)) == pytest.approx((a + b * (now + 60)) / (a + b * now), rel=2e-3)


def test_no_lead_no_forecast_and_a_short_history_none_either():
    times = [5.0 * k for k in range(100)]
    assert feed(DemandTrend(window_s=120, lead_s=0), ramp_counts(10, 0.1, times)) == 1.0
    assert feed(DemandTrend(window_s=120, lead_s=60), ramp_counts(10, 0.1, times[:12])) == 1.0  # 55 s < window/2


def test_a_falling_rate_counts_as_no_growth():
    times = [5.0 * k for k in range(100)]
    counts = ramp_counts(30, -0.1, times)  # 30/s falling to 20/s
    assert feed(DemandTrend(window_s=120, lead_s=60), counts) == 1.0


def test_a_counter_that_goes_back_starts_the_samples_again():
    trend = DemandTrend(window_s=120, lead_s=60)
    times = [5.0 * k for k in range(100)]
    assert feed(trend, ramp_counts(10, 0.1, times)) > 1.0
    trend.observe(500.0, 3)  # the control plane restarted: its counters from zero
    assert trend.growth() == 1.0


def test_samples_are_one_per_second_and_kept_for_the_window_only():
    trend = DemandTrend(window_s=120, lead_s=60)
    for k in range(10_000):
        trend.observe(k * 0.01, k)  # 100 calls a second
    assert len(trend._samples) <= 122


@settings(max_examples=200, deadline=None)
@given(
    lead=st.floats(0, 3600),
    window=st.floats(1, 3600),
    steps=st.lists(st.integers(0, 2**62), min_size=1, max_size=60),
    dt=st.floats(0.01, 100),
)
def test_growth_is_finite_at_least_one_and_bounded(lead, window, steps, dt):
    """Whatever counter values arrive (restarts, jumps, bursts), the growth is a finite number in its bound."""
    trend = DemandTrend(window_s=window, lead_s=lead)
    total = 0
    for k, step in enumerate(steps):
        total = step if k % 7 == 6 else total + step  # now and then, a counter that went back
        trend.observe(k * dt, total)
        growth = trend.growth()
        assert math.isfinite(growth) and 1.0 <= growth <= 1 + (4 / 3) * lead / (window / 2) + 1e-9


@pytest.mark.parametrize(("window", "lead"), [(0, 60), (-1, 60), (math.inf, 60), (120, -1), (120, math.nan)])
def test_settings_out_of_range_are_refused(window, lead):
    with pytest.raises(ValueError, match="demand trend"):
        DemandTrend(window_s=window, lead_s=lead)
