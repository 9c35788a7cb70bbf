"""Prompt logprobs (vLLM's ``SamplingParams.prompt_logprobs``): each prompt token's log-probability given the tokens
before it, its rank, and the top alternatives. lm-evaluation-harness's loglikelihood tasks read them through
/v1/completions ``echo`` with ``logprobs`` (controlplane/gateway/openai_reply.py).

    admission: a request that asks is never served from the prefix cache (engine/kv/block_manager.py), as vLLM V1's
        KVCacheManager.get_computed_blocks skips it: a cached block's logits were never computed here
    each chunk: ScheduledRequest.prompt_targets, the prompt tokens its rows predict (Request.prompt_targets)
        ─► the runner projects those rows too and scores the targets (backends/prompt_rows.py)
        ─► RunnerOutput.prompt_logprobs[req_id] = (first position, entries)
    engine: PromptLogprobs.add keeps each position once (a prefix recomputed after a preemption scores it again);
        the request's first output carries them all, position 0's logprob None (nothing comes before it)

A request resumed on another node after its first chunk went out (its prompt extended by its own output) asks no more:
the control plane drops the field, since the first node already answered it. A runner that cannot score rows (the
simulated and fake ones) refuses such a request (LLMEngine.add_request).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from engine.batch import TokenLogprob
from engine.sampling_params import SamplingParams


class PromptLogprobs:
    """One request's prompt scores as its chunks are computed; ``take`` hands them over once."""

    __slots__ = ("entries", "first_token_id", "num_prompt_tokens", "taken")

    def __init__(self, prompt_token_ids: list[int]) -> None:
        self.first_token_id = prompt_token_ids[0]
        self.num_prompt_tokens = len(prompt_token_ids)
        self.entries: list[TokenLogprob] = []  # positions 1, 2, ...
        self.taken = False

    def add(self, first_position: int, entries: list[TokenLogprob]) -> None:
        """Entries for positions ``first_position``, ``first_position + 1``, ...; positions already held are kept
        as they are (a recomputed chunk's)."""
        skip = len(self.entries) + 1 - first_position
        if skip >= 0:
            self.entries.extend(entries[skip:])

    def take(self) -> list[TokenLogprob] | None:
        """An entry per prompt position (position 0's logprob None) the first time the whole prompt is scored; then
        None."""
        if self.taken or len(self.entries) < self.num_prompt_tokens - 1:
            return None
        self.taken = True
        return [TokenLogprob(self.first_token_id, None), *self.entries]


def prompt_targets(prompt_token_ids: list[int], start: int, end: int) -> list[int]:
    """The prompt tokens that rows ``start .. end - 1`` predict (row p predicts p + 1)."""
    return prompt_token_ids[start + 1 : min(end + 1, len(prompt_token_ids))]


def check_runner(runner: object, params: SamplingParams) -> None:
    """ValueError naming ``prompt_logprobs`` when they are asked of a runner that cannot score prompt rows."""
    if params.prompt_logprobs is not None and not getattr(runner, "scores_prompts", False):
        raise ValueError("prompt_logprobs: this node's runner does not compute them")


def record(scores: dict[str, tuple[int, list[TokenLogprob]]], request_of: Callable[[str], Any]) -> None:
    """A step's RunnerOutput.prompt_logprobs into their requests (``request_of``: the scheduler's Request by id, or
    None for one gone meanwhile, which is skipped)."""
    for req_id, (first_position, entries) in scores.items():
        request = request_of(req_id)
        if request is not None and request.prompt_logprobs is not None:
            request.prompt_logprobs.add(first_position, entries)
