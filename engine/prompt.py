"""The one prompt validator: a prompt's token ids against a vocabulary and a context length.

    check_prompt(ids, vocab_size, max_model_len)     the edge (control-plane intake, ``zoo generate``)
      ├─ check_token_ids(ids, vocab_size)             every id a token of the model; at least one
      └─ check_prompt_length(num_tokens, max_len)     room for the prompt and one output token

Where it runs: the control plane validates a client's prompt once, against the longest context its
cell serves; a node then checks only what is its own (its context length in the scheduler, its
vocabulary in ``LLMEngine.add_request`` for prompts given as ids, its KV capacity).
"""

from __future__ import annotations

import functools
from array import array
from collections.abc import Sequence
from typing import Annotated, Any

import msgspec

from engine.sampling_params import SamplingParams


class PromptError(ValueError):
    """A prompt that cannot be served; ``param`` names the request field it came from."""

    def __init__(self, message: str, param: str | None = "prompt") -> None:
        super().__init__(message)
        self.param = param


class PromptTooLongError(PromptError):
    """The prompt leaves no room for one output token in the context."""


# The last tuple check_token_ids passed, and the vocabulary it passed against: a tuple of exact ints cannot change, so
# the same object checked again (the control plane's intake, then a node in the same process: the fleet simulator)
# passes in O(1). Only an exact tuple: a list may be changed after its check, and a tuple subclass may yield other
# items than it held when checked. Holding the reference keeps its id from being reused.
_last_checked: tuple[tuple[int, ...] | None, int] = (None, 0)


def check_token_ids(token_ids: Sequence[int], vocab_size: int) -> None:
    global _last_checked
    last, last_vocab_size = _last_checked
    if token_ids is last and type(vocab_size) is int and vocab_size == last_vocab_size:
        return
    _check_token_ids(token_ids, vocab_size)
    if type(token_ids) is tuple:  # every item an exact int (checked): the tuple cannot change
        _last_checked = (token_ids, vocab_size)


def check_sampling_token_ids(params: SamplingParams, vocab_size: int) -> None:
    """PromptError naming the field when a ``logit_bias``, ``allowed_token_ids``, bad-word, prediction or thinking
    delimiter id is past the vocabulary (SamplingParams bounds the ids to int32 only: the vocabulary is the model's),
    or a thinking budget comes without the thinking's end delimiter."""
    bad = [token_id for token_id, _ in params.logit_bias if token_id >= vocab_size]
    if bad:
        raise PromptError(f"logit_bias token ids out of range [0, {vocab_size}): {bad[:5]}", "logit_bias")
    bad = [token_id for token_id in params.allowed_token_ids if token_id >= vocab_size]
    if bad:
        raise PromptError(f"allowed_token_ids out of range [0, {vocab_size}): {bad[:5]}", "allowed_token_ids")
    bad = [token_id for sequence in params.bad_words_token_ids for token_id in sequence if token_id >= vocab_size]
    if bad:
        raise PromptError(f"bad_words_token_ids out of range [0, {vocab_size}): {bad[:5]}", "bad_words_token_ids")
    if params.prediction_token_ids and max(params.prediction_token_ids) >= vocab_size:
        bad = [token_id for token_id in params.prediction_token_ids if token_id >= vocab_size]
        raise PromptError(f"prediction_token_ids out of range [0, {vocab_size}): {bad[:5]}", "prediction_token_ids")
    for name in ("think_start_token_ids", "think_end_token_ids"):
        bad = [token_id for token_id in getattr(params, name) if token_id >= vocab_size]
        if bad:
            raise PromptError(f"{name} out of range [0, {vocab_size}): {bad[:5]}", name)
    if params.thinking_token_budget is not None and not params.think_end_token_ids:
        message = "thinking_token_budget: the thinking's end delimiter (think_end_token_ids) is not known here"
        raise PromptError(message, "thinking_token_budget")


def _check_token_ids(token_ids: Sequence[int], vocab_size: int) -> None:
    if not token_ids:
        raise PromptError("the prompt is empty")
    # C-speed: msgspec checks every element an int (not a bool, not a numpy integer, not a float) in range in one pass;
    # it lets an int subclass through, which the type count refuses. Anything it refuses (or a sequence it does not
    # take: a range) gets the exact check below, which decides and names the bad ids.
    token_list = _token_list_type(vocab_size) if type(vocab_size) is int else None
    if token_list is not None:
        try:
            msgspec.convert(token_ids, token_list)
        except (ValueError, TypeError):  # msgspec.ValidationError is a ValueError
            pass
        else:
            if list(map(type, token_ids)).count(int) == len(token_ids):
                return
    if (
        list(map(type, token_ids)).count(int) != len(token_ids)
        or not _none_negative(token_ids)
        or max(token_ids) >= vocab_size
    ):
        bad = [t for t in token_ids if type(t) is not int or not 0 <= t < vocab_size]
        raise PromptError(f"prompt token ids out of range [0, {vocab_size}): {bad[:5]}")


def _none_negative(token_ids: Sequence[int]) -> bool:
    """Whether no int of ``token_ids`` is negative: an unsigned 64-bit array takes them all (~3x faster than
    ``min``). False too for one of 2**64 or more (out of every vocabulary anyway)."""
    try:
        array("Q", token_ids)
    except OverflowError:
        return False
    return True


@functools.cache
def _token_list_type(vocab_size: int) -> Any:
    """A list of ints in [0, vocab_size), as msgspec validates it; None where msgspec cannot bound it (its bounds
    are int64s): the exact rule alone then."""
    if not -(2**63) <= vocab_size < 2**63:
        return None
    return list[Annotated[int, msgspec.Meta(ge=0, lt=vocab_size)]]


def check_prompt_length(num_prompt_tokens: int, max_model_len: int) -> None:
    if num_prompt_tokens == 0:
        raise PromptError("the prompt is empty")
    if num_prompt_tokens >= max_model_len:
        raise PromptTooLongError(
            f"the prompt has {num_prompt_tokens} tokens; the context holds {max_model_len} "
            "(max_model_len: prompt + at least one output token)"
        )


def check_prompt(token_ids: Sequence[int], vocab_size: int, max_model_len: int) -> None:
    """Raises PromptError (PromptTooLongError for the length) naming what is wrong."""
    check_token_ids(token_ids, vocab_size)
    check_prompt_length(len(token_ids), max_model_len)
