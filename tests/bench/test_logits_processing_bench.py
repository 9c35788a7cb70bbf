"""``zoo bench logits`` (bench/logits_processing.py) on the smallest batch: every case runs on both samplers, the
ratios are to the plain step of the same run, and the penalised case's plan holds the table it should."""

from __future__ import annotations

import numpy as np

from backends.logits_adjust import LogitsAdjuster
from bench.logits_processing import CASES, OUTPUT_TOKENS, PROMPT_TOKENS, VOCAB, _batch, _slots, bench_logits_processing


def test_every_case_runs_beside_the_plain_step():
    report = bench_logits_processing(batch_sizes=(1,), repeats=2)
    cases = {r["case"]: r for r in report["cases"]}
    assert set(cases) == set(CASES)
    assert cases["plain"]["torch_over_plain"] == cases["plain"]["jax_over_plain"] == 1.0
    assert all(r["torch_us"] > 0 and r["jax_us"] > 0 for r in cases.values())


def test_the_penalised_rows_plan_covers_the_prompt_and_the_output():
    (request,) = _batch(1, CASES["penalties"], np.random.default_rng(0))
    plan = LogitsAdjuster().plan(_slots([request]), VOCAB)
    distinct = len(set(request.all_token_ids))
    assert len(plan) == distinct and distinct <= PROMPT_TOKENS + OUTPUT_TOKENS  # repetition reads the prompt too
