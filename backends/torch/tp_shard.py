"""Tensor-parallel sharding of a Llama decoder: which slice of each weight a rank holds.

Megatron-LM's layout (Shoeybi et al. 2019, "Megatron-LM", section 3; vLLM's
``vllm/model_executor/layers/linear.py`` ``ColumnParallelLinear`` / ``RowParallelLinear`` do the same):
a pair of matmuls is split so that only one all-reduce per pair is needed::

    attention   q, k, v   column-parallel: rank r holds heads [r*H/N, (r+1)*H/N) and KV heads
                                           [r*Hkv/N, (r+1)*Hkv/N) -> attention runs on local heads only
                o         row-parallel:    rank r holds the input columns of its heads; its product is a
                                           partial sum of the output -> all-reduce, then + residual
    MLP         gate, up  column-parallel: rank r holds intermediate rows [r*I/N, (r+1)*I/N)
                down      row-parallel:    the matching input columns -> all-reduce, then + residual

Embedding, norms and the output head are replicated (every rank computes the same logits from the same
reduced hidden state). The KV cache of a rank holds its KV heads only, so a block costs 1/N of its TP=1
bytes on each rank. GQA needs whole KV heads per rank: ``num_key_value_heads % N == 0`` (and then
``num_attention_heads % N == 0`` follows from the GQA ratio); ``shard_config`` refuses otherwise.
SmolLM2-135M (9 heads, 3 KV heads) therefore shards over N = 3, not 2.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Iterator
from typing import Any

_LAYER = re.compile(r"model\.layers\.(\d+)\.(.+)")


def check_tp_size(config: Any, tp_size: int) -> None:
    """Raise ValueError with the reason when ``config`` cannot be split over ``tp_size`` ranks."""
    if isinstance(tp_size, bool) or not isinstance(tp_size, int) or tp_size < 1:
        raise ValueError(f"tp size must be a positive int, got {tp_size!r}")
    problems = []
    if config.num_key_value_heads % tp_size:
        problems.append(f"num_key_value_heads {config.num_key_value_heads} is not a multiple of tp {tp_size}")
    if config.num_attention_heads % tp_size:
        problems.append(f"num_attention_heads {config.num_attention_heads} is not a multiple of tp {tp_size}")
    if config.intermediate_size % tp_size:
        problems.append(f"intermediate_size {config.intermediate_size} is not a multiple of tp {tp_size}")
    if problems:
        name = getattr(config, "name", "model")
        raise ValueError(f"{name} cannot be split over tp={tp_size}: " + "; ".join(problems))


def shard_config(config: Any, tp_size: int) -> Any:
    """The config one rank's layers are built from: local heads, KV heads and MLP width."""
    check_tp_size(config, tp_size)
    if tp_size == 1:
        return config
    return dataclasses.replace(
        config,
        num_attention_heads=config.num_attention_heads // tp_size,
        num_key_value_heads=config.num_key_value_heads // tp_size,
        intermediate_size=config.intermediate_size // tp_size,
    )


def _rows(value: Any, start: int, stop: int) -> Any:
    return value[start:stop]


def _cols(value: Any, start: int, stop: int) -> Any:
    return value[:, start:stop]


def shard_tensor(config: Any, name: str, value: Any, tp_rank: int, tp_size: int) -> Any:
    """Rank ``tp_rank``'s slice of the full HF-named tensor ``value`` ([out, in] layout; numpy or torch)."""
    if tp_size == 1:
        return value
    m = _LAYER.fullmatch(name)
    if m is None:
        return value  # embedding, final norm, output head: replicated
    d = config.head_dim
    q = config.num_attention_heads // tp_size * d
    kv = config.num_key_value_heads // tp_size * d
    inter = config.intermediate_size // tp_size
    r = tp_rank
    split = {
        "self_attn.q_proj.weight": (_rows, q),
        "self_attn.k_proj.weight": (_rows, kv),
        "self_attn.v_proj.weight": (_rows, kv),
        "self_attn.o_proj.weight": (_cols, q),
        "mlp.gate_proj.weight": (_rows, inter),
        "mlp.up_proj.weight": (_rows, inter),
        "mlp.down_proj.weight": (_cols, inter),
    }.get(m.group(2))
    if split is None:
        return value  # layer norms: replicated
    take, width = split
    return take(value, r * width, (r + 1) * width)


def shard_tensors(
    config: Any, tensors: Iterable[tuple[str, Any]], tp_rank: int, tp_size: int
) -> Iterator[tuple[str, Any]]:
    """Stream (name, rank's slice) from full (name, tensor) pairs (weights.load_weights consumes it)."""
    if not 0 <= tp_rank < tp_size:
        raise ValueError(f"tp rank {tp_rank} outside [0, {tp_size})")
    for name, value in tensors:
        yield name, shard_tensor(config, name, value, tp_rank, tp_size)
