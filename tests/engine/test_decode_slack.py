"""engine/decode_slack.py: each decoder's slack from its progress, and the node's histogram of the decoders a delay
can push over their TPOT target (by slack in milliseconds)."""

from __future__ import annotations

import math

import pytest

from engine.decode_bins import NO_DECODERS, bin_of
from engine.decode_slack import slack_histogram, slack_s


def test_slack_is_the_target_budget_less_the_time_spent_and_the_steps_left():
    # 100 decode steps at 50 ms: 5 s budget; 1 s in, 30 steps done at 20 ms: 70 left take 1.4 s
    assert slack_s(0.05, 100, 1.0, 70, 0.02) == pytest.approx(2.6)
    assert slack_s(0.05, 100, 4.9, 70, 0.02) < 0  # behind: misses already


def _only_bin(hist: tuple[int, ...]) -> int:
    (b,) = [i for i, c in enumerate(hist) if c]
    return b


def test_a_decoder_is_counted_by_its_slack_in_milliseconds_while_a_delay_can_push_it_over():
    # first token at t=0 with the node at step 10; now t=1 and step 40: 30 done, 70 left; slack 2.6 s
    decoder = (0.0, 10, 100, 0.05)
    hist = slack_histogram([decoder], now_s=1.0, num_steps=40, step_s=0.02, chunk_s=0.1)  # 70 x 0.1 s > 2.6 s
    assert sum(hist) == 1 and _only_bin(hist) == bin_of(2600.0)
    assert slack_histogram([decoder], 1.0, 40, 0.02, chunk_s=0.03) == NO_DECODERS  # 70 x 30 ms = 2.1 s: absorbed
    assert sum(slack_histogram([decoder], 1.0, 40, 0.02, chunk_s=math.inf)) == 1  # no bound on a chunk
    assert slack_histogram([decoder], 4.9, 40, 0.02, 0.1) == NO_DECODERS  # behind: misses whatever comes
    assert slack_histogram([(0.0, 10, 100, 0.0)], 1.0, 40, 0.02, 0.1) == NO_DECODERS  # no target
    assert slack_histogram([decoder], 1.0, 110, 0.02, 0.1) == NO_DECODERS  # all its steps done
    assert slack_histogram([decoder], 1.0, 40, 0.0, 0.1) == NO_DECODERS  # the step is not measured
    assert slack_histogram([decoder], 1.0, 40, math.nan, 0.1) == NO_DECODERS


def test_the_histogram_counts_each_decoder_in_its_own_bin():
    decoders = [(0.0, 0, 100, 0.05), (0.0, 0, 100, 0.05), (0.5, 0, 10, 0.1)]
    # now 1 s at step 20: the first two have 80 left, slack 5 - 1 - 80 x 0.01 = 3.2 s; the third is done
    hist = slack_histogram(decoders, 1.0, 20, 0.01, 1.0)
    assert hist[bin_of(3200.0)] == 2 and sum(hist) == 2
