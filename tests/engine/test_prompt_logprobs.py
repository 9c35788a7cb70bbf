"""engine/prompt_logprobs.py without a model: which prompt tokens a chunk scores, each position kept once (a chunk
recomputed after a preemption scores it again), handed over once when the whole prompt is scored; a runner that
cannot score refuses."""

from __future__ import annotations

import pytest

from backends.fake import build_trivial_engine
from engine.batch import TokenLogprob
from engine.prompt_logprobs import PromptLogprobs, prompt_targets
from engine.sampling_params import SamplingParams, SamplingParamsError


def _entries(*tokens: int) -> list[TokenLogprob]:
    return [TokenLogprob(t, -float(t), [], 1) for t in tokens]


def test_a_chunk_scores_the_prompt_tokens_its_rows_predict():
    prompt = [10, 11, 12, 13, 14]
    assert prompt_targets(prompt, 0, 3) == [11, 12, 13]  # rows 0..2 predict positions 1..3
    assert prompt_targets(prompt, 3, 5) == [14]  # the last row predicts the first output: no prompt token
    assert prompt_targets(prompt, 4, 5) == [] and prompt_targets(prompt, 5, 6) == []  # a decode row scores nothing


def test_positions_are_kept_once_and_handed_over_once_complete():
    scores = PromptLogprobs([10, 11, 12, 13, 14])
    scores.add(1, _entries(11, 12))
    assert scores.take() is None  # positions 3 and 4 are still to come
    scores.add(1, _entries(99, 98))  # the same chunk recomputed: the first scores stay
    scores.add(3, _entries(13, 14))
    got = scores.take()
    assert [e.token_id for e in got] == [10, 11, 12, 13, 14]
    assert got[0].logprob is None and got[1].logprob == -11.0
    assert scores.take() is None  # once
    one = PromptLogprobs([7])
    assert [e.token_id for e in one.take()] == [7]  # a one-token prompt has only its unscored first position


def test_prompt_logprobs_are_bounded_like_logprobs_and_refused_by_a_runner_that_cannot_score():
    for bad in (-1, 21, 1.5, True):
        with pytest.raises(SamplingParamsError) as refused:
            SamplingParams(prompt_logprobs=bad)
        assert refused.value.field == "prompt_logprobs"
    engine = build_trivial_engine()
    with pytest.raises(ValueError, match=r"^prompt_logprobs: "):
        engine.add_request([5, 6, 7], SamplingParams(max_tokens=2, prompt_logprobs=0))
    assert not engine.has_unfinished_requests()
