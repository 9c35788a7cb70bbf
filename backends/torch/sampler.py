"""Token sampling for one step: greedy, temperature, top-k, top-p, per-request seeds, logprobs.

Input is fp32 logits [S, V], one row per token to sample (a request verifying k drafts owns k+1
consecutive rows). Everything stays on the device until the single ``.tolist()`` of the sampled
ids (plus one for the logprobs of rows that asked for them).

Sampling uses the exponential race: ``argmax(probs / E)`` with ``E ~ Exp(1)`` i.i.d. draws
exactly from ``probs``. A seeded request draws its ``E`` row from its own ``torch.Generator``
(created from ``seed`` on first use, kept per req_id, dropped when the request finishes), so its
tokens depend only on its own history, never on the other requests in the batch.

Reported logprobs are those of the model's distribution (log_softmax of the raw logits, before
temperature / top-k / top-p), like vLLM's default.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from controlplane.engine.batch import TokenLogprob
from controlplane.engine.sampling_params import SamplingParams


@dataclass(slots=True)
class SamplerOutput:
    token_ids: list[int]  # [S]
    logprobs: list[TokenLogprob | None]  # [S]; None where the row's params did not ask


def apply_top_k_top_p(logits: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Mask logits [S, V] outside each row's top-k (0 = off), then outside its top-p nucleus.

    top-p is taken over the top-k-renormalised distribution and always keeps the most likely token.
    """
    sorted_logits, order = logits.sort(dim=-1, descending=True)  # [S, V]
    vocab = logits.shape[-1]
    k = torch.where(top_k > 0, top_k, vocab)  # [S]
    ranks = torch.arange(vocab, device=logits.device)
    sorted_logits = sorted_logits.masked_fill(ranks[None, :] >= k[:, None], float("-inf"))
    probs = sorted_logits.softmax(dim=-1)
    mass_before = probs.cumsum(dim=-1) - probs  # probability of strictly more likely tokens
    sorted_logits = sorted_logits.masked_fill(mass_before >= top_p[:, None], float("-inf"))
    return torch.empty_like(logits).scatter_(-1, order, sorted_logits)


class Sampler:
    def __init__(self, device: torch.device, seed: int = 0) -> None:
        self.device = device
        self._rng = torch.Generator(device=device)  # unseeded requests share it
        self._rng.manual_seed(seed)
        self._generators: dict[str, torch.Generator] = {}

    def drop(self, req_ids: list[str]) -> None:
        for req_id in req_ids:
            self._generators.pop(req_id, None)

    def _generator(self, req_id: str, seed: int) -> torch.Generator:
        g = self._generators.get(req_id)
        if g is None:
            g = torch.Generator(device=self.device)
            g.manual_seed(seed)
            self._generators[req_id] = g
        return g

    def sample(self, logits: torch.Tensor, req_ids: list[str], params: list[SamplingParams]) -> SamplerOutput:
        """logits [S, V] fp32; req_ids/params: one per row."""
        num_rows = logits.shape[0]
        greedy_ids = logits.argmax(dim=-1)  # [S]
        if all(p.greedy for p in params):
            ids = greedy_ids
        else:
            dev = logits.device
            temps = torch.tensor([p.temperature if not p.greedy else 1.0 for p in params], device=dev)
            x = logits / temps[:, None]
            if any(p.top_k > 0 or p.top_p < 1.0 for p in params):
                top_k = torch.tensor([p.top_k for p in params], dtype=torch.int64, device=dev)
                top_p = torch.tensor([p.top_p for p in params], dtype=torch.float32, device=dev)
                x = apply_top_k_top_p(x, top_k, top_p)
            probs = x.softmax(dim=-1)  # [S, V]
            race = torch.empty_like(probs).exponential_(generator=self._rng)
            for row, (req_id, p) in enumerate(zip(req_ids, params)):
                if p.seed is not None and not p.greedy:
                    race[row].exponential_(generator=self._generator(req_id, p.seed))
            race.clamp_min_(torch.finfo(race.dtype).tiny)  # a zero draw would make 0/0 = NaN
            sampled = (probs / race).argmax(dim=-1)
            is_greedy = torch.tensor([p.greedy for p in params], device=dev)
            ids = torch.where(is_greedy, greedy_ids, sampled)

        want = [row for row, p in enumerate(params) if p.logprobs is not None]
        token_ids = ids.tolist()
        logprobs: list[TokenLogprob | None] = [None] * num_rows
        if want:
            rows = torch.tensor(want, device=logits.device)
            lp = logits.index_select(0, rows).log_softmax(dim=-1)  # [W, V]
            chosen = lp.gather(1, ids.index_select(0, rows)[:, None])[:, 0]  # [W]
            n_top = max(params[r].logprobs for r in want)
            top_lp, top_ids = lp.topk(n_top, dim=-1) if n_top else (lp[:, :0], lp[:, :0].long())
            chosen_l, top_lp_l, top_ids_l = chosen.tolist(), top_lp.tolist(), top_ids.tolist()
            for i, row in enumerate(want):
                n = params[row].logprobs
                top = list(zip(top_ids_l[i][:n], top_lp_l[i][:n]))
                logprobs[row] = TokenLogprob(token_id=token_ids[row], logprob=chosen_l[i], top=top)
        return SamplerOutput(token_ids=token_ids, logprobs=logprobs)
