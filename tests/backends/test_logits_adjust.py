"""LogitsAdjuster: a step's sparse plan, applied by the module's formula, equals the rules applied token by token
(engine/sampling_params.py); counts advance by the new tokens only and are dropped with the request."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from backends.logits_adjust import LogitsAdjuster, LogitsPlan
from backends.runner_driver import sampled_step
from backends.sample_slots import SampleSlot
from engine.batch import ScheduledRequest
from engine.request import Request
from engine.sampling_params import SamplingParams

V = 24
EOS = 2


def reference_row(logits: np.ndarray, params: SamplingParams, prompt: list[int], output: list[int]) -> np.ndarray:
    """The rules as sampling_params.py states them, one token at a time."""
    out = logits.astype(np.float64).copy()
    bias = dict(params.logit_bias)
    banned = set(params.stop_token_ids) | ({EOS} if not params.ignore_eos else set())
    bad = {  # vLLM's bad words: a sequence's last token where the output ends with the rest of it
        s[-1]
        for s in params.bad_words_token_ids
        if len(s) - 1 <= len(output) and output[len(output) - len(s) + 1 :] == list(s[:-1])
    }
    for t in range(len(out)):
        v = out[t] + bias.get(t, 0.0)
        if (len(output) < params.min_tokens and t in banned) or t in bad:
            v = -math.inf
        if t in prompt or t in output:
            v = v / params.repetition_penalty if v > 0 else v * params.repetition_penalty
        count = output.count(t)
        v -= count * params.frequency_penalty + (count > 0) * params.presence_penalty
        if params.allowed_token_ids and t not in params.allowed_token_ids:
            v = -math.inf
        out[t] = v
    return out


def apply_plan(logits: np.ndarray, plan: LogitsPlan | None) -> np.ndarray:
    """The module docstring's formula, entry by entry, on the arrays a backend uploads."""
    out = logits.astype(np.float64).copy()
    if plan is None:
        return out
    rows, token_ids, before, rep, after = plan.arrays()
    for e, (row, t) in enumerate(zip(rows, token_ids)):
        v = out[row, t] + (0.0 if before is None else before[e])
        r = 1.0 if rep is None else rep[e]
        v = v / r if v > 0 else v * r
        out[row, t] = v - after[e]
    banned = plan.allowed_mask(*out.shape)
    if banned is not None:
        out[banned] = -math.inf
    return out


def scheduled(req_id: str, params: SamplingParams, prompt: list[int], output: list[int]) -> ScheduledRequest:
    """A decode step of a request (its last known token run, sampled), with the inputs the engine gives it."""
    request = Request(req_id, prompt, params, 0.0, eos_token_id=EOS)
    request.append_output_token_ids(output)
    return sampled_step(request)


params_st = st.builds(
    SamplingParams,
    presence_penalty=st.floats(-2, 2),
    frequency_penalty=st.floats(-2, 2),
    repetition_penalty=st.sampled_from([1.0, 0.5, 1.3, 2.0]),
    logit_bias=st.dictionaries(st.integers(0, V + 3), st.floats(-100, 100), max_size=4),
    min_tokens=st.integers(0, 4),
    max_tokens=st.just(8),
    stop_token_ids=st.lists(st.integers(0, V - 1), max_size=2),
    ignore_eos=st.booleans(),
    allowed_token_ids=st.lists(st.integers(0, V - 1), max_size=5, unique=True),
    bad_words_token_ids=st.lists(st.lists(st.integers(0, V - 1), min_size=1, max_size=3).map(tuple), max_size=3).map(
        tuple
    ),
)


@settings(max_examples=150, deadline=None)
@given(
    params=params_st,
    prompt=st.lists(st.integers(0, V - 1), min_size=1, max_size=12),
    output=st.lists(st.integers(0, V - 1), max_size=10),
    seed=st.integers(0, 2**16),
)
def test_the_plan_applies_the_rules(params, prompt, output, seed):
    logits = np.random.default_rng(seed).standard_normal((2, V)) * 4
    slot = SampleSlot(scheduled("a", params, prompt, output), first_row=1, num_rows=1)
    plan = LogitsAdjuster().plan([slot], V)
    got = apply_plan(logits, plan)
    np.testing.assert_allclose(got[1], reference_row(logits[1], params, prompt, output), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(got[0], logits[0])  # another row: untouched
    if plan is not None:
        rows, token_ids, _, rep, _ = plan.arrays()
        assert len(set(zip(rows.tolist(), token_ids.tolist()))) == len(plan) == len(rows)  # each (row, token) once
        assert ((token_ids >= 0) & (token_ids < V)).all()  # an id past the vocabulary (the bias's V..V+3) skipped
        assert (rep is None) == (params.repetition_penalty == 1.0 or not params.penalizes or not len(rows))


def test_counts_advance_by_the_new_tokens_and_rebuild_when_the_history_is_another():
    params = SamplingParams(frequency_penalty=1.0, presence_penalty=0.5, max_tokens=16)
    adjuster = LogitsAdjuster()
    logits = np.zeros((1, V))
    prompt, output = [5, 6, 7], []
    for step in range(6):
        plan = adjuster.plan([SampleSlot(scheduled("a", params, prompt, output), 0, 1)], V)
        np.testing.assert_allclose(apply_plan(logits, plan)[0], reference_row(logits[0], params, prompt, output))
        output.append([9, 9, 3, 9, 4, 3][step])
    assert len(adjuster) == 1
    # the same id, another history (a resumed request: its output now prompt): counted anew, not added to
    resumed = scheduled("a", params, [*prompt, *output], [1])
    plan = adjuster.plan([SampleSlot(resumed, 0, 1)], V)
    np.testing.assert_allclose(apply_plan(logits, plan)[0], reference_row(logits[0], params, [*prompt, *output], [1]))
    adjuster.drop(["a", "unknown"])
    assert len(adjuster) == 0


def test_an_allowed_set_masks_every_other_token_and_is_made_once():
    params = SamplingParams(allowed_token_ids=[3, 7, V + 5], max_tokens=4)  # an id past the vocabulary: dropped
    adjuster = LogitsAdjuster()
    plan = adjuster.plan([SampleSlot(scheduled("c", params, [1, 2], []), 1, 1)], V)
    assert plan is not None and len(plan) == 0 and not plan.empty
    mask = plan.allowed_mask(2, V)
    assert not mask[0].any() and mask[1].sum() == V - 2 and not mask[1, 3] and not mask[1, 7]
    again = adjuster.plan([SampleSlot(scheduled("c", params, [1, 2], [3]), 0, 1)], V)
    assert again.allowed[0][1] is plan.allowed[0][1]  # the request's array, not rebuilt every step
    adjuster.drop(["c"])
    assert len(adjuster) == 0


def test_requests_without_processing_plan_nothing_and_min_p_alone_is_the_samplers():
    plain = SampleSlot(scheduled("p", SamplingParams(), [1, 2], [3]), 0, 1)
    min_p = SampleSlot(scheduled("m", SamplingParams(min_p=0.2), [1, 2], [3]), 1, 1)
    adjuster = LogitsAdjuster()
    assert adjuster.plan([plain, min_p], V) is None
    assert len(adjuster) == 0


def test_a_drafts_rows_count_the_drafts_before_them():
    params = SamplingParams(frequency_penalty=1.0, max_tokens=16)
    r = scheduled("s", params, [1, 2], [4])
    r.spec_token_ids = [4, 5]
    plan = LogitsAdjuster().plan([SampleSlot(r, 0, 3)], V)
    logits = np.zeros((3, V))
    got = apply_plan(logits, plan)
    for j, output in enumerate(([4], [4, 4], [4, 4, 5])):
        np.testing.assert_allclose(got[j], reference_row(logits[j], params, [1, 2], output))


def test_integer_params_plan_as_floats():
    """SamplingParams takes ints for its numbers (the Python API keeps them as given): the plan's arrays still build."""
    params = SamplingParams(repetition_penalty=2, frequency_penalty=1, presence_penalty=0, max_tokens=8)
    plan = LogitsAdjuster().plan([SampleSlot(scheduled("i", params, [1, 2], [3, 3]), 0, 1)], V)
    _, token_ids, _, rep, _ = plan.arrays()
    assert rep is not None and set(rep.tolist()) == {2.0} and sorted(token_ids.tolist()) == [1, 2, 3]
    logits = np.ones((1, V))
    np.testing.assert_allclose(apply_plan(logits, plan)[0], reference_row(logits[0], params, [1, 2], [3, 3]))
    unit = SamplingParams(repetition_penalty=1, frequency_penalty=1, max_tokens=8)  # an int 1: no factor at all
    assert LogitsAdjuster().plan([SampleSlot(scheduled("u", unit, [1], [3]), 0, 1)], V).arrays()[3] is None
