"""StepRates: the measured prefill rate and decode step time a node reports."""

from __future__ import annotations

import pytest

from engine.batch import ScheduledRequest, SchedulerOutput
from engine.sampling_params import SamplingParams
from engine.step_rates import StepRates, classify_batch


def test_rates_per_window_and_kept_through_empty_windows():
    rates = StepRates(max_recent_steps=2)
    rates.observe(0.5, num_prefill_tokens=100, num_decode_requests=1)  # a mixed step counts as prefill
    rates.observe(0.5, num_prefill_tokens=300, num_decode_requests=0)
    rates.observe(0.02, num_prefill_tokens=0, num_decode_requests=4)
    rates.observe(0.04, num_prefill_tokens=0, num_decode_requests=4)
    assert rates.close_window() == pytest.approx([20.0, 40.0])  # the latest two
    assert rates.prefill_tok_per_s == pytest.approx(400.0)
    assert rates.decode_step_ms == pytest.approx(30.0)
    assert rates.close_window() == []
    assert (rates.prefill_tok_per_s, rates.decode_step_ms) == pytest.approx((400.0, 30.0))


def test_classify_batch_counts_decode_rows_and_prefill_tokens():
    p = SamplingParams()
    batch = SchedulerOutput(
        step_id=0,
        requests=[
            ScheduledRequest("prompt", [1, 2, 3], 0, [0], True, p),
            ScheduledRequest("last-prompt-token", [4], 16, [0, 1], True, p),  # no output yet: prefill
            ScheduledRequest("decode", [5], 20, [2, 3], True, p, num_output_tokens=3),
        ],
    )
    assert classify_batch(batch) == (4, 1)
