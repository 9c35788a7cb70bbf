"""vLLM's ``bad_words`` (engine/bad_words.py): the words' token sequences (vLLM's tokenization rule, the real SmolLM2
tokenizer), the ban one step at a time (against a plain reference), the bounds, and the real model never writing a
banned word it writes unconstrained."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from backends.fake import ByteTokenizer
from engine.bad_words import bad_words_token_ids, banned_next, tokenized
from engine.prompt import PromptError
from engine.request import Request
from engine.sampling_params import MAX_BAD_WORDS, SamplingParams, SamplingParamsError


def test_a_sequences_last_token_is_banned_where_the_output_ends_with_the_rest():
    sequences = ((5, 7, 9), (7, 3), (4, 9), (11,), (5, 7, 9, 2))
    assert banned_next(sequences, [1, 5, 7]) == [9, 3, 11]  # (4, 9): the output does not end with 4
    assert banned_next(sequences, []) == [11]  # a one-token word: always
    assert banned_next(sequences, [7]) == [3, 11]  # (5, 7, 9) needs two tokens before


@settings(max_examples=300, deadline=None)
@given(
    sequences=st.lists(st.lists(st.integers(0, 4), min_size=1, max_size=4).map(tuple), max_size=5),
    output=st.lists(st.integers(0, 4), max_size=8),
)
def test_the_ban_is_the_plain_rule(sequences, output):
    expected = [
        s[-1] for s in sequences if len(s) - 1 <= len(output) and tuple(output[len(output) - len(s) + 1 :]) == s[:-1]
    ]
    assert banned_next(sequences, output) == expected


def test_words_are_tokenized_with_and_without_a_leading_space_as_vllm_does(smollm2_checkpoint):
    tok = smollm2_checkpoint.tokenizer
    sequences = bad_words_token_ids(tok, ["Paris", "  Paris"])  # lstripped: the same word twice, kept once
    bare, spaced = tuple(tok.encode("Paris")), tuple(tok.encode(" Paris"))
    assert bare != spaced and len(bare) == len(spaced)  # SmolLM2's BPE: "Paris" and "ĠParis" are other tokens
    assert sequences == (bare, spaced)
    # the spaced form is kept however many tokens it is (vLLM asks as many as the bare form's): a word the tokenizer
    # merges with its space is banned in mid-text too
    assert bad_words_token_ids(ByteTokenizer(), ["ab"]) == ((100, 101), (35, 100, 101))
    assert bad_words_token_ids(tok, ["banana"]) == (tuple(tok.encode("banana")), tuple(tok.encode(" banana")))
    assert len(tok.encode("banana")) != len(tok.encode(" banana"))


def test_tokenized_fills_the_ids_once_and_keeps_a_clients_own():
    tok = ByteTokenizer()
    params = tokenized(tok, SamplingParams(bad_words=("no",)))
    assert params.bad_words_token_ids == ((113, 114), (35, 113, 114)) and params.processes_logits
    given_ids = SamplingParams(bad_words=("no",), bad_words_token_ids=((5,),))
    assert tokenized(tok, given_ids) is given_ids
    plain = SamplingParams()
    assert tokenized(tok, plain) is plain and not plain.processes_logits

    class Verbose:  # a tokenizer that makes a word longer than the bound
        def encode(self, text, add_special_tokens=False):
            return [5] * 5000

    with pytest.raises(PromptError) as refused:
        tokenized(Verbose(), SamplingParams(bad_words=("w",)))
    assert refused.value.param == "bad_words" and str(refused.value).startswith("bad_words:")


def test_bounds_are_refused_by_name():
    for bad in ({"bad_words": ("",)}, {"bad_words": ("   ",)}, {"bad_words": ("w",) * (MAX_BAD_WORDS + 1)}):
        with pytest.raises(SamplingParamsError, match=r"^bad_words:"):
            SamplingParams(**bad)
    for bad in (
        {"bad_words_token_ids": ((),)},
        {"bad_words_token_ids": ((-1,),)},
        {"bad_words_token_ids": ((2**31,),)},
    ):
        with pytest.raises(SamplingParamsError, match=r"^bad_words_token_ids:"):
            SamplingParams(**bad)
    assert SamplingParams(bad_words=["a", "b"], bad_words_token_ids=[[1, 2], [3]]).bad_words_token_ids == ((1, 2), (3,))


def test_a_resumed_requests_earlier_output_counts():
    params = SamplingParams(bad_words_token_ids=((7, 8, 9),), max_tokens=8)
    fresh = Request("a", [1, 2, 7, 8], params, 0.0, eos_token_id=2)  # 7, 8 are its prompt: no ban
    assert fresh.logits_inputs().banned_token_ids == ()
    resumed = Request("b", [1, 2, 7, 8], params, 0.0, eos_token_id=2, num_resumed_tokens=2)  # 7, 8 were output
    assert resumed.logits_inputs().banned_token_ids == (9,)
    both = SamplingParams(bad_words_token_ids=((9,),), min_tokens=2, max_tokens=8)
    assert Request("c", [1], both, 0.0, eos_token_id=2).logits_inputs().banned_token_ids == (2, 9)


def test_the_real_model_does_not_write_a_word_it_writes_unconstrained(smollm2_engine, smollm2_checkpoint, greedy):
    tok = smollm2_checkpoint.tokenizer
    prompt = tok.encode(tok.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}]))
    free = greedy(smollm2_engine, prompt, 12)
    assert "Paris" in tok.decode(free)  # the word the model writes unconstrained
    banned = bad_words_token_ids(tok, ["Paris"])
    constrained = greedy(smollm2_engine, prompt, 12, bad_words=("Paris",))  # the engine tokenizes them (no intake)
    assert constrained != free
    for sequence in banned:  # no banned sequence completed anywhere in the output
        n = len(sequence)
        assert all(tuple(constrained[i : i + n]) != sequence for i in range(len(constrained) - n + 1))
    assert greedy(smollm2_engine, prompt, 12, bad_words_token_ids=banned) == constrained  # ids given: the same ban
