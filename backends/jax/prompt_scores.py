"""A step's prompt rows scored on the device (backends/prompt_rows.py) in one jitted program: log-softmax, each
target's logprob and rank, the top MAX_LOGPROBS alternatives; only those small arrays are read back. The row count is
padded to a power of two (padding scores row 0 against token 0 and is dropped), so few shapes compile."""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from backends.jax.buckets import next_pow2
from backends.prompt_rows import PromptRows
from engine.batch import RunnerOutput
from engine.sampling_params import MAX_LOGPROBS


@partial(jax.jit, static_argnames=("k",))
def _score(logits: jax.Array, rows: jax.Array, targets: jax.Array, k: int):
    logprobs = jax.nn.log_softmax(logits[rows].astype(jnp.float32), axis=-1)
    picked = jnp.take_along_axis(logprobs, targets[:, None], axis=1)[:, 0]
    ranks = (logprobs > picked[:, None]).sum(axis=1) + 1
    values, ids = jax.lax.top_k(logprobs, k)
    return picked, ranks, ids, values


def score_prompt_rows(logits: jax.Array, first_row: int, rows: PromptRows, out: RunnerOutput) -> None:
    """``logits`` [R, V]: a program's logits rows, the prompt rows from ``first_row`` on, in ``rows``' order."""
    n = len(rows.logits_rows)
    padded = next_pow2(n)
    row_ids = np.zeros(padded, dtype=np.int32)
    row_ids[:n] = np.arange(first_row, first_row + n)
    targets = np.zeros(padded, dtype=np.int32)
    targets[:n] = rows.targets
    k = MAX_LOGPROBS if rows.num_top else 1
    picked, ranks, ids, values = jax.device_get(_score(logits, row_ids, targets, k=k))
    top_ids = ids[:n].tolist() if rows.num_top else [[] for _ in range(n)]
    top_values = values[:n].tolist() if rows.num_top else [[] for _ in range(n)]
    rows.record(picked[:n].tolist(), ranks[:n].tolist(), top_ids, top_values, out)
