"""Token sampling for one step in jitted jnp: logits processing, greedy, temperature, min-p, top-k, top-p,
per-request seeds, logprobs.

Input is fp32 logits [R, V] on the device, R a row bucket, and the S rows of it to sample (a
request verifying k drafts owns k+1 consecutive rows); the other rows are padding. Everything
stays on the device until the one host read of the sampled ids (plus one for the logprobs of rows
that asked for them).

Sampling inverts each row's CDF at one uniform draw, the method of the torch sampler. The
uniforms are drawn on the host: a seeded request from its own ``numpy`` PCG64 generator (created
from ``seed`` on first use, kept per req_id, dropped when the request finishes), every other row
from the runner's shared generator. A seeded request's tokens therefore depend only on its own
history, never on the other requests in the batch. (The torch and JAX runners draw different
uniforms for the same seed: same seed, same runner -> same tokens; across frameworks only greedy
is token-identical.)

top-k / top-p work on the top ``C`` logits of each row (``lax.top_k``, C = 256, or the next power
of two above the largest top_k): exact whenever the kept set lies in the candidates, i.e. always
with top_k > 0, and with top-p alone when the candidates hold >= top_p of the mass. A row whose
candidates hold less is flagged, and the step is re-sampled with C = V (a full sort), with the same
uniforms.

The step's LogitsPlan (penalties, logit_bias, min_tokens' ban: backends/logits_adjust.py) is applied first, as
the torch sampler does: on an accelerator in one jitted gather and scatter whose entry count is padded to a power of
two, at least 1,024 (padding entries name row R, out of bounds, and are dropped by the scatter), so a new plan size
seldom compiles anew; on a CPU device in numpy, compiling nothing.
min_p follows temperature, as in the torch sampler.

Reported logprobs are those of the model's distribution (log_softmax of the raw logits, before
any processing, temperature / min-p / top-k / top-p), like vLLM's default and the torch sampler.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from backends.jax.buckets import next_pow2
from backends.logits_adjust import LogitsAdjuster, LogitsPlan
from backends.sample_slots import SamplerOutput
from engine.batch import TokenLogprob
from engine.sampling_params import MAX_LOGPROBS, SamplingParams

NUM_CANDIDATES = 256
MIN_PLAN_BUCKET = 1024  # the smallest padded plan size of the jitted path (apply_logits_plan_jit)


@jax.jit
def _argmax(logits: jax.Array) -> jax.Array:
    return jnp.argmax(logits, axis=-1)


def _greedy(logits: jax.Array) -> jax.Array | np.ndarray:
    """Row argmax. On a CPU device numpy's (the logits are read in place) is ~20x cheaper than XLA's
    variadic-reduce argmax (0.3 vs 7 ms CPU for [32, 49152] fp32); both pick the first maximum."""
    if all(d.platform == "cpu" for d in logits.devices()):
        return np.asarray(logits).argmax(axis=-1).astype(np.int32)
    return _argmax(logits)


def _inverse_cdf(probs: jax.Array, u: jax.Array) -> jax.Array:
    """Index of the first CDF entry > u * total, per row (torch.searchsorted(..., right=True))."""
    cdf = jnp.cumsum(probs, axis=-1)
    target = u * cdf[:, -1]
    idx = jnp.sum(cdf <= target[:, None], axis=-1)
    return jnp.minimum(idx, probs.shape[-1] - 1)


@jax.jit
def _apply_plan(
    logits: jax.Array, rows: jax.Array, cols: jax.Array, before: jax.Array, rep: jax.Array, after: jax.Array
) -> jax.Array:
    """``logits`` [R, V] with a LogitsPlan's entries applied (padding entries: row R, dropped)."""
    v = logits.at[rows, cols].get(mode="fill", fill_value=0.0) + before
    v = jnp.where(v > 0, v / rep, v * rep) - after
    return logits.at[rows, cols].set(v, mode="drop")


def apply_logits_plan(logits: jax.Array, plan: LogitsPlan) -> jax.Array:
    """A processed copy of ``logits`` [R, V] (backends/logits_adjust.py's formula): on a CPU device in numpy (the
    logits are host memory already, and a jitted scatter compiles anew for every row bucket and plan size, ~0.1-0.2 s
    each, a stall in the step that meets it); elsewhere jitted (``apply_logits_plan_jit``)."""
    if not all(d.platform == "cpu" for d in logits.devices()):
        return apply_logits_plan_jit(logits, plan)
    out = np.array(logits)  # a writable copy
    if plan.chunks:
        rows, cols, before, rep, after = plan.arrays()
        v = out[rows, cols]
        if before is not None:
            v += before
        if rep is not None:
            v = np.where(v > 0, v / rep, v * rep)
        out[rows, cols] = v - after
    banned = plan.allowed_mask(*out.shape)
    if banned is not None:
        out[banned] = -np.inf
    return jnp.asarray(out)


def apply_logits_plan_jit(logits: jax.Array, plan: LogitsPlan) -> jax.Array:
    """``apply_logits_plan`` on the device, its entries padded to a power of two (at least MIN_PLAN_BUCKET) so that
    few plan sizes compile."""
    banned = plan.allowed_mask(*logits.shape)
    if banned is not None:
        logits = jnp.where(jnp.asarray(banned), -jnp.inf, logits)
    if not plan.chunks:
        return logits
    n, size = len(plan), max(next_pow2(len(plan)), MIN_PLAN_BUCKET)
    rows = np.full(size, logits.shape[0], dtype=np.int32)
    cols = np.zeros(size, dtype=np.int32)
    before, after, rep = np.zeros(size, np.float32), np.zeros(size, np.float32), np.ones(size, np.float32)
    plan_rows, plan_cols, plan_before, plan_rep, after[:n] = plan.arrays()
    rows[:n], cols[:n] = plan_rows, plan_cols
    if plan_before is not None:
        before[:n] = plan_before
    if plan_rep is not None:
        rep[:n] = plan_rep
    return _apply_plan(logits, rows, cols, before, rep, after)


@partial(jax.jit, static_argnames=("num_candidates",))
def _sample_random(
    logits: jax.Array,  # [R, V] fp32
    temperature: jax.Array,  # [R] (0 = greedy)
    top_k: jax.Array,  # [R] int32 (0 = off)
    top_p: jax.Array,  # [R] (1 = off)
    u: jax.Array,  # [R] uniforms in [0, 1)
    min_p: jax.Array,  # [R] (0 = off)
    *,
    num_candidates: int,
) -> tuple[jax.Array, jax.Array]:
    """-> (token ids [R], rows whose top-p nucleus may extend past the candidates [R] bool)."""
    greedy = temperature == 0
    x = logits / jnp.where(greedy, 1.0, temperature)[:, None]
    p_x = jax.nn.softmax(x, axis=-1)  # min_p: below min_p times the most likely token's probability, dropped
    x = jnp.where(p_x < jnp.max(p_x, axis=-1, keepdims=True) * min_p[:, None], -jnp.inf, x)

    # plain temperature sampling over the whole vocabulary
    probs = jax.nn.softmax(x, axis=-1)
    full_ids = _inverse_cdf(probs, u)
    full_ok = jnp.take_along_axis(probs, full_ids[:, None], axis=-1)[:, 0] > 0

    # top-k then top-p over the C most likely tokens (descending)
    raw_values, order = jax.lax.top_k(x, num_candidates)  # [R, C]
    ranks = jnp.arange(num_candidates)[None, :]
    k = jnp.where(top_k > 0, jnp.minimum(top_k, num_candidates), num_candidates)
    values = jnp.where(ranks < k[:, None], raw_values, -jnp.inf)
    p = jax.nn.softmax(values, axis=-1)
    mass_before = jnp.cumsum(p, axis=-1) - p  # probability of strictly more likely candidates
    values = jnp.where(mass_before >= top_p[:, None], -jnp.inf, values)  # rank 0 always survives
    cand_probs = jax.nn.softmax(values, axis=-1)
    cand = _inverse_cdf(cand_probs, u)
    cand_ok = jnp.take_along_axis(cand_probs, cand[:, None], axis=-1)[:, 0] > 0
    cand = jnp.where(cand_ok, cand, 0)  # round-off at the top of the CDF: take the most likely
    cand_ids = jnp.take_along_axis(order, cand[:, None], axis=-1)[:, 0]

    truncated = (top_k > 0) | (top_p < 1)
    ids = jnp.where(truncated, cand_ids, jnp.where(full_ok, full_ids, jnp.argmax(probs, axis=-1)))
    ids = jnp.where(greedy, jnp.argmax(logits, axis=-1), ids)
    cand_mass = jnp.exp(jax.nn.logsumexp(raw_values, axis=-1) - jax.nn.logsumexp(x, axis=-1))
    short = ~greedy & (top_k == 0) & (top_p < 1) & (cand_mass < top_p) & (num_candidates < logits.shape[-1])
    return ids, short


@jax.jit
def _logprobs(logits: jax.Array, ids: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """-> (logprob of ids [R], top MAX_LOGPROBS logprobs [R, K], their token ids [R, K])."""
    lp = jax.nn.log_softmax(logits, axis=-1)
    chosen = jnp.take_along_axis(lp, ids[:, None], axis=-1)[:, 0]
    top_lp, top_ids = jax.lax.top_k(lp, MAX_LOGPROBS)
    return chosen, top_lp, top_ids


class Sampler:
    def __init__(self, seed: int = 0) -> None:
        self._rng = np.random.Generator(np.random.PCG64(seed))  # unseeded requests share it
        self._generators: dict[str, np.random.Generator] = {}
        self.adjuster = LogitsAdjuster()  # the penalised requests' counts (backends/logits_adjust.py)

    def drop(self, req_ids: list[str]) -> None:
        for req_id in req_ids:
            self._generators.pop(req_id, None)
        self.adjuster.drop(req_ids)

    def _generator(self, req_id: str, seed: int) -> np.random.Generator:
        g = self._generators.get(req_id)
        if g is None:
            g = np.random.Generator(np.random.PCG64(seed))
            self._generators[req_id] = g
        return g

    def sample(
        self,
        logits: jax.Array,
        rows: list[int],
        req_ids: list[str],
        params: list[SamplingParams],
        plan: LogitsPlan | None = None,
    ) -> SamplerOutput:
        """logits [R, V] fp32 (a padded bucket); rows: the S logits rows to sample; req_ids/params: one per row;
        ``plan``: the step's logits processing (its rows index ``logits``), if any."""
        num_padded, vocab = logits.shape
        raw = logits  # what the logprobs report
        if plan is not None and not plan.empty:
            logits = apply_logits_plan(logits, plan)
        if all(p.greedy for p in params):
            ids_dev = _greedy(logits)
        else:
            temperature = np.zeros(num_padded, dtype=np.float32)  # 0: greedy (and the padded rows)
            top_k = np.zeros(num_padded, dtype=np.int32)
            top_p = np.ones(num_padded, dtype=np.float32)
            u = np.zeros(num_padded, dtype=np.float32)
            min_p = np.zeros(num_padded, dtype=np.float32)
            for row, req_id, p in zip(rows, req_ids, params):
                temperature[row] = p.temperature
                top_k[row] = p.top_k
                top_p[row] = p.top_p
                min_p[row] = p.min_p
                if not p.greedy:
                    g = self._rng if p.seed is None else self._generator(req_id, p.seed)
                    u[row] = g.random()
            num_candidates = min(vocab, max(NUM_CANDIDATES, next_pow2(int(top_k.max()))))
            ids_dev, short = _sample_random(logits, temperature, top_k, top_p, u, min_p, num_candidates=num_candidates)
            if bool(np.asarray(short).any()):
                ids_dev, _ = _sample_random(logits, temperature, top_k, top_p, u, min_p, num_candidates=vocab)
        ids = np.asarray(ids_dev)
        token_ids = ids[rows].tolist()

        logprobs: list[TokenLogprob | None] = [None] * len(rows)
        want = [i for i, p in enumerate(params) if p.logprobs is not None]
        if want:
            chosen, top_lp, top_ids = (np.asarray(a) for a in _logprobs(raw, ids_dev))
            for i in want:
                row, n = rows[i], params[i].logprobs
                top = list(zip(top_ids[row, :n].tolist(), top_lp[row, :n].tolist()))
                logprobs[i] = TokenLogprob(token_id=token_ids[i], logprob=float(chosen[row]), top=top)
        return SamplerOutput(token_ids=token_ids, logprobs=logprobs)
