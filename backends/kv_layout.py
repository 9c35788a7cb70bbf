"""KVLayout: the geometry of the paged KV cache that the torch and JAX backends both allocate, and
the block moves a step applies to it. Pure Python and numpy; each backend's kv_cache.py owns the
arrays.

One stacked array per tier, so a block move is one gather/scatter across all layers::

    device_kv  [num_layers, 2, num_device_blocks (+1 in JAX), block_size, Hkv, D]   (axis 1: 0 = K, 1 = V)
    host_kv    [num_layers, 2, num_host_blocks,               block_size, Hkv, D]

    flat slot s = block_id * block_size + offset   (token at position p of a request lives in
    block block_ids[p // block_size], offset p % block_size)

The JAX cache adds one scratch device block for padded rows (backends/jax/kv_cache.py). A block of
all layers, K and V, holds ``num_layers * 2 * block_size * Hkv * D`` elements.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from engine.batch import SchedulerOutput
from engine.model_runner import KVCacheSpec


@dataclass(slots=True, frozen=True)
class KVLayout:
    """Block counts and per-block shape of both tiers (what ``PagedKVCache`` allocates)."""

    num_layers: int
    num_kv_heads: int
    head_dim: int
    num_device_blocks: int
    num_host_blocks: int
    block_size: int

    @classmethod
    def from_spec(cls, config: Any, spec: KVCacheSpec) -> KVLayout:
        """config: a ModelConfig (num_hidden_layers, num_key_value_heads, head_dim)."""
        return cls(
            config.num_hidden_layers,
            config.num_key_value_heads,
            config.head_dim,
            spec.num_device_blocks,
            spec.num_host_blocks,
            spec.block_size,
        )

    def tier_shape(self, num_blocks: int) -> tuple[int, int, int, int, int, int]:
        """[num_layers, 2, num_blocks, block_size, Hkv, D]: one tier's stacked K/V array."""
        return (self.num_layers, 2, num_blocks, self.block_size, self.num_kv_heads, self.head_dim)


def kv_bytes_per_block(config: Any, block_size: int, itemsize: int) -> int:
    """Bytes of one block of all layers, K and V, at ``itemsize`` bytes per element."""
    return config.num_hidden_layers * 2 * block_size * config.num_key_value_heads * config.head_dim * itemsize


def flat_slots(block_ids: np.ndarray, positions: np.ndarray, block_size: int) -> np.ndarray:
    """Flat cache slots [T] of positions [T] in one request's block table (dtype of the inputs)."""
    return block_ids[positions // block_size] * block_size + positions % block_size


class BlockMoves(Protocol):
    """The three block moves of a paged KV cache; pairs are (source, destination) block ids."""

    def swap_out(self, pairs: list[tuple[int, int]]) -> None: ...  # (device, host)

    def swap_in(self, pairs: list[tuple[int, int]]) -> None: ...  # (host, device)

    def copy(self, pairs: list[tuple[int, int]]) -> None: ...  # (device, device)


def apply_block_moves(kv_cache: BlockMoves | None, batch: SchedulerOutput) -> None:
    """A step's block moves in batch.py's order: swap out, swap in, copy."""
    if kv_cache is None:
        raise RuntimeError("initialize_kv_cache() must be called before execute()")
    kv_cache.swap_out(batch.blocks_to_swap_out)
    kv_cache.swap_in(batch.blocks_to_swap_in)
    kv_cache.copy(batch.blocks_to_copy)
