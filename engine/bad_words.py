"""vLLM's ``bad_words``: words a request's output may not contain, as token sequences banned one token at a time.

    intake (the control plane; an engine given words directly does the same): tokenized(tokenizer, params)
        bad_words_token_ids(tokenizer, words)   each word's tokens, and the word's tokens after a space where those
                                                are other tokens (a word in mid-text)
    every step (engine/request.py LogitsInputs):
        banned_next(sequences, tokens, start)    a sequence's last token, where the output so far (tokens[start:])
                                                 ends with the tokens before it (a one-token word: always)

The rules are vLLM's: vllm/sampling_params.py ``SamplingParams.update_from_tokenizer`` (a word lstripped, encoded
without special tokens, with and without a leading space, the spaced form kept when its first token differs) and
vllm/v1/sample/ops/bad_words.py ``_apply_bad_words_single_batch`` (the output's last ``len - 1`` tokens against the
sequence's head). One deliberate difference: vLLM keeps the spaced form only when it is as many tokens as the bare
one; here it is kept whatever its length, so a word the tokenizer merges with its space is banned in mid-text too
(SmolLM2's "banana" is "ban" + "ana", but " banana" one token: under vLLM's rule ``bad_words=["banana"]`` lets the
model write " banana"). As in vLLM the match is over the request's output only (a
resumed request's earlier output counts: it is the prompt's tail here, engine/request.py), so a word is banned
where it would be completed, not where its tokens could merge differently; a client who needs more gives the ids.
Sans-IO: no torch, no numpy.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import msgspec

from engine.prompt import PromptError
from engine.sampling_params import SamplingParams, SamplingParamsError


def bad_words_token_ids(tokenizer: Any, words: Iterable[str]) -> tuple[tuple[int, ...], ...]:
    """The token sequences of ``words`` (vLLM's rule, module docstring); each word has a non-space character
    (SamplingParams checks it)."""
    sequences: list[tuple[int, ...]] = []
    for word in words:
        bare = tuple(tokenizer.encode(word.lstrip(), add_special_tokens=False))
        if not bare:
            continue
        sequences.append(bare)
        spaced = tuple(tokenizer.encode(" " + word.lstrip(), add_special_tokens=False))
        if spaced and spaced[0] != bare[0]:  # vLLM also asks len(spaced) == len(bare) (module docstring)
            sequences.append(spaced)
    return tuple(dict.fromkeys(sequences))  # each once, in order


def tokenized(tokenizer: Any, params: SamplingParams) -> SamplingParams:
    """``params`` with its ``bad_words`` tokenized into ``bad_words_token_ids`` (unless it names ids already, or no
    words); PromptError naming ``bad_words`` when the sequences are past SamplingParams' bounds."""
    if not params.bad_words or params.bad_words_token_ids:
        return params
    try:
        return msgspec.structs.replace(params, bad_words_token_ids=bad_words_token_ids(tokenizer, params.bad_words))
    except SamplingParamsError as e:
        raise PromptError(str(e).replace("bad_words_token_ids", "bad_words", 1), "bad_words") from None


def banned_next(sequences: Sequence[tuple[int, ...]], tokens: Sequence[int], start: int = 0) -> list[int]:
    """The tokens the next one may not be: each sequence's last where the output, ``tokens[start:]`` (read in
    place, not copied), ends with the rest of it."""
    banned = []
    end = len(tokens)
    num_output = end - start
    for sequence in sequences:
        head = len(sequence) - 1
        if head == 0:
            banned.append(sequence[0])
        elif (
            head <= num_output
            and tokens[end - 1] == sequence[head - 1]  # the cheap test first
            and all(tokens[end - head + i] == sequence[i] for i in range(head - 1))
        ):
            banned.append(sequence[head])
    return banned
