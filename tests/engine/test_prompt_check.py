"""check_token_ids (engine/prompt.py): exact ints in [0, vocab) pass; a bool, a float, a numpy integer, a string, a
negative id, one at or past the vocabulary (however large) fail with the same message the element-by-element
rule gives."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.prompt import PromptError, check_token_ids

VOCAB = 1000


class _Int(int):
    """An int subclass: msgspec's pass lets it through, the exact rule refuses it."""


def _reference_error(token_ids) -> str | None:
    bad = [t for t in token_ids if type(t) is not int or not 0 <= t < VOCAB]
    return f"prompt token ids out of range [0, {VOCAB}): {bad[:5]}" if bad else None


@pytest.mark.parametrize(
    "bad",
    [True, False, 1.0, np.int64(3), np.int32(3), "7", None, -1, VOCAB, 2**63, 2**64, 2**70, -(2**70), _Int(3)],
    ids=repr,
)
def test_one_bad_element_anywhere_is_refused(bad):
    for token_ids in ([bad], [5, bad, 6], [5] * 40 + [bad]):
        with pytest.raises(PromptError) as e:
            check_token_ids(token_ids, VOCAB)
        assert str(e.value) == _reference_error(token_ids)
        with pytest.raises(PromptError):
            check_token_ids(tuple(token_ids), VOCAB)


def test_empty_is_refused_and_valid_ids_pass():
    with pytest.raises(PromptError, match="empty"):
        check_token_ids([], VOCAB)
    check_token_ids([0, VOCAB - 1, 17], VOCAB)
    check_token_ids((0,), VOCAB)
    check_token_ids(range(VOCAB), VOCAB)  # a sequence msgspec does not take: the exact rule passes it


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(-5, VOCAB + 5) | st.booleans() | st.floats(0, 10), min_size=1, max_size=30))
def test_refuses_exactly_what_the_element_by_element_rule_refuses(token_ids):
    expected = _reference_error(token_ids)
    if expected is None:
        check_token_ids(token_ids, VOCAB)
    else:
        with pytest.raises(PromptError) as e:
            check_token_ids(token_ids, VOCAB)
        assert str(e.value) == expected


@pytest.mark.parametrize("vocab_size", [0, -1, 2**63, 2**64, 5.0, True])
def test_any_vocabulary_bound_gets_the_element_rule(vocab_size):
    """msgspec bounds only int64s: a vocabulary size past them (or not an int) is checked by the element rule."""
    token_ids = [1, 2, 7]
    bad = [t for t in token_ids if type(t) is not int or not 0 <= t < vocab_size]
    if bad:
        with pytest.raises(PromptError, match=re.escape(str(bad[:5]))):
            check_token_ids(token_ids, vocab_size)
    else:
        check_token_ids(token_ids, vocab_size)


def test_a_checked_tuple_passes_again_and_nothing_else_skips_the_check():
    """check_token_ids passes the tuple it passed last in O(1) (the node's check of the intake's prompt in the fleet
    simulator); a list changed after its check, another tuple, another vocabulary: checked."""
    ok = (1, 2, 3)
    check_token_ids(ok, VOCAB)
    check_token_ids(ok, VOCAB)  # remembered
    with pytest.raises(PromptError):
        check_token_ids(ok, 3)  # a smaller vocabulary: checked again
    listed = [1, 2, 3]
    check_token_ids(listed, VOCAB)
    listed[1] = VOCAB  # changed after its check: a list is never remembered
    with pytest.raises(PromptError):
        check_token_ids(listed, VOCAB)
    with pytest.raises(PromptError):
        check_token_ids((1, VOCAB, 3), VOCAB)  # equal length, another object
    with pytest.raises(PromptError):
        check_token_ids((True, 2), VOCAB)  # a bool is no token, remembered or not
