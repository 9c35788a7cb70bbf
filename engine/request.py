"""One generation request and its counter model.

Counter model (the same for prefill, decode, chunked prefill and recompute)::

    all_token_ids:  [ p0 p1 ... p(P-1) | o0 o1 ... o(O-1) ]      num_tokens = P + O
                    [<-- num_computed_tokens -->|                 KV is in the cache
                                                 ^ next step computes from here

Invariant while the request is alive: ``0 <= num_computed_tokens < num_tokens``. The last known token
never has KV yet (it was just sampled, or it is the last prompt token), so each step that reaches it
samples the next token. Sans-IO: no torch, no numpy; the scheduler alone mutates a request.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable

from engine.bad_words import banned_next
from engine.batch import LogitsInputs
from engine.prefix_key import cache_key
from engine.prompt_logprobs import PromptLogprobs, prompt_targets
from engine.sampling_params import SamplingParams
from engine.structured_output import Grammar
from engine.thinking_budget import ThinkingBudget


class RequestStatus(enum.Enum):
    WAITING = "waiting"  # queued, holds no KV blocks (new, or preempted by recompute)
    RUNNING = "running"  # holds device KV blocks
    SWAPPED = "swapped"  # preempted; its KV blocks are in host RAM
    FINISHED_STOPPED = "finished_stopped"  # EOS, a stop token or a stop string
    FINISHED_LENGTH = "finished_length"  # max_tokens, max_model_len or the KV capacity reached
    FINISHED_ABORTED = "finished_aborted"

    def is_finished(self) -> bool:
        """Works both as ``status.is_finished()`` and ``RequestStatus.is_finished(status)``."""
        return self in _FINISHED


_FINISHED = frozenset({RequestStatus.FINISHED_STOPPED, RequestStatus.FINISHED_LENGTH, RequestStatus.FINISHED_ABORTED})


class FinishReason(enum.StrEnum):
    STOP = "stop"
    LENGTH = "length"
    ABORT = "abort"

    @property
    def status(self) -> RequestStatus:
        return _STATUS_OF_REASON[self]


_STATUS_OF_REASON = {
    FinishReason.STOP: RequestStatus.FINISHED_STOPPED,
    FinishReason.LENGTH: RequestStatus.FINISHED_LENGTH,
    FinishReason.ABORT: RequestStatus.FINISHED_ABORTED,
}


class Request:
    """A prompt, its generated tokens, and where it stands in the scheduler.

    num_computed_tokens: tokens at positions [0, num_computed_tokens) whose KV is in the cache.
    spec_token_ids: draft tokens a proposer placed after the known tokens for the next step; the
        scheduler schedules them after ``token_ids`` and clears them once the step is done.
    spec_draft_probs: the proposal distribution of sampled drafts (opaque backend array [k, V]), or
        None for deterministic drafts (engine/spec/proposer.py).
    num_cached_prompt_tokens: prompt tokens served by the prefix cache on first admission.
    stop_reason: the stop token id or the stop string that ended the request.
    priority: its traffic class's rank, then its own priority, as one integer (higher runs first; engine/scheduler.py
        swaps a lower-priority running request out to admit a higher-priority waiting one).
    """

    def __init__(
        self,
        req_id: str,
        prompt_token_ids: list[int],
        sampling_params: SamplingParams,
        arrival_time_s: float,
        eos_token_id: int | None = None,
        lora_id: int | None = None,
        priority: int = 0,
        num_resumed_tokens: int = 0,
        grammar: Grammar | None = None,
    ) -> None:
        self.req_id = req_id
        self.prompt_token_ids = list(prompt_token_ids)
        self.output_token_ids: list[int] = []
        self.sampling_params = sampling_params
        self.arrival_time_s = arrival_time_s
        self.eos_token_id = eos_token_id
        self.lora_id = lora_id
        # what its blocks are hashed under: the adapter, salted by its cache_salt if it has one (engine/prefix_key.py)
        self.cache_key = cache_key(lora_id, sampling_params.cache_salt)
        self.priority = priority  # higher first; a lower-priority running request is swapped out for it
        self.num_resumed_tokens = num_resumed_tokens  # the prompt's last tokens: its output before a resume
        self._processes_logits = sampling_params.processes_logits  # asked at every step it is scheduled in
        self.num_prediction_accepted = 0  # its predicted output's tokens accepted as drafts (engine/spec/speculator.py)
        self.grammar = grammar  # its structured-output constraint, compiled (LLMEngine.add_request), or None
        # its thinking against its budget (engine/thinking_budget.py), when its params give one and the delimiters
        self.thinking = (
            ThinkingBudget.for_request(sampling_params, self.prompt_token_ids)
            if sampling_params.thinking_token_budget is not None and sampling_params.think_end_token_ids
            else None
        )
        # its prompt's scores as they are computed (engine/prompt_logprobs.py), when its params ask
        self.prompt_logprobs = (
            PromptLogprobs(self.prompt_token_ids) if sampling_params.prompt_logprobs is not None else None
        )

        self.status = RequestStatus.WAITING
        self.finish_reason: FinishReason | None = None
        self.stop_reason: int | str | None = None

        self.num_computed_tokens = 0
        self.spec_token_ids: list[int] = []
        self.spec_draft_probs: object | None = None
        self.num_preemptions = 0
        self.num_cached_prompt_tokens = 0
        self.first_scheduled_time_s: float | None = None
        self.first_token_time_s: float | None = None
        self.metrics: object | None = None  # the owner's per-request metrics (LLMEngine: its RequestMetrics)

        # prompt + output, kept in step with output_token_ids (slicing it is O(chunk))
        self._all_token_ids = list(self.prompt_token_ids)

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.output_token_ids)

    @property
    def num_tokens(self) -> int:
        return len(self._all_token_ids)

    @property
    def all_token_ids(self) -> list[int]:
        """Prompt followed by output. Read-only view: mutate through ``append_output_token_ids``."""
        return self._all_token_ids

    @property
    def is_finished(self) -> bool:
        return self.status.is_finished()

    def logits_inputs(self) -> LogitsInputs | None:
        """What its sampler needs beyond its params (ScheduledRequest.logits_inputs): its tokens where a penalty or
        its grammar reads them, the stop tokens while fewer than ``min_tokens`` are out, the bad words' next tokens
        (engine/bad_words.py), its grammar, the token its thinking budget forces (engine/thinking_budget.py); None
        when it processes none."""
        if not self._processes_logits:
            return None
        params = self.sampling_params
        history = self._all_token_ids if params.penalizes or self.grammar is not None else None
        banned: tuple[int, ...] = ()
        if len(self.output_token_ids) < params.min_tokens:
            stop_ids = params.stop_token_ids
            banned = stop_ids if self.eos_token_id is None or params.ignore_eos else (self.eos_token_id, *stop_ids)
        if params.bad_words_token_ids:  # the output so far, a resumed request's earlier output included
            start = len(self.prompt_token_ids) - self.num_resumed_tokens
            banned = (*banned, *banned_next(params.bad_words_token_ids, self._all_token_ids, start))
        forced = None
        if self.thinking is not None:
            self.thinking.advance(self.output_token_ids)
            forced = self.thinking.forced_token()
        return LogitsInputs(history, banned, self.num_resumed_tokens, self.grammar, forced)

    def prompt_targets(self, start: int, end: int) -> list[int] | None:
        """ScheduledRequest.prompt_targets of a chunk of positions [start, end): None unless its params ask."""
        if self.prompt_logprobs is None:
            return None
        return prompt_targets(self.prompt_token_ids, start, end) or None

    def append_output_token_ids(self, token_ids: int | Iterable[int]) -> None:
        if isinstance(token_ids, int):
            self.output_token_ids.append(token_ids)
            self._all_token_ids.append(token_ids)
            return
        ids = list(token_ids)
        self.output_token_ids.extend(ids)
        self._all_token_ids.extend(ids)

    def __repr__(self) -> str:
        return (
            f"Request({self.req_id!r}, status={self.status.name}, num_tokens={self.num_tokens}, "
            f"num_computed_tokens={self.num_computed_tokens}, num_output_tokens={self.num_output_tokens})"
        )
