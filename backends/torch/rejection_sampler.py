"""Verifying sampled drafts exactly: speculative rejection sampling with the residual distribution.

For drafts d_0..d_{k-1} drawn from proposal distributions q_0..q_{k-1} (a draft model's rows), and the
target's distributions p_0..p_k (its logits rows after temperature / top-k / top-p)::

    for j in 0..k-1:   accept d_j with probability min(1, p_j(d_j) / q_j(d_j))
                       on the first rejection emit x ~ norm(max(0, p_j - q_j)) and stop
    all accepted:      emit a bonus token x ~ p_k

Every emitted token is then distributed exactly as the target samples it (Leviathan, Kalman, Matias,
"Fast Inference from Transformers via Speculative Decoding", ICML 2023, Algorithm 1 and Theorem 3.5;
Chen et al., "Accelerating Large Language Model Decoding with Speculative Sampling", 2023, Algorithm 2).
Written from the papers; vLLM's ``vllm/model_executor/layers/rejection_sampler.py`` (v0.6.3) computes the
same quantities batched. When p_j <= q_j everywhere (the residual is empty, p_j = q_j up to round-off),
a rejection can only happen with probability 0; x ~ p_j is then used.

One host read per request (accept flags, the residual samples and the bonus together): every candidate
token is drawn on the device first, then the first rejection picks which to emit.
"""

from __future__ import annotations

import torch


def _sample_rows(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """One token per row of (unnormalised) probs [R, V] by inverting its CDF at u [R]."""
    cdf = probs.cumsum(dim=-1)
    ids = torch.searchsorted(cdf, (u * cdf[:, -1])[:, None], right=True)[:, 0].clamp_max_(probs.shape[-1] - 1)
    # round-off at the top of the CDF could land on a zero-probability token: take the row's argmax then
    ok = probs.gather(1, ids[:, None])[:, 0] > 0
    return torch.where(ok, ids, probs.argmax(dim=-1))


def rejection_sample(
    target_probs: torch.Tensor,  # [k + 1, V] p_0..p_k
    draft_ids: list[int],  # [k]
    draft_probs: torch.Tensor,  # [>= k, V] q_0..q_{k-1}
    uniforms: torch.Tensor,  # [2k + 1]: k acceptance draws, k residual draws, 1 bonus draw
) -> list[int]:
    """The emitted tokens: the accepted drafts, then one residual or bonus token (1..k+1 tokens)."""
    k = len(draft_ids)
    dev = target_probs.device
    q = draft_probs[:k].to(device=dev, dtype=torch.float32)  # [k, V]
    p = target_probs[:k]  # [k, V]
    ids = torch.tensor(draft_ids, dtype=torch.int64, device=dev)[:, None]  # [k, 1]
    p_d = p.gather(1, ids)[:, 0]  # [k]
    q_d = q.gather(1, ids)[:, 0]  # [k]
    # accept iff u < p/q  <=>  u*q < p (no division; q_d > 0 for a token q sampled)
    accept = uniforms[:k] * q_d < p_d  # [k]
    residual = (p - q).clamp_min_(0.0)  # [k, V]
    empty = residual.sum(dim=-1) <= 0
    residual = torch.where(empty[:, None], p, residual)
    candidates = torch.cat(
        [_sample_rows(residual, uniforms[k : 2 * k]), _sample_rows(target_probs[k : k + 1], uniforms[2 * k :])]
    )  # [k + 1]: the residual token at each j, then the bonus
    accept_l, candidates_l = accept.tolist(), candidates.tolist()
    emitted: list[int] = []
    for j in range(k):
        if not accept_l[j]:
            emitted.append(candidates_l[j])
            return emitted
        emitted.append(draft_ids[j])
    emitted.append(candidates_l[k])
    return emitted
