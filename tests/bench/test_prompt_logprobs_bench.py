"""``zoo bench prompt-logprobs`` (bench/prompt_logprobs.py) at its smallest: every scored request came back with its
prompt's scores (checked inside the bench), and each ratio is to the unscored requests of the same run."""

from __future__ import annotations

import pytest

from bench.prompt_logprobs import bench_prompt_logprobs, make_engine

pytestmark = pytest.mark.slow


def test_the_ratios_are_to_the_same_run(smollm2_model, smollm2_checkpoint):
    report = bench_prompt_logprobs((24,), rounds=1, engine=make_engine(smollm2_model, smollm2_checkpoint))
    (single,) = report["single"]
    assert single["prompt_tokens"] == 24 and single["ms_plain"] > 0
    assert single["x_plain_5"] == pytest.approx(single["ms_prompt_logprobs_5"] / single["ms_plain"], rel=0.01)
    batch = report["batch"]
    assert batch["x_plain"] == pytest.approx(batch["rps_plain"] / batch["rps_prompt_logprobs_1"], rel=0.01)
