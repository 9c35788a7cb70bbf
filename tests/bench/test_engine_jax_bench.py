"""bench/engine_jax.py's steady decode rate: only steps that decode every request and nothing else count."""

from __future__ import annotations

import math

from bench.engine_jax import steady_decode_tok_per_s
from engine.llm_engine import StepRecord


def _rec(end_s: float, prefill: int, decode: int) -> StepRecord:
    return StepRecord(end_s, 0.0, prefill, decode, prefill + decode)


def test_steady_decode_rate_counts_pure_full_decode_steps_only():
    records = [
        _rec(1.0, 512, 0),  # prefill
        _rec(4.0, 256, 8),  # mixed: not counted
        _rec(4.5, 0, 4),  # pure decode of 4 rows, from 4.0 (the previous step's end): 0.5 s
        _rec(5.0, 0, 4),  # 0.5 s
        _rec(6.0, 0, 2),  # fewer rows (some finished): not counted
    ]
    assert steady_decode_tok_per_s(records, 4) == 2 * 4 / 1.0
    assert math.isnan(steady_decode_tok_per_s(records[:2], 4))
