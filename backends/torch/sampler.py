"""Token sampling for one step: logits processing, greedy, temperature, min-p, top-k, top-p, per-request seeds,
logprobs.

Input is fp32 logits [S, V], one row per token to sample (a request verifying k drafts owns k+1
consecutive rows). Everything stays on the device until the single ``.tolist()`` of the sampled
ids (plus one for the logprobs of rows that asked for them).

Sampling inverts each row's CDF at one uniform draw. A seeded request draws its uniform from its
own ``torch.Generator`` (created from ``seed`` on first use, kept per req_id, dropped when the
request finishes), so its tokens depend only on its own history, never on the other requests in
the batch.

Before anything else, the step's LogitsPlan (penalties, logit_bias, min_tokens' ban: backends/logits_adjust.py)
is applied to a copy of the logits, in one gather and one scatter; greedy rows take the argmax of that copy. After
temperature, min_p drops a row's tokens less likely than min_p times its most likely one.

Reported logprobs are those of the model's distribution (log_softmax of the raw logits, before
any processing, temperature, min-p, top-k / top-p), like vLLM's default.
"""

from __future__ import annotations

import torch

from backends.logits_adjust import LogitsAdjuster, LogitsPlan
from backends.sample_slots import SamplerOutput
from engine.batch import TokenLogprob
from engine.sampling_params import SamplingParams


def apply_logits_plan(logits: torch.Tensor, plan: LogitsPlan) -> torch.Tensor:
    """A copy of ``logits`` [S, V] with ``plan`` applied (backends/logits_adjust.py's formula)."""
    out = logits.clone()
    dev, dtype = logits.device, logits.dtype
    if plan.chunks:
        rows, cols, before, rep, after = (None if a is None else torch.from_numpy(a).to(dev) for a in plan.arrays())
        v = out[rows, cols]
        if before is not None:
            v += before.to(dtype)
        if rep is not None:
            rep = rep.to(dtype)
            v = torch.where(v > 0, v / rep, v * rep)
        out[rows, cols] = v - after.to(dtype)
    banned = plan.allowed_mask(*out.shape)
    if banned is not None:
        out.masked_fill_(torch.from_numpy(banned).to(dev), float("-inf"))
    return out


def apply_min_p(x: torch.Tensor, min_p: torch.Tensor) -> torch.Tensor:
    """``x`` [S, V] (temperature applied) with each row's tokens below ``min_p`` [S] times its most likely token's
    probability masked (0: nothing masked; the most likely token always survives)."""
    probs = x.softmax(dim=-1)
    floor = probs.amax(dim=-1, keepdim=True) * min_p[:, None]
    return x.masked_fill(probs < floor, float("-inf"))


def _mask_sorted(sorted_logits: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Mask descending-sorted logits [S, C] beyond rank top_k [S] (>= 1), then outside the top-p
    nucleus of the renormalised rest. The most likely token always survives."""
    ranks = torch.arange(sorted_logits.shape[-1], device=sorted_logits.device)
    sorted_logits = sorted_logits.masked_fill(ranks[None, :] >= top_k[:, None], float("-inf"))
    probs = sorted_logits.softmax(dim=-1)
    mass_before = probs.cumsum(dim=-1) - probs  # probability of strictly more likely tokens
    return sorted_logits.masked_fill(mass_before >= top_p[:, None], float("-inf"))


def apply_top_k_top_p(
    logits: torch.Tensor, top_k: list[int], top_p: list[float], num_candidates: int = 256
) -> torch.Tensor:
    """Mask logits [S, V] outside each row's top-k (0 = off), then outside its top-p nucleus.

    Works on the top ``C = max(num_candidates, max top_k)`` logits of each row (a partial topk,
    not a full vocabulary sort: ~20x cheaper). That is exact whenever the row's kept set lies in its
    candidates: always with top_k > 0; with top-p alone when the candidates hold >= top_p of the
    mass; the few rows where they do not are re-done with a full sort (one host read of a flag).
    """
    num_rows, vocab = logits.shape
    dev = logits.device
    ks = [k if 0 < k < vocab else 0 for k in top_k]
    c = min(vocab, max(num_candidates, *ks))
    k_t = torch.tensor([k or c for k in ks], dtype=torch.int64, device=dev)
    p_t = torch.tensor(top_p, dtype=torch.float32, device=dev)
    values, order = logits.topk(c, dim=-1)  # [S, C], descending
    out = torch.full_like(logits, float("-inf")).scatter_(-1, order, _mask_sorted(values, k_t, p_t))

    p_only = [i for i in range(num_rows) if ks[i] == 0 and top_p[i] < 1.0 and c < vocab]
    if p_only:
        rows = torch.tensor(p_only, device=dev)
        mass = (values[rows].logsumexp(-1) - logits[rows].logsumexp(-1)).exp()  # candidates' share
        short = rows[mass < p_t[rows]]
        if short.numel():
            sorted_logits, full_order = logits[short].sort(dim=-1, descending=True)
            masked = _mask_sorted(sorted_logits, torch.full_like(short, vocab), p_t[short])
            out[short] = torch.empty_like(sorted_logits).scatter_(-1, full_order, masked)
    untouched = [i for i in range(num_rows) if ks[i] == 0 and top_p[i] >= 1.0]
    if untouched:
        rows = torch.tensor(untouched, device=dev)
        out[rows] = logits[rows]
    return out


class Sampler:
    def __init__(self, device: torch.device, seed: int = 0) -> None:
        self.device = device
        self._rng = torch.Generator(device=device)  # unseeded requests share it
        self._rng.manual_seed(seed)
        self._generators: dict[str, torch.Generator] = {}
        self.adjuster = LogitsAdjuster()  # the penalised requests' counts (backends/logits_adjust.py)

    def drop(self, req_ids: list[str]) -> None:
        for req_id in req_ids:
            self._generators.pop(req_id, None)
        self.adjuster.drop(req_ids)

    def _generator(self, req_id: str, seed: int) -> torch.Generator:
        g = self._generators.get(req_id)
        if g is None:
            g = torch.Generator(device=self.device)
            g.manual_seed(seed)
            self._generators[req_id] = g
        return g

    def target_probs(self, logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
        """The distribution one non-greedy request samples from: softmax of logits [S, V] after
        temperature, top-k and top-p (the same processing as ``sample``)."""
        x = logits / params.temperature
        if params.top_k > 0 or params.top_p < 1.0:
            n = x.shape[0]
            x = apply_top_k_top_p(x, [params.top_k] * n, [params.top_p] * n)
        return x.softmax(dim=-1)

    def uniforms(self, num: int, req_id: str, params: SamplingParams) -> torch.Tensor:
        """``num`` uniform draws in [0, 1) for one request: from its own generator when seeded."""
        if params.seed is not None:
            return torch.rand(num, generator=self._generator(req_id, params.seed), device=self.device)
        return torch.rand(num, generator=self._rng, device=self.device)

    def sample(
        self,
        logits: torch.Tensor,
        req_ids: list[str],
        params: list[SamplingParams],
        plan: LogitsPlan | None = None,
    ) -> SamplerOutput:
        """logits [S, V] fp32; req_ids/params: one per row; ``plan``: the step's logits processing, if any."""
        num_rows, vocab = logits.shape
        raw = logits  # what the logprobs report
        if plan is not None and not plan.empty:
            logits = apply_logits_plan(logits, plan)
        greedy_ids = logits.argmax(dim=-1)  # [S]
        if all(p.greedy for p in params):
            ids = greedy_ids
        else:
            dev = logits.device
            temps = torch.tensor([p.temperature if not p.greedy else 1.0 for p in params], device=dev)
            x = logits / temps[:, None]
            if any(p.min_p > 0.0 and not p.greedy for p in params):
                x = apply_min_p(x, torch.tensor([0.0 if p.greedy else p.min_p for p in params], device=dev))
            if any(p.top_k > 0 or p.top_p < 1.0 for p in params):
                x = apply_top_k_top_p(x, [p.top_k for p in params], [p.top_p for p in params])
            probs = x.softmax(dim=-1)  # [S, V]
            # inverse CDF: one uniform per row; seeded rows draw theirs from their own generator
            u = torch.rand(num_rows, generator=self._rng, device=dev)
            for row, (req_id, p) in enumerate(zip(req_ids, params)):
                if p.seed is not None and not p.greedy:
                    u[row : row + 1].uniform_(generator=self._generator(req_id, p.seed))
            cdf = probs.cumsum(dim=-1)  # [S, V]
            sampled = torch.searchsorted(cdf, (u * cdf[:, -1])[:, None], right=True)[:, 0].clamp_max_(vocab - 1)
            # float round-off at the very top of the CDF could land on a masked token: take argmax
            ok = probs.gather(1, sampled[:, None])[:, 0] > 0
            sampled = torch.where(ok, sampled, probs.argmax(dim=-1))
            is_greedy = torch.tensor([p.greedy for p in params], device=dev)
            ids = torch.where(is_greedy, greedy_ids, sampled)

        want = [row for row, p in enumerate(params) if p.logprobs is not None]
        token_ids = ids.tolist()
        logprobs: list[TokenLogprob | None] = [None] * num_rows
        if want:
            rows = torch.tensor(want, device=logits.device)
            lp = raw.index_select(0, rows).log_softmax(dim=-1)  # [W, V]
            chosen = lp.gather(1, ids.index_select(0, rows)[:, None])[:, 0]  # [W]
            n_top = max(params[r].logprobs for r in want)
            top_lp, top_ids = lp.topk(n_top, dim=-1) if n_top else (lp[:, :0], lp[:, :0].long())
            chosen_l, top_lp_l, top_ids_l = chosen.tolist(), top_lp.tolist(), top_ids.tolist()
            for i, row in enumerate(want):
                n = params[row].logprobs
                top = list(zip(top_ids_l[i][:n], top_lp_l[i][:n]))
                logprobs[row] = TokenLogprob(token_id=token_ids[row], logprob=chosen_l[i], top=top)
        return SamplerOutput(token_ids=token_ids, logprobs=logprobs)
