"""The logits processing a request's SamplingParams asks for, planned in pure Python for every backend's sampler.

Penalties, ``logit_bias`` and ``min_tokens``' ban touch few of a row's V logits, so a step's processing is a sparse
plan: one entry per (row, token) it changes, merged so that a pair appears once. A backend applies it in one gather,
a few elementwise operations and one scatter on the device (backends/torch/sampler.py, backends/jax/sampler.py)::

    v = logits[row, token] + before        logit_bias (or -inf: a banned token, min_tokens not reached)
    v = v / rep if v > 0 else v * rep      repetition_penalty where the token is in the prompt or the output, else 1
    v = v - after                          frequency_penalty * count + presence_penalty, for the output's tokens
    logits[row, token] = v

That is vLLM V1's order (vllm/v1/sample/sampler.py and vllm/v1/sample/ops/penalties.py, v0.9): the logits
processors (min_tokens, logit_bias), then the repetition penalty, then the frequency and presence penalties
(OpenAI's formula: ``logit - count * frequency_penalty - (count > 0) * presence_penalty``). Temperature, min_p,
top-k and top-p follow in the sampler. The processed logits are sampled from; reported logprobs stay the raw ones.

A request's counts are kept per req_id and advanced by the tokens that came since its last step (O(new tokens)
per step, not O(history)), rebuilt when its history does not continue the one counted (a preemption by
recompute changes nothing here: the tokens are the same), and dropped with the sampler's per-request state when
the request finishes. Ids past the vocabulary (a stop token id a client gave) are skipped: the engine refuses a
``logit_bias`` id past it before it gets here (engine/llm_engine.py), and no id may index past a row.

Rows after a slot's first (the drafts of a speculated request) get the same processing, their drafts counted as
output. The engine does not propose drafts for requests that process their logits (engine/spec/speculator.py),
so that case is the fallback, not the path.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from backends.sample_slots import SampleSlot
from engine.sampling_params import SamplingParams

NEG_INF = float("-inf")


@dataclass(slots=True)
class LogitsPlan:
    """One step's sparse processing: entry e changes ``logits[rows[e], token_ids[e]]`` (module docstring)."""

    rows: list[int] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)
    before: list[float] = field(default_factory=list)
    rep: list[float] = field(default_factory=list)
    after: list[float] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.rows)


class _Seen:
    """One request's tokens as its penalties read them: the prompt's distinct ids, the output's counts."""

    __slots__ = ("counts", "num_known", "num_prompt", "prompt")

    def __init__(self, history: list[int], num_prompt: int, num_known: int) -> None:
        self.num_prompt = num_prompt
        self.num_known = num_known
        self.prompt = set(history[:num_prompt])
        self.counts: dict[int, int] = {}
        self.add(history[num_prompt:num_known])

    def add(self, token_ids: Iterable[int]) -> None:
        counts = self.counts
        for t in token_ids:
            counts[t] = counts.get(t, 0) + 1


class LogitsAdjuster:
    """Plans each step's processing (``plan``) and keeps each penalised request's counts until ``drop``."""

    def __init__(self) -> None:
        self._seen: dict[str, _Seen] = {}

    def __len__(self) -> int:
        return len(self._seen)

    def drop(self, req_ids: Iterable[str]) -> None:
        for req_id in req_ids:
            self._seen.pop(req_id, None)

    def plan(self, slots: list[SampleSlot], vocab_size: int) -> LogitsPlan | None:
        """The processing of the rows of ``slots`` (a slot's rows are ``first_row`` .. + ``num_rows``, as the sampler
        gets them); None when no row has any."""
        plan = None
        for s in slots:
            r = s.request
            params = r.sampling_params
            if not params.processes_logits:
                continue
            inputs = r.logits_inputs
            seen = None
            if params.penalizes and inputs is not None and inputs.history is not None:
                num_output = r.num_output_tokens + inputs.num_resumed_tokens  # its output before a resume included
                seen = self._counted(r.req_id, inputs.history, r.start_pos + len(r.token_ids), num_output)
            banned = () if inputs is None else inputs.banned_token_ids
            if seen is None and not banned and not params.logit_bias:
                continue  # min_p alone: the sampler's
            if plan is None:
                plan = LogitsPlan()
            for j in range(s.num_rows):
                drafts = r.spec_token_ids[:j]
                if drafts and seen is not None:
                    seen.add(drafts)  # counted for this row, taken back below
                _plan_row(plan, s.first_row + j, params, seen, banned, vocab_size)
                if drafts and seen is not None:
                    for t in drafts:
                        seen.counts[t] -= 1
                        if not seen.counts[t]:
                            del seen.counts[t]
        return plan

    def _counted(self, req_id: str, history: list[int], num_known: int, num_output: int) -> _Seen:
        num_prompt = num_known - num_output
        seen = self._seen.get(req_id)
        if seen is None or seen.num_prompt != num_prompt or seen.num_known > num_known:
            seen = self._seen[req_id] = _Seen(history, num_prompt, num_known)
        elif seen.num_known < num_known:
            seen.add(history[seen.num_known : num_known])
            seen.num_known = num_known
        return seen


def _plan_row(
    plan: LogitsPlan, row: int, params: SamplingParams, seen: _Seen | None, banned: tuple[int, ...], vocab_size: int
) -> None:
    """Add one row's entries: every token it changes, once. The penalties alone (the common case) take C-speed list
    building over the counts; a bias or a ban merges through a dict."""
    if seen is not None and not banned and not params.logit_bias:
        _plan_penalties(plan, row, params, seen)
        return
    entries: dict[int, list[float]] = {}  # token -> [before, rep, after]
    if seen is not None:
        rp, freq, pres = params.repetition_penalty, params.frequency_penalty, params.presence_penalty
        for t, c in seen.counts.items():
            entries[t] = [0.0, rp, freq * c + pres]
        if rp != 1.0:
            for t in seen.prompt:
                if t not in entries:
                    entries[t] = [0.0, rp, 0.0]
    for t, bias in params.logit_bias:
        entry = entries.get(t)
        if entry is None:
            entries[t] = [bias, 1.0, 0.0]
        else:
            entry[0] = bias
    for t in banned:
        entry = entries.get(t)
        if entry is None:
            entries[t] = [NEG_INF, 1.0, 0.0]
        else:
            entry[0] = NEG_INF
    for t, (before, rep, after) in entries.items():
        if 0 <= t < vocab_size and (before or rep != 1.0 or after):
            plan.rows.append(row)
            plan.token_ids.append(t)
            plan.before.append(before)
            plan.rep.append(rep)
            plan.after.append(after)


def _plan_penalties(plan: LogitsPlan, row: int, params: SamplingParams, seen: _Seen) -> None:
    """The penalties' entries: every output token, then (with a repetition penalty) the prompt's others. Their ids
    are the request's own tokens, inside the vocabulary (the prompt's checked, the output's sampled)."""
    rp, freq, pres = params.repetition_penalty, params.frequency_penalty, params.presence_penalty
    counts = seen.counts
    num = len(counts)
    plan.token_ids.extend(counts)
    plan.after.extend([freq * c + pres for c in counts.values()])
    if rp != 1.0:
        prompt_only = seen.prompt.difference(counts)
        plan.token_ids.extend(prompt_only)
        plan.after.extend([0.0] * len(prompt_only))
        num += len(prompt_only)
    plan.rows.extend([row] * num)
    plan.before.extend([0.0] * num)
    plan.rep.extend([rp] * num)
