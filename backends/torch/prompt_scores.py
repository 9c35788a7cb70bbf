"""A step's prompt rows scored on the device (backends/prompt_rows.py): log-softmax, each target's logprob and rank,
the top alternatives; only those small lists leave the device."""

from __future__ import annotations

import torch

from backends.prompt_rows import PromptRows
from engine.batch import RunnerOutput


def score_prompt_rows(logits: torch.Tensor, rows: PromptRows, out: RunnerOutput) -> None:
    """``logits`` [P, V]: the prompt rows' logits, in ``rows``' order."""
    logprobs = logits.float().log_softmax(dim=-1)
    targets = torch.tensor(rows.targets, device=logprobs.device)
    picked = logprobs.gather(1, targets[:, None])[:, 0]
    ranks = (logprobs > picked[:, None]).sum(dim=1) + 1
    k = rows.num_top
    if k:
        values, ids = logprobs.topk(k, dim=-1)
        top_ids, top_values = ids.tolist(), values.tolist()
    else:
        top_ids = top_values = [[] for _ in rows.targets]
    rows.record(picked.tolist(), ranks.tolist(), top_ids, top_values, out)
