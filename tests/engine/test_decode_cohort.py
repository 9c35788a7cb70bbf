"""engine/decode_cohort.py on its own: a row's events fall where its state says, and its fields catch up only when
read (the twin-engine tests in test_multi_step.py / test_mixed_step.py check whole steps against plain ones)."""

from __future__ import annotations

import random

from engine.decode_cohort import DecodeCohort
from engine.request import Request
from engine.sampling_params import SamplingParams
from tests.engine.test_mixed_step import _add, _pair, _prompt, _step

BLOCK = 16


def _request(i: int, num_output: int) -> Request:
    request = Request(f"r{i}", [10] * 5, SamplingParams(max_tokens=500), 0.0)
    request.append_output_token_ids([7] * num_output)
    return request


def test_blocks_needed_counts_every_opening_of_every_row_in_the_window():
    rng = random.Random(4)
    for _ in range(50):
        step = rng.randrange(0, 100)
        cohort = DecodeCohort(token_id=7, block_size=BLOCK, step=step, last_end_s=0.0)
        starts = []
        for i in range(rng.randrange(1, 12)):
            start = rng.randrange(1, 200)
            table_len = -(-start // BLOCK) if start % BLOCK or rng.random() < 0.5 else start // BLOCK
            cohort.join(_request(i, 3), start, table_len, left=400, lagging=False)
            starts.append((start, table_len))
        for k in (1, 2, 7, 15, 16, 17, 33, 100):
            brute = 0
            for (
                start,
                table_len,
            ) in starts:  # before step j the row writes position start + j: a new block past its table
                covered = table_len * BLOCK
                brute += sum(1 for j in range(k) if start + j >= covered and (start + j) % BLOCK == 0)
            assert cohort.blocks_needed(k) == brute


def test_a_row_held_over_steps_catches_up_when_read_and_not_before():
    pair = _pair()
    for i, n in enumerate([20, 33, 9]):
        _add(pair, f"r{i}", _prompt(i, n))
    (fast, _), (plain, _) = pair
    while fast.scheduler._cohort is None or len(fast.scheduler._cohort) < 3:
        _step(pair)
    cohort = fast.scheduler._cohort
    row = cohort.rows_by_id["r1"]
    request, metrics = row.request, row.request.metrics
    held_tokens, held_count = request.num_output_tokens, metrics.num_output_tokens
    for _ in range(5):  # mixed steps on the held rows, with a newcomer's prompt riding along
        _add(pair, f"n{_}", _prompt(9 + _, 40))
        fast_pending, plain_pending = fast.start_step(), plain.start_step()
        assert fast_pending.decode is not None
        fast.finish_step(fast_pending), plain.finish_step(plain_pending)
    # not read yet: still as when it was last read (no per-step work for a row without an event)
    assert request.num_output_tokens - held_tokens < 5 and metrics.num_output_tokens == held_count
    same = plain.scheduler.get_request("r1")
    assert fast.scheduler.get_request("r1") is request  # read: now up to date
    assert request.num_output_tokens == same.num_output_tokens and request.all_token_ids == same.all_token_ids
    assert request.num_computed_tokens == same.num_computed_tokens
    assert metrics.num_output_tokens == same.metrics.num_output_tokens
