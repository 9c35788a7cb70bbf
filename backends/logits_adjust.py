"""The logits processing a request's SamplingParams asks for, planned in pure Python for every backend's sampler.

Penalties, ``logit_bias`` and ``min_tokens``' ban touch few of a row's V logits, so a step's processing is a sparse
plan: one entry per (row, token) it changes, merged so that a pair appears once. A backend applies it in one gather,
a few elementwise operations and one scatter on the device (backends/torch/sampler.py, backends/jax/sampler.py)::

    v = logits[row, token] + before        logit_bias (or -inf: a banned token, min_tokens not reached)
    v = v / rep if v > 0 else v * rep      repetition_penalty where the token is in the prompt or the output, else 1
    v = v - after                          frequency_penalty * count + presence_penalty, for the output's tokens
    logits[row, token] = v

and, for a row whose request gives ``allowed_token_ids``, every other token's logit set to -inf (``allowed_mask``);
so too, for a row whose thinking budget forces a token (engine/thinking_budget.py), every token but that one;
so too, for a row whose request has a structured-output grammar (backends/grammar.py), every token the grammar does
not allow next. The grammar is advanced here, at plan time, by the output tokens it has not consumed yet.

That is the order of vLLM's V1 sampler, as its docstring lists the steps (vllm/v1/sample/sampler.py): the logits
processors that can change a greedy pick (min_tokens, logit_bias), then the penalties, repetition, frequency and
presence (vllm/v1/sample/ops/penalties.py; OpenAI's formula ``logit - count * frequency_penalty - (count > 0) *
presence_penalty``). Temperature, min_p, top-k and top-p follow in the sampler. The processed logits are sampled
from; reported logprobs stay the raw ones (vLLM's default ``raw_logprobs``).

A penalised request's table (its distinct tokens and their output counts, as numpy arrays, the prompt's tokens
among them with count 0 when a repetition penalty reads them) is kept per req_id and advanced by the tokens that came
since its last step: O(new tokens) per step in Python, the row's entries then a few vectorised operations over the
table, not a Python loop over the history. It is rebuilt when the history does not continue the one counted (a
request resumed under the same id), and dropped with the sampler's per-request state when the request finishes.
Ids past the vocabulary (a stop token id a client gave) are skipped: the engine refuses a ``logit_bias`` id past it
before it gets here (engine/llm_engine.py), and no id may index past a row.

Rows after a slot's first (the drafts of a speculated request) get the same processing, their drafts counted as
output, computed afresh from the history (the table is left as it was). The engine does not propose drafts for
requests that process their logits (engine/spec/speculator.py), so that case is the fallback, not the path.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from backends.sample_slots import SampleSlot
from engine.batch import LogitsInputs
from engine.sampling_params import SamplingParams
from engine.structured_output import Grammar

NEG_INF = float("-inf")
_Chunk = tuple[int, np.ndarray, "np.ndarray | None", "np.ndarray | float", np.ndarray]  # row, ids, before, rep, after


@dataclass(slots=True)
class LogitsPlan:
    """One step's sparse processing: entry e changes ``logits[rows[e], token_ids[e]]`` (module docstring). Built in
    chunks, one per row, each a row's token ids with their ``after`` (and ``before``, ``rep`` where not 0 and 1)."""

    chunks: list[_Chunk] = field(default_factory=list)
    allowed: list[tuple[int, np.ndarray]] = field(default_factory=list)  # (row, the only ids it may sample)
    grammar: list[tuple[int, np.ndarray]] = field(default_factory=list)  # (row, bool [V]: what its grammar bans)

    def __len__(self) -> int:
        """The entries (an allowed set is not counted: ``empty`` says whether there is anything to do)."""
        return sum(len(chunk[1]) for chunk in self.chunks)

    @property
    def empty(self) -> bool:
        return not self.chunks and not self.allowed and not self.grammar

    def allowed_mask(self, num_rows: int, vocab_size: int) -> np.ndarray | None:
        """Boolean [num_rows, vocab_size], True where a row with an allowed set or a grammar may not sample; None
        without either."""
        if not self.allowed and not self.grammar:
            return None
        banned = np.zeros((num_rows, vocab_size), dtype=bool)
        for row, ids in self.allowed:
            banned[row] = True
            banned[row, ids] = False
        for row, grammar_banned in self.grammar:
            banned[row] |= grammar_banned[:vocab_size]
        return banned

    def add(
        self,
        row: int,
        token_ids: np.ndarray,
        after: np.ndarray,
        rep: np.ndarray | float = 1.0,
        before: np.ndarray | None = None,
    ) -> None:
        """A row's entries; ``rep`` one factor for them all (a number, an int too) or one each."""
        if len(token_ids):
            self.chunks.append((row, token_ids, before, rep if isinstance(rep, np.ndarray) else float(rep), after))

    @property
    def has_before(self) -> bool:
        """Some entry's ``before`` is not 0 (a bias, a ban)."""
        return any(chunk[2] is not None for chunk in self.chunks)

    @property
    def has_rep(self) -> bool:
        """Some entry's ``rep`` is not 1."""
        return any(not isinstance(chunk[3], float) or chunk[3] != 1.0 for chunk in self.chunks)

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None, np.ndarray]:
        """(rows, token_ids) as int64, (before, rep, after) as float32 arrays, ``before`` and ``rep`` None where they
        change nothing: what a backend uploads, one array each."""
        if not self.chunks:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty, None, None, np.zeros(0, dtype=np.float32)
        sizes = [len(chunk[1]) for chunk in self.chunks]
        rows = np.repeat(np.array([chunk[0] for chunk in self.chunks], dtype=np.int64), sizes)
        token_ids = np.concatenate([chunk[1] for chunk in self.chunks]).astype(np.int64, copy=False)
        after = np.concatenate([chunk[4] for chunk in self.chunks]).astype(np.float32, copy=False)
        before = rep = None
        if self.has_before:
            parts = [np.zeros(n) if c[2] is None else c[2] for c, n in zip(self.chunks, sizes)]
            before = np.concatenate(parts).astype(np.float32, copy=False)
        if self.has_rep:
            parts = [np.full(n, c[3]) if isinstance(c[3], float) else c[3] for c, n in zip(self.chunks, sizes)]
            rep = np.concatenate(parts).astype(np.float32, copy=False)
        return rows, token_ids, before, rep, after


class _Seen:
    """One penalised request's table: ``tokens[:size]`` its distinct ids (the prompt's among them, count 0, where a
    repetition penalty reads them), ``counts[:size]`` their counts in the output; ``at`` an id's position."""

    __slots__ = ("at", "counts", "num_known", "num_prompt", "size", "tokens")

    def __init__(self, history: list[int], num_prompt: int, num_known: int, with_prompt: bool) -> None:
        self.num_prompt = num_prompt
        self.num_known = num_known
        counts = Counter(history[num_prompt:num_known])
        if with_prompt:
            for t in set(history[:num_prompt]).difference(counts):
                counts[t] = 0
        self.at = {t: i for i, t in enumerate(counts)}
        self.size = len(counts)
        room = max(64, 2 * self.size)
        self.tokens = np.zeros(room, dtype=np.int64)
        self.counts = np.zeros(room, dtype=np.int64)
        self.tokens[: self.size] = list(counts)
        self.counts[: self.size] = list(counts.values())

    def add(self, token_ids: Iterable[int]) -> None:
        at = self.at
        for t in token_ids:
            i = at.get(t)
            if i is None:
                i = at[t] = self.size
                if i == len(self.tokens):
                    self.tokens = np.concatenate([self.tokens, np.zeros_like(self.tokens)])
                    self.counts = np.concatenate([self.counts, np.zeros_like(self.counts)])
                self.tokens[i] = t
                self.size = i + 1
            self.counts[i] += 1


class LogitsAdjuster:
    """Plans each step's processing (``plan``) and keeps each penalised request's table until ``drop``."""

    def __init__(self) -> None:
        self._seen: dict[str, _Seen] = {}
        self._allowed: dict[str, np.ndarray] = {}  # a request's allowed ids (within the vocabulary), made once

    def __len__(self) -> int:
        return len(self._seen) + len(self._allowed)

    def drop(self, req_ids: Iterable[str]) -> None:
        for req_id in req_ids:
            self._seen.pop(req_id, None)
            self._allowed.pop(req_id, None)

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
            banned = () if inputs is None else inputs.banned_token_ids
            history = None if inputs is None or not params.penalizes else inputs.history
            grammar = None if inputs is None else inputs.grammar
            forced = None if inputs is None else inputs.forced_token_id
            rest = history is not None or banned or params.logit_bias or params.allowed_token_ids
            rest = rest or forced is not None
            if grammar is None and not rest:
                continue  # min_p alone: the sampler's
            if plan is None:
                plan = LogitsPlan()
            if grammar is not None:
                _plan_grammar(plan, s, grammar, inputs, vocab_size)
                if not rest:
                    continue
            if params.allowed_token_ids:
                allowed = self._allowed.get(r.req_id)
                if allowed is None:
                    ids = np.fromiter(params.allowed_token_ids, np.int64, len(params.allowed_token_ids))
                    allowed = self._allowed[r.req_id] = ids[ids < vocab_size]
                plan.allowed.extend((s.first_row + j, allowed) for j in range(s.num_rows))
            if forced is not None and forced < vocab_size:  # after the allowed set: the forced token wins
                plan.allowed.extend((s.first_row + j, np.array([forced], np.int64)) for j in range(s.num_rows))
            num_known = r.start_pos + len(r.token_ids)
            num_output = r.num_output_tokens + (0 if inputs is None else inputs.num_resumed_tokens)
            if s.num_rows > 1 and history is not None:  # drafts: each row afresh (the fallback, module docstring)
                for j in range(s.num_rows):
                    known = [*history[:num_known], *r.spec_token_ids[:j]]
                    seen = _Seen(known, num_known - num_output, len(known), params.repetition_penalty != 1.0)
                    _plan_row(plan, s.first_row + j, params, seen, banned, vocab_size)
                continue
            seen = None if history is None else self._counted(r.req_id, history, num_known, num_output, params)
            for j in range(s.num_rows):
                _plan_row(plan, s.first_row + j, params, seen, banned, vocab_size)
        return None if plan is None or plan.empty else plan

    def _counted(
        self, req_id: str, history: list[int], num_known: int, num_output: int, params: SamplingParams
    ) -> _Seen:
        num_prompt = num_known - num_output
        seen = self._seen.get(req_id)
        if seen is None or seen.num_prompt != num_prompt or seen.num_known > num_known:
            with_prompt = params.repetition_penalty != 1.0
            seen = self._seen[req_id] = _Seen(history, num_prompt, num_known, with_prompt)
        elif seen.num_known < num_known:
            seen.add(history[seen.num_known : num_known])
            seen.num_known = num_known
        return seen


def _plan_grammar(plan: LogitsPlan, s: SampleSlot, grammar: Grammar, inputs: LogitsInputs, vocab_size: int) -> None:
    """Advance the request's grammar by the output tokens it has not consumed, and ban, in each of its rows, what it
    does not allow next (a draft row: after the drafts before it, on a copy)."""
    r = s.request
    num_known = r.start_pos + len(r.token_ids)
    num_prompt = num_known - r.num_output_tokens - inputs.num_resumed_tokens
    history = inputs.history
    if history is not None and num_prompt + grammar.num_consumed < num_known:
        grammar.advance(history[num_prompt + grammar.num_consumed : num_known])
    plan.grammar.append((s.first_row, grammar.banned(vocab_size)))
    if s.num_rows > 1:
        draft = grammar.copy()
        for j in range(1, s.num_rows):
            draft.advance(r.spec_token_ids[j - 1 : j])
            plan.grammar.append((s.first_row + j, draft.banned(vocab_size)))


def _plan_row(
    plan: LogitsPlan, row: int, params: SamplingParams, seen: _Seen | None, banned: tuple[int, ...], vocab_size: int
) -> None:
    """Add one row's entries, each (row, token) once: the penalties over the request's table (vectorised), with the
    bias and the ban merged in where they name a token of it and added after it where not."""
    extra: dict[int, float] = dict(params.logit_bias)
    for t in banned:
        extra[t] = NEG_INF
    tokens = np.zeros(0, dtype=np.int64)
    after = np.zeros(0)
    before = None
    if seen is not None:
        tokens, counts = seen.tokens[: seen.size].copy(), seen.counts[: seen.size]
        after = params.frequency_penalty * counts + params.presence_penalty * (counts > 0)
        if extra:
            at = seen.at
            for t in [t for t in extra if t in at]:
                if before is None:
                    before = np.zeros(len(tokens))
                before[at[t]] = extra.pop(t)
    rp = params.repetition_penalty if seen is not None else 1.0
    plan.add(row, tokens, after, rp, before)
    extra = {t: b for t, b in extra.items() if 0 <= t < vocab_size and b != 0.0}
    if extra:
        n = len(extra)
        plan.add(row, np.fromiter(extra, np.int64, n), np.zeros(n), 1.0, np.fromiter(extra.values(), np.float64, n))
