"""Paged KV memory of both tiers: device blocks (a jax array) and host-RAM blocks (numpy).

The same layout as the torch backend, one stacked array per tier, so a block move is one gather
and one scatter across all layers::

    device_kv  [num_layers, 2, num_device_blocks, block_size, Hkv, D]   jax.Array  (axis 1: 0 = K, 1 = V)
    host_kv    [num_layers, 2, num_host_blocks,   block_size, Hkv, D]   np.ndarray in host RAM

The jitted step programs take ``device_kv`` donated and hand back the updated array, which the
runner stores here again (``device_kv`` is replaced, never written in place from Python). The
block manager owns which ids are free; this class only moves bytes. Arrays start zeroed: padded
gathers read block 0, and masked-out NaN garbage would still poison ``softmax @ V``.

Block moves pad their id lists to a power of two (padded sources read block 0, padded
destinations are out of range and dropped by the scatter), so moving n blocks compiles at most one
program per power of two.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from backends.jax.buckets import next_pow2


@jax.jit
def _gather_blocks(kv: jax.Array, ids: jax.Array) -> jax.Array:
    return kv[:, :, ids]  # [L, 2, n, bs, Hkv, D]


@partial(jax.jit, donate_argnums=0)
def _scatter_blocks(kv: jax.Array, ids: jax.Array, blocks: jax.Array) -> jax.Array:
    return kv.at[:, :, ids].set(blocks, mode="drop")


@partial(jax.jit, donate_argnums=0)
def _copy_blocks(kv: jax.Array, src: jax.Array, dst: jax.Array) -> jax.Array:
    return kv.at[:, :, dst].set(kv[:, :, src], mode="drop")  # every source read before any write


def _padded(ids: tuple[int, ...], fill: int) -> np.ndarray:
    out = np.full(next_pow2(len(ids)), fill, dtype=np.int32)
    out[: len(ids)] = ids
    return out


class PagedKVCache:
    def __init__(
        self,
        num_layers: int,
        num_kv_heads: int,
        head_dim: int,
        num_device_blocks: int,
        num_host_blocks: int,
        block_size: int,
        dtype: np.dtype,
        device: jax.Device,
    ) -> None:
        self.block_size = block_size
        self.device = device
        shape = (num_layers, 2, num_device_blocks, block_size, num_kv_heads, head_dim)
        self.device_kv: jax.Array = jax.device_put(jnp.zeros(shape, dtype=dtype), device)
        host_shape = (num_layers, 2, num_host_blocks, block_size, num_kv_heads, head_dim)
        self.host_kv = np.zeros(host_shape, dtype=dtype)

    @property
    def num_device_blocks(self) -> int:
        return self.device_kv.shape[2]

    @property
    def num_host_blocks(self) -> int:
        return self.host_kv.shape[2]

    @property
    def num_slots(self) -> int:
        """Flat device slots; a slot id >= this is out of range (the step programs drop its write)."""
        return self.num_device_blocks * self.block_size

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
        self.device_kv = _scatter_blocks(self.device_kv, _padded(dst, self.num_device_blocks), blocks)

    def copy(self, pairs: list[tuple[int, int]]) -> None:
        """(device block, device block) pairs: all sources are read before any destination is written."""
        if not pairs:
            return
        src, dst = zip(*pairs)
        self.device_kv = _copy_blocks(self.device_kv, _padded(src, 0), _padded(dst, self.num_device_blocks))
