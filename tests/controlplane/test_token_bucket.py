"""The token bucket (controlplane/token_bucket.py) on a virtual clock."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controlplane.token_bucket import TokenBucket


def test_a_full_bucket_then_exactly_the_wait_it_names():
    bucket = TokenBucket.per_minute(60)  # 1 a second, 60 at once
    assert all(bucket.take(1, 0.0) == 0.0 for _ in range(60))
    wait = bucket.take(1, 0.0)
    assert wait == pytest.approx(1.0)
    assert bucket.take(1, 0.5) == pytest.approx(0.5)  # nothing was taken by the refusal
    assert bucket.take(1, 1.0) == 0.0


def test_a_charge_is_a_debt_paid_by_waiting():
    bucket = TokenBucket(100, 10.0)
    bucket.charge(250, 0.0)  # 150 in debt
    assert bucket.wait_s(1, 0.0) == pytest.approx(15.1)
    assert bucket.take(1, 15.1) == 0.0


def test_more_than_the_capacity_waits_for_a_full_bucket_not_forever():
    bucket = TokenBucket(10, 1.0)
    bucket.take(10, 0.0)
    assert bucket.wait_s(1000, 0.0) == pytest.approx(10.0)


@pytest.mark.parametrize(("capacity", "rate"), [(0, 1), (1, 0), (float("inf"), 1), (1, -1)])
def test_bad_settings_are_refused(capacity, rate):
    with pytest.raises(ValueError):
        TokenBucket(capacity, rate)


@given(
    st.floats(1, 100),
    st.floats(0.1, 50),
    st.lists(st.tuples(st.floats(0, 5), st.floats(0.01, 1)), max_size=60),
)
def test_never_more_than_the_burst_plus_the_refill(capacity, rate, steps):
    """Whatever the pattern of requests (each at most the capacity), what was taken never exceeds the
    capacity plus the refill over the elapsed time, and the named wait is enough."""
    bucket = TokenBucket(capacity, rate)
    now, taken = 0.0, 0.0
    for dt, share in steps:
        now += dt
        amount = share * capacity
        wait = bucket.take(amount, now)
        if wait == 0.0:
            taken += amount
        else:
            assert bucket.take(amount, now + wait + 1e-9) == 0.0
            now += wait + 1e-9
            taken += amount
        assert taken <= capacity + rate * now + 1e-6
