"""Paged KV memory of both tiers: device blocks (a jax array) and host-RAM blocks (numpy).

The same layout as the torch backend (``KVLayout``, backends/kv_layout.py), one stacked array per
tier, so a block move is one gather and one scatter across all layers::

    device_kv  [num_layers, 2, num_device_blocks + 1, block_size, Hkv, D]   jax.Array  (axis 1: 0 = K, 1 = V)
    host_kv    [num_layers, 2, num_host_blocks,       block_size, Hkv, D]   np.ndarray in host RAM

The extra last device block is scratch: padded rows and padded block moves write there, so every
scatter index is in range. (An out-of-range index dropped by ``mode="drop"`` makes XLA lower a
one-row scatter to a select over the whole array, i.e. a copy of the cache per layer.)

The jitted step programs take ``device_kv`` donated and hand back the updated array, which the
runner stores here again (``device_kv`` is replaced, never written in place from Python). The
block manager owns which ids are free; this class only moves bytes. Arrays start zeroed: padded
gathers read block 0, and masked-out NaN garbage would still poison ``softmax @ V``.

Block moves pad their id lists to a power of two >= 2 (padded sources read block 0, padded
destinations are the scratch block), so moving n blocks compiles at most one program per power of
two.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from backends.jax.buckets import next_pow2
from backends.kv_layout import KVLayout


@jax.jit
def _gather_blocks(kv: jax.Array, ids: jax.Array) -> jax.Array:
    return kv[:, :, ids]  # [L, 2, n, bs, Hkv, D]


@partial(jax.jit, donate_argnums=0)
def _scatter_blocks(kv: jax.Array, ids: jax.Array, blocks: jax.Array) -> jax.Array:
    return kv.at[:, :, ids].set(blocks, mode="promise_in_bounds")


@partial(jax.jit, donate_argnums=0)
def _copy_blocks(kv: jax.Array, src: jax.Array, dst: jax.Array) -> jax.Array:
    return kv.at[:, :, dst].set(kv[:, :, src], mode="promise_in_bounds")  # every source read before any write


def _padded(ids: tuple[int, ...], fill: int) -> np.ndarray:
    out = np.full(max(2, next_pow2(len(ids))), fill, dtype=np.int32)  # >= 2: see buckets.batch_buckets
    out[: len(ids)] = ids
    return out


class PagedKVCache:
    def __init__(self, layout: KVLayout, dtype: np.dtype, device: jax.Device) -> None:
        self.block_size = layout.block_size
        self.device = device
        shape = layout.tier_shape(layout.num_device_blocks + 1)  # + the scratch block
        self.device_kv: jax.Array = jnp.zeros(shape, dtype=dtype, device=device)
        self.host_kv = np.zeros(layout.tier_shape(layout.num_host_blocks), dtype=dtype)

    @property
    def num_device_blocks(self) -> int:
        return self.device_kv.shape[2] - 1

    @property
    def num_host_blocks(self) -> int:
        return self.host_kv.shape[2]

    @property
    def scratch_block(self) -> int:
        return self.num_device_blocks

    @property
    def scratch_slot(self) -> int:
        """A flat slot of the scratch block: where padded rows write their K/V."""
        return self.scratch_block * self.block_size

    def layer(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """(K, V) of layer i, [num_device_blocks, block_size, Hkv, D] each, copied to host (tests)."""
        kv = np.asarray(self.device_kv[i, :, : self.num_device_blocks])
        return kv[0], kv[1]

    def swap_out(self, pairs: list[tuple[int, int]]) -> None:
        """(device block, host block) pairs: device -> host."""
        if not pairs:
            return
        src, dst = zip(*pairs)
        blocks = np.asarray(_gather_blocks(self.device_kv, _padded(src, 0)))
        self.host_kv[:, :, list(dst)] = blocks[:, :, : len(dst)]

    def swap_in(self, pairs: list[tuple[int, int]]) -> None:
        """(host block, device block) pairs: host -> device."""
        if not pairs:
            return
        src, dst = zip(*pairs)
        src_ids = _padded(src, 0)
        blocks = jax.device_put(self.host_kv[:, :, src_ids], self.device)
        self.device_kv = _scatter_blocks(self.device_kv, _padded(dst, self.scratch_block), blocks)

    def copy(self, pairs: list[tuple[int, int]]) -> None:
        """(device block, device block) pairs: all sources are read before any destination is written."""
        if not pairs:
            return
        src, dst = zip(*pairs)
        self.device_kv = _copy_blocks(self.device_kv, _padded(src, 0), _padded(dst, self.scratch_block))

    def read_blocks(self, block_ids: list[int]) -> np.ndarray:
        """The device blocks' KV gathered into one C-contiguous host array ``[L, 2, n, block_size, Hkv, D]``
        (what a peer transfer sends)."""
        blocks = np.asarray(_gather_blocks(self.device_kv, _padded(tuple(block_ids), 0)))
        return np.ascontiguousarray(blocks[:, :, : len(block_ids)])

    def write_blocks(self, block_ids: list[int], blocks: np.ndarray) -> None:
        """Scatter host ``blocks`` ``[L, 2, n, block_size, Hkv, D]`` into device blocks ``block_ids``."""
        if blocks.shape[2] != len(block_ids) or blocks.shape[:2] != self.device_kv.shape[:2]:
            raise ValueError(f"blocks {tuple(blocks.shape)} do not fit {len(block_ids)} blocks of this cache")
        ids = _padded(tuple(block_ids), self.scratch_block)
        padded = np.zeros((*blocks.shape[:2], len(ids), *blocks.shape[3:]), dtype=self.device_kv.dtype)
        padded[:, :, : len(block_ids)] = blocks
        self.device_kv = _scatter_blocks(self.device_kv, ids, jax.device_put(padded, self.device))
