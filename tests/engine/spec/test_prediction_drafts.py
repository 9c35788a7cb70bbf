"""engine/spec/prediction_drafts.py: drafts follow the output through its prediction, re-find their place after the
output departs from it (an edit), draft nothing while lost, and forget dropped requests; and on any output and
prediction, a draft is always a run of the prediction's own tokens (hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.spec.prediction_drafts import PredictionDrafts

PREDICTION = list(range(100, 130))  # 30 distinct tokens


def test_an_output_that_repeats_its_prediction_is_drafted_ahead():
    drafts = PredictionDrafts()
    assert drafts.drafts("r", PREDICTION, [100], 4) == [101, 102, 103, 104]
    assert drafts.drafts("r", PREDICTION, [100, 101, 102], 4) == [103, 104, 105, 106]  # two drafts accepted
    assert drafts.drafts("r", PREDICTION, PREDICTION[:28], 4) == [128, 129]  # the prediction's end
    assert drafts.drafts("r", PREDICTION, PREDICTION, 4) == []


def test_an_edit_costs_a_few_steps_then_the_rest_is_drafted_again():
    drafts = PredictionDrafts(min_n=2, max_n=4)
    output = PREDICTION[:10]
    assert drafts.drafts("r", PREDICTION, output, 3) == [110, 111, 112]
    output += [7]  # the model writes something else here (an edit)
    assert drafts.drafts("r", PREDICTION, output, 3) == []  # lost: the suffix [109, 7] is not in the prediction
    output += [8]
    assert drafts.drafts("r", PREDICTION, output, 3) == []
    output += [112, 113]  # back on the prediction, two tokens later: found again
    assert drafts.drafts("r", PREDICTION, output, 3) == [114, 115, 116]
    output += [114, 115]
    assert drafts.drafts("r", PREDICTION, output, 3) == [116, 117, 118]  # and followed from there


def test_a_repeated_ngram_resyncs_at_the_occurrence_nearest_the_cursor():
    prediction = [1, 2, 3, 9, 9, 1, 2, 3, 8, 8, 1, 2, 3, 7]
    drafts = PredictionDrafts(min_n=2, max_n=3)
    output = prediction[:6]  # [1 2 3 9 9 1]
    assert drafts.drafts("r", prediction, output, 2) == [2, 3]
    output += [5, 1, 2, 3]  # departs, then writes "1 2 3": its occurrences end at 3, 8 and 13; the cursor was 6
    assert drafts.drafts("r", prediction, output, 2) == [8, 8]


def test_the_occurrence_whose_match_runs_furthest_back_wins_and_the_index_waits_for_a_departure():
    prediction = [5, 1, 2, 9, 9, 9, 6, 1, 2, 7, 7]  # "1 2" ends at 3 and at 9; "6 1 2" only at 9
    drafts = PredictionDrafts(min_n=2, max_n=4)
    assert drafts.drafts("r", prediction, [5, 1], 2) == [2, 9]
    assert drafts._tracks["r"].ends is None  # on its prediction: nothing indexed
    assert drafts.drafts("r", prediction, [5, 1, 6, 1, 2], 2) == [7, 7]  # departed; "6 1 2" matches at 9 only
    assert drafts._tracks["r"].ends is not None


def test_requests_are_apart_and_dropped_ones_forgotten():
    drafts = PredictionDrafts()
    assert drafts.drafts("a", PREDICTION, [100], 2) == [101, 102]
    assert drafts.drafts("b", [5, 6, 7], [5], 2) == [6, 7]
    assert len(drafts) == 2
    drafts.drop(["a", "nope"])
    assert len(drafts) == 1
    assert drafts.drafts("a", [1, 2, 3], [1], 2) == [2, 3]  # a new track for a new prediction
    with pytest.raises(ValueError):
        PredictionDrafts(min_n=3, max_n=2)


@settings(max_examples=200, deadline=None)
@given(
    prediction=st.lists(st.integers(0, 5), min_size=1, max_size=40),
    outputs=st.lists(st.lists(st.integers(0, 5), min_size=1, max_size=4), min_size=1, max_size=12),
    k=st.integers(1, 6),
)
def test_a_draft_is_always_a_run_of_the_prediction(prediction, outputs, k):
    drafts = PredictionDrafts(min_n=1, max_n=4)
    output: list[int] = []
    for more in outputs:
        output += more
        draft = drafts.drafts("r", prediction, output, k)
        assert len(draft) <= k
        if draft:
            assert any(prediction[i : i + len(draft)] == draft for i in range(len(prediction)))


class _NoDrafts:
    """A proposer that never drafts: what a request without a prediction gets here."""

    name = "none"

    def propose(self, requests):
        return {}

    def drop(self, req_ids):
        pass


def _drive(scheduler, runner, speculator=None):
    """Steps to completion as LLMEngine does (drafts, schedule, execute, update, observe, drop): the outputs, and
    the steps each request took to finish."""
    outputs: dict[str, list[int]] = {}
    finished_at: dict[str, int] = {}
    steps = 0
    while scheduler.has_unfinished_requests():
        assert steps < 1000
        if speculator is not None:
            speculator.propose(scheduler.running_requests())
        batch = scheduler.schedule()
        out = runner.execute(batch)
        updates = scheduler.update_from_output(batch, out)
        steps += 1
        for update in updates:
            outputs.setdefault(update.req_id, []).extend(update.new_token_ids)
            if update.finished:
                finished_at[update.req_id] = steps
        if speculator is not None:
            speculator.observe(batch, out)
            speculator.drop([u.req_id for u in updates if u.finished] + batch.finished_req_ids)
    return outputs, finished_at


def test_a_request_drafts_from_its_prediction_and_its_output_is_unchanged(make_scheduler, make_request, kv_runner_cls):
    from engine.spec import SpecDecodeConfig, Speculator

    def run(prediction=None, speculate=True):
        scheduler = make_scheduler(block_size=4, max_num_batched_tokens=64)
        runner = kv_runner_cls.for_scheduler(scheduler)
        extra = {"prediction_token_ids": tuple(prediction)} if prediction is not None else {}
        scheduler.add_request(make_request("p", 6, max_tokens=25, **extra))
        scheduler.add_request(make_request("q", 5, max_tokens=25))  # beside it, one without a prediction
        config = SpecDecodeConfig(num_spec_tokens=4, adaptive=False)
        speculator = Speculator(_NoDrafts(), config) if speculate else None
        outputs, finished_at = _drive(scheduler, runner, speculator)
        assert finished_at["q"] == 25  # one token a step: it has no prediction (and this proposer drafts nothing)
        return outputs, finished_at["p"], speculator

    plain, plain_steps, _ = run(speculate=False)
    answer = plain["p"]
    exact, exact_steps, speculator = run(answer)
    assert exact == plain and exact_steps == 1 + 24 // 5 + 1  # prefill, then 5 tokens a step (4 drafts + 1)
    assert (
        speculator.make_stats().num_prediction_draft_tokens_total,
        speculator.make_stats().num_prediction_accepted_tokens_total,
    ) == (19, 19)
    stats = speculator.make_stats()
    assert stats.num_draft_tokens_total == 0  # the proposer's counters (its acceptance) are its own
    assert len(speculator.predictions) == 0  # finished: forgotten
    edited = [*answer[:8], answer[8] + 1, answer[8] + 2, *answer[9:]]  # a prediction that differs mid-way
    after_edit, edit_steps, speculator = run(edited)
    assert after_edit == plain and exact_steps < edit_steps < plain_steps
    assert (
        speculator.make_stats().num_prediction_accepted_tokens_total
        < speculator.make_stats().num_prediction_draft_tokens_total
    )
    nothing_alike, unlike_steps, _ = run([7] * 30)
    assert nothing_alike == plain and unlike_steps == plain_steps


def test_the_intake_tokenizes_a_prediction_and_the_bounds_hold():
    from engine.prompt import PromptError, check_sampling_token_ids
    from engine.sampling_params import MAX_PREDICTION_TOKENS, SamplingParams, SamplingParamsError
    from engine.spec.prediction_drafts import tokenized

    class Bytes:
        def encode(self, text, add_special_tokens=True):
            return list(text.encode())

    params = tokenized(Bytes(), SamplingParams(prediction="def f():"))
    assert params.prediction_token_ids == tuple(b"def f():") and params.prediction is None  # the ids travel
    assert tokenized(Bytes(), SamplingParams(prediction="x", prediction_token_ids=(5,))).prediction_token_ids == (5,)
    with pytest.raises(PromptError, match="prediction"):  # its tokens past the bound: refused naming `prediction`
        tokenized(Bytes(), SamplingParams(prediction="x" * (MAX_PREDICTION_TOKENS + 1)))
    with pytest.raises(SamplingParamsError, match="prediction"):
        SamplingParams(prediction="x" * (2**18 + 1))
    with pytest.raises(SamplingParamsError, match="prediction_token_ids"):
        SamplingParams(prediction_token_ids=(-1,))
    with pytest.raises(PromptError, match="prediction_token_ids"):
        check_sampling_token_ids(SamplingParams(prediction_token_ids=(1, 500)), vocab_size=256)
