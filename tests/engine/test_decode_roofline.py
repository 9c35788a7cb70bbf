"""DecodeRoofline: ideal bytes over bandwidth vs measured decode-step time."""

from __future__ import annotations

import pytest

from engine.batch import ScheduledRequest, SchedulerOutput
from engine.decode_roofline import DecodeRoofline
from engine.sampling_params import SamplingParams

P = SamplingParams(temperature=0.0, max_tokens=4)


def _req(req_id: str, start_pos: int, num_tokens: int = 1) -> ScheduledRequest:
    return ScheduledRequest(
        req_id=req_id,
        token_ids=[7] * num_tokens,
        start_pos=start_pos,
        block_ids=[0, 1, 2, 3],
        sample=True,
        sampling_params=P,
        num_output_tokens=1,
    )


def test_fraction_is_ideal_over_measured_time_of_decode_steps_only():
    r = DecodeRoofline(weight_bytes=1_000_000, kv_bytes_per_token=100, bandwidth_gbps=1.0)  # 1 GB/s
    decode = SchedulerOutput(step_id=0, requests=[_req("a", 9), _req("b", 19)])  # 10 + 20 context tokens
    assert r.step_bytes(decode) == 1_000_000 + 100 * 30
    r.observe(decode, 0.002)  # ideal 1.003 ms of 2 ms
    assert r.fraction == pytest.approx(0.5015)
    prefill = SchedulerOutput(step_id=1, requests=[_req("a", 10), _req("c", 0, num_tokens=8)])
    r.observe(prefill, 1.0)  # a mixed step is not a decode step: ignored
    assert r.fraction == pytest.approx(0.5015)
    assert r.close_window() == pytest.approx(0.5015)
    r.observe(decode, 0.001003)  # a new window: at the roofline
    assert r.fraction == pytest.approx(1.0)
    r.close_window()
    assert r.fraction == pytest.approx(1.0)  # kept across a window without decode steps


def test_bad_figures_are_refused():
    with pytest.raises(ValueError, match="bandwidth_gbps"):
        DecodeRoofline(1, 1, 0.0)
    with pytest.raises(ValueError, match="weight_bytes"):
        DecodeRoofline(0, 1, 1.0)
