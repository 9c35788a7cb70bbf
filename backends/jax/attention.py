"""Paged attention in jnp, over the stacked KV array of kv_cache.py.

The KV cache of all layers is one array::

    kv  [num_layers, 2, num_blocks, block_size, Hkv, D]       (axis 1: 0 = K, 1 = V)

    flat slot s = block_id * block_size + offset   (token at position p of a request lives in
    block block_ids[p // block_size], offset p % block_size)

Two layouts of a step's rows, each its own jitted program (model.py):

* decode — one row per decoding request, padded to a batch bucket. Each row gathers its own
  block table ``[B, M]`` (M = context-block bucket) and attends to keys ``< seq_len``::

      q [B, H, D]   keys [B, M, block_size, Hkv, D]   scores [B, Hkv, G, M * block_size]

* chunk — the rows of every prefill / speculative chunk back to back, padded to a token bucket.
  The KV blocks of all chunks are gathered into one flat key list; each key carries its chunk
  (segment) and position, each row attends to the keys of its own segment at positions <= its own::

      rows   | chunk 0 rows | chunk 1 rows | pad (seg -1) |
      keys   | chunk 0 blocks ...         | chunk 1 blocks ... | pad (seg -2) |
      scores [Hkv, G, T, KB * block_size]

  The waste (scores across segments) is bounded by the step's token budget, unlike a per-chunk
  [chunks, max context] gather.

G = H / Hkv query heads share a KV head (query head h reads KV head h // G). Masked scores are a
large finite negative, so a fully padded row yields finite garbage instead of NaN; padded rows are
never sampled, and their K/V writes go to the cache's scratch block (kv_cache.py).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

MASKED = -1e30


@struct.dataclass
class DecodeMeta:
    """block_table [B, M] int32 (padded with block 0); seq_lens [B] int32 (0 for padded rows)."""

    block_table: jax.Array
    seq_lens: jax.Array


@struct.dataclass
class ChunkMeta:
    """row_seg [T] int32 chunk index of each row (-1 = pad); row_pos [T] int32 position of each row;
    key_block_ids [KB] int32 gathered blocks; key_block_seg [KB] int32 their chunk (-2 = pad);
    key_block_pos [KB] int32 position of each block's first slot."""

    row_seg: jax.Array
    row_pos: jax.Array
    key_block_ids: jax.Array
    key_block_seg: jax.Array
    key_block_pos: jax.Array


def write_kv(kv: jax.Array, layer: jax.Array, slots: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
    """Scatter k, v [T, Hkv, D] into layer ``layer`` at flat slots [T] (all in range: padded rows
    point at the scratch block; see kv_cache.py for why nothing is dropped)."""
    num_layers, _, num_blocks, block_size, hkv, d = kv.shape
    flat = kv.reshape(num_layers, 2, num_blocks * block_size, hkv, d)
    flat = flat.at[layer, 0, slots].set(k.astype(kv.dtype), mode="promise_in_bounds")
    flat = flat.at[layer, 1, slots].set(v.astype(kv.dtype), mode="promise_in_bounds")
    return flat.reshape(kv.shape)


def _softmax_attend(scores: jax.Array, mask: jax.Array) -> jax.Array:
    scores = jnp.where(mask, scores, MASKED)
    return jax.nn.softmax(scores, axis=-1)


def decode_attention(q: jax.Array, kv: jax.Array, layer: jax.Array, meta: DecodeMeta) -> jax.Array:
    """q [B, H, D] (one row per request) -> [B, H * D]."""
    b, h, d = q.shape
    block_size, hkv = kv.shape[3], kv.shape[4]
    m = meta.block_table.shape[1]
    g = h // hkv
    # the gathered blocks keep their block axis ([B, M, bs, Hkv, D]): merging it with the offsets into one key
    # axis made XLA copy the gather once more before the dots (~20% slower at batch 32, M = 8)
    keys = kv[layer, 0, meta.block_table]
    values = kv[layer, 1, meta.block_table]
    qg = q.reshape(b, hkv, g, d)
    scores = jnp.einsum("bkgd,bmskd->bkgms", qg, keys, preferred_element_type=jnp.float32) * d**-0.5
    mask = jnp.arange(m * block_size)[None, :] < meta.seq_lens[:, None]  # [B, L]
    probs = _softmax_attend(scores.reshape(b, hkv, g, m * block_size), mask[:, None, None, :])
    probs = probs.reshape(b, hkv, g, m, block_size).astype(values.dtype)
    out = jnp.einsum("bkgms,bmskd->bkgd", probs, values, preferred_element_type=jnp.float32)
    return out.reshape(b, h * d).astype(q.dtype)


def chunk_attention(q: jax.Array, kv: jax.Array, layer: jax.Array, meta: ChunkMeta) -> jax.Array:
    """q [T, H, D] (chunk rows back to back) -> [T, H * D]."""
    t, h, d = q.shape
    block_size, hkv = kv.shape[3], kv.shape[4]
    kb = meta.key_block_ids.shape[0]
    keys = kv[layer, 0, meta.key_block_ids].reshape(kb * block_size, hkv, d)  # [K, Hkv, D]
    values = kv[layer, 1, meta.key_block_ids].reshape(kb * block_size, hkv, d)
    key_seg = jnp.repeat(meta.key_block_seg, block_size)  # [K]
    key_pos = (meta.key_block_pos[:, None] + jnp.arange(block_size)[None, :]).reshape(-1)  # [K]
    mask = (meta.row_seg[:, None] == key_seg[None, :]) & (key_pos[None, :] <= meta.row_pos[:, None])  # [T, K]
    qg = q.reshape(t, hkv, h // hkv, d)
    scores = jnp.einsum("tkgd,nkd->kgtn", qg, keys, preferred_element_type=jnp.float32) * d**-0.5
    probs = _softmax_attend(scores, mask[None, None])
    out = jnp.einsum("kgtn,nkd->tkgd", probs.astype(values.dtype), values, preferred_element_type=jnp.float32)
    return out.reshape(t, h * d).astype(q.dtype)
