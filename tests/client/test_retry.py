"""client/retry.py: which refusals the ZeroMQ client sends again, and how long it waits (the openai SDK's rule)."""

from __future__ import annotations

import math
import random

import pytest

from client.retry import MAX_RETRY_DELAY_S, retried, retry_delay_s
from transport.messages import ErrorCode


def test_only_a_not_now_refusal_is_sent_again():
    assert {code for code in ErrorCode if retried(code)} == {ErrorCode.OVERLOADED, ErrorCode.NO_NODE}


@pytest.mark.parametrize("retry_after_s", [0.01, 5.0, 120.0])
def test_a_refusals_own_retry_after_is_waited(retry_after_s):
    assert retry_delay_s(3, retry_after_s) == retry_after_s


@pytest.mark.parametrize("retry_after_s", [None, 0.0, -1.0, 121.0, math.inf, math.nan])
def test_else_the_back_off_doubles_to_its_cap_less_up_to_a_quarter(retry_after_s):
    rng = random.Random(0)
    for num_retries, full_s in [(0, 0.5), (1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (9, MAX_RETRY_DELAY_S)]:
        for _ in range(20):
            assert 0.75 * full_s <= retry_delay_s(num_retries, retry_after_s, rng) <= full_s
