"""The one interface every draft proposer implements (n-gram, in-process draft model, remote drafter).

A proposer guesses the next ``num_spec_tokens`` tokens of running requests; the target model verifies
them in its next step (engine/batch.py, ``ScheduledRequest.spec_token_ids``)::

    Speculator.propose ──► Proposer.propose([DraftRequest]) ──► {req_id: Draft}
                              request.spec_token_ids = draft.token_ids ──► Scheduler ──► runner verifies

Exactness contract. A draft whose tokens are a deterministic function of the context (``probs is None``:
n-gram lookup, a greedy draft model) is verified by "accept while the target's own sample equals the
draft", which is exact for greedy and for sampled requests alike (the proposal distribution is a point
mass; rejection sampling with q = one-hot reduces to it). A draft sampled from a distribution q carries
q in ``probs`` (a backend array ``[k, V]`` the engine never reads), and the runner verifies it by
rejection sampling with the residual distribution on rejection (backends/torch/rejection_sampler.py).

Sans-IO: a proposer may compute (a draft model) or send a message (a remote drafter, with a deadline),
but the engine sees only this synchronous protocol.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from engine.sampling_params import SamplingParams


@dataclass(slots=True)
class DraftRequest:
    """One running request that wants drafts this step.

    token_ids: every known token (prompt + output); the drafts continue it. Read-only.
    num_spec_tokens: the most drafts wanted (>= 1); a proposer may return fewer, or none.
    """

    req_id: str
    token_ids: Sequence[int]
    num_spec_tokens: int
    sampling_params: SamplingParams


@dataclass(slots=True)
class Draft:
    """Proposed tokens, and the distribution they were sampled from when not deterministic.

    probs: None, or a backend array [len(token_ids), V]: row j is the proposal distribution q_j that
        token_ids[j] was drawn from (rejection sampling needs it). Opaque to the engine.
    """

    token_ids: list[int] = field(default_factory=list)
    probs: Any = None


@runtime_checkable
class Proposer(Protocol):
    """Proposes draft tokens for a batch of requests. Must never raise on a request's content: a request
    it cannot serve gets no draft (an empty or missing entry), and it decodes plainly."""

    name: str

    def propose(self, requests: list[DraftRequest]) -> dict[str, Draft]:
        """Drafts for (some of) ``requests``, keyed by req_id."""
        ...

    def drop(self, req_ids: Iterable[str]) -> None:
        """Forget finished or aborted requests (any per-request state, e.g. a draft model's KV)."""
        ...
