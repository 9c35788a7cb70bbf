"""SampleSlot: which logits rows of a step are sampled for which request, what a sampler returns for
them, and how the sampled tokens become the request's output. Shared by the torch and JAX runners;
pure Python.

A request with ``spec_token_ids`` is run as a chunk of ``token_ids + spec_token_ids``; its last
``len(spec_token_ids) + 1`` rows are sampled and the drafts accepted while they equal the sampled
token (exact for deterministic drafts, greedy or not), followed by the first differing (or bonus)
token::

    chunk rows   t0  t1  t2  d0  d1        token_ids = [t0, t1, t2], spec_token_ids = [d0, d1]
    sampled              s0  s1  s2        one SampleSlot: first_row -> s0, num_rows = 3
    output       s0; then s1 if s0 == d0; then s2 if also s1 == d1

A plain decode or final prefill chunk is the case without drafts: one sampled row, its last.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.batch import RunnerOutput, ScheduledRequest, TokenLogprob
from engine.sampling_params import SamplingParams


def chunk_token_ids(request: ScheduledRequest) -> list[int]:
    """The tokens a chunk runs, one row each: ``token_ids``, then the drafts to verify."""
    return request.token_ids + request.spec_token_ids if request.spec_token_ids else request.token_ids


@dataclass(slots=True)
class SampleSlot:
    """Where one sampling request's rows sit among a forward program's logits rows."""

    request: ScheduledRequest
    first_row: int  # index into the program's logits rows
    num_rows: int  # len(spec_token_ids) + 1


class SampleRows:
    """Builds, request by request, the step rows to project to logits and one slot per sampling request.

    ``logits_rows[i]`` is the step row of logits row i; each slot's rows are consecutive in it.
    """

    def __init__(self) -> None:
        self.logits_rows: list[int] = []
        self.slots: list[SampleSlot] = []

    def add(self, request: ScheduledRequest, row: int) -> None:
        """``request``'s rows start at step row ``row``; only a request with ``sample`` gets rows."""
        if request.sample:
            k = len(request.spec_token_ids)
            self.slots.append(SampleSlot(request, len(self.logits_rows), k + 1))
            first = row + len(request.token_ids) - 1
            self.logits_rows.extend(range(first, first + k + 1))


@dataclass(slots=True)
class SamplerOutput:
    token_ids: list[int]  # [S]
    logprobs: list[TokenLogprob | None]  # [S]; None where the row's params did not ask


def per_row(slots: list[SampleSlot]) -> tuple[list[str], list[SamplingParams]]:
    """(req_ids, sampling params), one per sampled row [S], slot by slot."""
    req_ids = [s.request.req_id for s in slots for _ in range(s.num_rows)]
    params = [s.request.sampling_params for s in slots for _ in range(s.num_rows)]
    return req_ids, params


def accept_sampled(slots: list[SampleSlot], result: SamplerOutput, out: RunnerOutput) -> None:
    """Record each slot's accepted tokens (and their logprobs when asked) in ``out``.

    ``result`` holds one entry per sampled row [S], in the order of ``per_row(slots)``.
    """
    i = 0  # the slot's first entry in result
    for s in slots:
        r = s.request
        accepted: list[int] = []
        for j in range(s.num_rows):
            accepted.append(result.token_ids[i + j])
            if j < len(r.spec_token_ids) and result.token_ids[i + j] != r.spec_token_ids[j]:
                break
        out.sampled_token_ids[r.req_id] = accepted
        if r.sampling_params.logprobs is not None:
            lps: list[TokenLogprob] = [result.logprobs[i + j] for j in range(len(accepted))]
            out.logprobs[r.req_id] = lps
        i += s.num_rows
