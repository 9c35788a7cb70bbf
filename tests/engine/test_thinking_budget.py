"""vLLM's ``thinking_token_budget`` (engine/thinking_budget.py): the rule on hand-made token sequences, read step by
step or all at once alike; the bounds; the delimiters tokenized at the intake; the forced token as the sampler's
one-token allowed set; and the real model made to end its thinking at the budget."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from backends.fake import ByteTokenizer
from backends.logits_adjust import LogitsAdjuster
from backends.runner_driver import sampled_step
from backends.sample_slots import SampleSlot
from engine.prompt import PromptError, check_sampling_token_ids
from engine.request import Request
from engine.sampling_params import MAX_THINK_DELIMITER_TOKENS, SamplingParams, SamplingParamsError
from engine.structured_output import StructuredOutput
from engine.thinking_budget import THINK_END, THINK_START, ThinkingBudget, tokenized

START, END = (7, 8), (9, 10, 11)  # hand-made delimiters: two and three tokens


def _params(budget: int, **extra) -> SamplingParams:
    return SamplingParams(
        thinking_token_budget=budget, think_start_token_ids=START, think_end_token_ids=END, max_tokens=64, **extra
    )


def _forced_after(budget: int, prompt: list[int], output: list[int]) -> list[int | None]:
    """The forced token before each output token and after the last, read one token at a time."""
    state = ThinkingBudget.for_request(_params(budget), prompt)
    forced = [state.forced_token()]
    for i in range(1, len(output) + 1):
        state.advance(output[:i])
        forced.append(state.forced_token())
    return forced


def test_a_template_that_opens_the_thinking_gets_the_budget_then_the_end_forced():
    prompt = [1, 2, *START]  # the chat template ended with <think>
    output = [5, 5, 5, 9, 10, 11, 6, 6]  # three tokens of thinking, the forced end, the answer
    assert _forced_after(3, prompt, output) == [None, None, None, 9, 10, 11, None, None, None]


def test_a_model_that_ends_its_thinking_first_is_never_forced():
    assert _forced_after(5, [1, *START], [5, 5, *END, 6, 6, 6, 6, 6]) == [None] * 11


def test_a_budget_of_0_forces_the_end_at_once_and_the_prompts_thinking_counts():
    assert _forced_after(0, [1, *START], [9, 10, 11, 6])[:4] == [9, 10, 11, None]
    # a resumed request: its prompt ends with the thinking it did before (4 tokens after the start)
    assert _forced_after(6, [1, *START, 5, 5, 5, 5], [5, 5, 9, 10, 11]) == [None, None, 9, 10, 11, None]


def test_thinking_the_model_opens_itself_is_counted_from_its_start():
    prompt = [1, 2, 3]  # no <think> in the prompt: nothing counted until the model writes one
    output = [5, 5, *START, 5, 9, 10, 11, 5, 5]
    assert _forced_after(1, prompt, output) == [None, None, None, None, None, 9, 10, 11, None, None, None]
    # a thinking closed in the prompt (an earlier turn's) does not count
    assert _forced_after(0, [*START, 5, *END, 1], [5, 5]) == [None, None, None]


@settings(max_examples=200, deadline=None)
@given(
    budget=st.integers(0, 4),
    prompt=st.lists(st.sampled_from([1, 5, 7, 8, 9, 10, 11]), min_size=1, max_size=10),
    output=st.lists(st.sampled_from([5, 7, 8, 9, 10, 11]), max_size=14),
)
def test_reading_all_at_once_equals_reading_step_by_step(budget, prompt, output):
    state = ThinkingBudget.for_request(_params(budget), prompt)
    state.advance(output)
    stepwise = _forced_after(budget, prompt, output)
    assert state.forced_token() == stepwise[-1]
    # the count never passes the budget while nothing is forced, and forcing only happens in an open thinking's end
    assert all(f is None or f in END for f in stepwise)


def test_bounds_are_refused_by_name():
    for bad in (-1, 2**31, "4", 1.5, True):
        with pytest.raises(SamplingParamsError, match=r"^thinking_token_budget:"):
            SamplingParams(thinking_token_budget=bad)
    for name in ("think_start_token_ids", "think_end_token_ids"):
        for bad in ([1] * (MAX_THINK_DELIMITER_TOKENS + 1), [-1], [2**31]):
            with pytest.raises(SamplingParamsError, match=rf"^{name}:"):
                SamplingParams(**{name: bad})
    schema = StructuredOutput(json='{"type": "object"}')
    with pytest.raises(SamplingParamsError, match=r"^thinking_token_budget: cannot be combined with structured"):
        SamplingParams(thinking_token_budget=4, structured_outputs=schema)
    assert SamplingParams(thinking_token_budget=0).processes_logits
    assert SamplingParams(think_end_token_ids=[1, 2]).think_end_token_ids == (1, 2)


def test_the_intake_tokenizes_the_delimiters_once_and_keeps_a_clients_own():
    tok = ByteTokenizer()
    params = tokenized(tok, SamplingParams(thinking_token_budget=8))
    assert params.think_start_token_ids == tuple(tok.encode(THINK_START, add_special_tokens=False))
    assert params.think_end_token_ids == tuple(tok.encode(THINK_END, add_special_tokens=False))
    own = SamplingParams(thinking_token_budget=8, think_end_token_ids=(4,))
    assert tokenized(tok, own) is own
    plain = SamplingParams()
    assert tokenized(tok, plain) is plain

    class Verbose:  # a tokenizer that spells the delimiters in more tokens than the bound
        def encode(self, text, add_special_tokens=False):
            return [5] * (MAX_THINK_DELIMITER_TOKENS + 1)

    with pytest.raises(PromptError) as refused:
        tokenized(Verbose(), SamplingParams(thinking_token_budget=8))
    assert refused.value.param == "thinking_token_budget"


def test_a_budget_without_an_end_delimiter_or_with_ids_past_the_vocabulary_is_refused():
    with pytest.raises(PromptError) as refused:
        check_sampling_token_ids(SamplingParams(thinking_token_budget=8), 100)
    assert refused.value.param == "thinking_token_budget"
    with pytest.raises(PromptError) as refused:
        check_sampling_token_ids(SamplingParams(thinking_token_budget=8, think_end_token_ids=(5, 100)), 100)
    assert refused.value.param == "think_end_token_ids"
    check_sampling_token_ids(SamplingParams(thinking_token_budget=8, think_end_token_ids=(5, 99)), 100)


def test_the_forced_token_is_the_only_one_the_sampler_may_pick():
    V = 24
    request = Request("t", [1, 2, *START], _params(2, allowed_token_ids=[3, 4, 5]), 0.0, eos_token_id=2)
    adjuster = LogitsAdjuster()
    for output_token, forced in ((5, None), (5, None), (9, 9), (10, 10), (11, 11), (6, None)):
        inputs = request.logits_inputs()
        assert inputs.forced_token_id == forced
        plan = adjuster.plan([SampleSlot(sampled_step(request), 0, 1)], V)
        allowed = np.flatnonzero(~plan.allowed_mask(1, V)[0]).tolist()
        assert allowed == ([3, 4, 5] if forced is None else [forced])  # the forced token wins over the allowed set
        request.append_output_token_ids(output_token)


def test_the_real_model_ends_its_thinking_at_the_budget(smollm2_engine, smollm2_checkpoint, greedy):
    tok = smollm2_checkpoint.tokenizer
    chat = tok.apply_chat_template([{"role": "user", "content": "Is 17 a prime number?"}])
    start, end = (tok.encode(text, add_special_tokens=False) for text in (THINK_START, THINK_END))
    newline = tok.encode("\n", add_special_tokens=False)
    assert len(newline) == 1
    prompt = [*tok.encode(chat), *start, *newline]  # a template that opens the thinking, as Qwen3's does

    free = greedy(smollm2_engine, prompt, 12)
    budget = 3
    assert free[budget : budget + len(end)] != end  # unconstrained, the model does not end there
    # the engine tokenizes the delimiters itself (no intake here); the prompt's "\n" after <think> counts as thinking
    cut = greedy(smollm2_engine, prompt, 12, thinking_token_budget=budget)
    num_free = budget - 1
    assert cut[:num_free] == free[:num_free]  # the thinking before the budget is the model's own
    assert cut[num_free : num_free + len(end)] == end  # then the end of the thinking, forced
    assert len(cut) == 12  # and the model goes on answering
