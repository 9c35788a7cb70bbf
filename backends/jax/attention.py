"""Paged attention in jnp, over the stacked KV array of kv_cache.py.

The KV cache of all layers is one array::

    kv  [num_layers, 2, num_blocks, block_size, Hkv, D]       (axis 1: 0 = K, 1 = V)

    flat slot s = block_id * block_size + offset   (token at position p of a request lives in
    block block_ids[p // block_size], offset p % block_size)

Two layouts of a step's rows, each its own jitted program (model.py):

* decode — one row per decoding request, padded to a batch bucket. Each row gathers its own
  block table ``[B, M]`` (M = context-block bucket) and attends to keys ``< seq_len``::

      q [B, H, D]   keys [B, M, block_size, Hkv, D]   scores [B, Hkv, G, M * block_size]

* chunk — the rows of every prefill / speculative chunk back to back, padded to a token bucket,
  cut into row tiles of ``TR`` rows (chunk_meta.py). Each tile gathers only the KV blocks its rows can
  see (the blocks of its rows' chunks up to their last row's position), padded to a static width
  bucket W; each row attends to the keys of its own chunk (segment) at positions <= its own::

      rows        | chunk 0 rows | chunk 1 rows | pad (seg -1) |     cut into NT tiles of TR rows
      tile keys   [NT, W] blocks: tile j's chunks' visible blocks | pad (seg -2)
      scores      [NT, Hkv, G * TR, W * block_size]

  Against one key list shared by all rows (scores [T, all blocks * block_size], the previous form)
  a step of several prompts computes only each tile's own prompts' scores (8 prompts of 64 tokens:
  1/8 of the scores). A single long prompt gains nothing there (W is the widest tile's: all its
  blocks), so a step of one long chunk takes solo_attention.py's causal row groups instead. Batched
  dots with the batch axes leading ([NT, Hkv] x [G * TR, D] x [D, K]) and the softmax normalised
  after the PV product (on [.., D], not [.., K]) took one SmolLM2 layer's attention over 512 rows
  from 19 to 11-14 ms on CPU even then (8 x 64 rows: 2.6 ms).

G = H / Hkv query heads share a KV head (query head h reads KV head h // G). Masked scores are a
large finite negative, so a fully padded row yields finite garbage instead of NaN; padded rows are
never sampled, and their K/V writes go to the cache's scratch block (kv_cache.py).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct
from jax import lax

MASKED = -1e30
_HIGHEST = lax.Precision.HIGHEST  # fp32 scores stay fp32 on GPUs (XLA would use TF32), as model.py's matmuls


@struct.dataclass
class DecodeMeta:
    """block_table [B, M] int32 (padded with block 0); seq_lens [B] int32 (0 for padded rows)."""

    block_table: jax.Array
    seq_lens: jax.Array


@struct.dataclass
class ChunkMeta:
    """row_seg [T] int32 chunk index of each row (-1 = pad); row_pos [T] int32 position of each row;
    tile_block_ids [NT, W] int32 the blocks each row tile gathers (T = NT * TR); tile_block_seg [NT, W]
    int32 their chunk (-2 = pad); tile_block_pos [NT, W] int32 position of each block's first slot.
    Built by chunk_meta.py."""

    row_seg: jax.Array
    row_pos: jax.Array
    tile_block_ids: jax.Array
    tile_block_seg: jax.Array
    tile_block_pos: jax.Array


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
    scores = jnp.einsum("bkgd,bmskd->bkgms", qg, keys, preferred_element_type=jnp.float32, precision=_HIGHEST) * d**-0.5
    mask = jnp.arange(m * block_size)[None, :] < meta.seq_lens[:, None]  # [B, L]
    probs = _softmax_attend(scores.reshape(b, hkv, g, m * block_size), mask[:, None, None, :])
    probs = probs.reshape(b, hkv, g, m, block_size).astype(values.dtype)
    out = jnp.einsum("bkgms,bmskd->bkgd", probs, values, preferred_element_type=jnp.float32, precision=_HIGHEST)
    return out.reshape(b, h * d).astype(q.dtype)


def chunk_attention(q: jax.Array, kv: jax.Array, layer: jax.Array, meta: ChunkMeta) -> jax.Array:
    """q [T, H, D] (chunk rows back to back) -> [T, H * D]."""
    t, h, d = q.shape
    block_size, hkv = kv.shape[3], kv.shape[4]
    g = h // hkv
    nt, w = meta.tile_block_ids.shape
    tr, k = t // nt, w * block_size
    batch = ((0, 1), (0, 1))  # (tile, kv head) lead every operand
    keys = kv[layer, 0, meta.tile_block_ids].reshape(nt, k, hkv, d).transpose(0, 2, 1, 3)  # [NT, Hkv, K, D]
    values = kv[layer, 1, meta.tile_block_ids].reshape(nt, k, hkv, d).transpose(0, 2, 1, 3)
    key_seg = jnp.repeat(meta.tile_block_seg, block_size, axis=1)  # [NT, K]
    key_pos = (meta.tile_block_pos[:, :, None] + jnp.arange(block_size)[None, None, :]).reshape(nt, k)
    row_seg = meta.row_seg.reshape(nt, tr)
    row_pos = meta.row_pos.reshape(nt, tr)
    mask = (row_seg[:, :, None] == key_seg[:, None, :]) & (key_pos[:, None, :] <= row_pos[:, :, None])  # [NT, TR, K]
    qg = q.reshape(nt, tr, hkv, g, d).transpose(0, 2, 3, 1, 4).reshape(nt, hkv, g * tr, d)
    scores = (
        lax.dot_general(qg, keys, (((3,), (3,)), batch), preferred_element_type=jnp.float32, precision=_HIGHEST)
        * d**-0.5
    )
    scores = jnp.where(mask[:, None, None], scores.reshape(nt, hkv, g, tr, k), MASKED)
    probs = jnp.exp(scores - jnp.max(scores, axis=-1, keepdims=True))
    denom = jnp.sum(probs, axis=-1, keepdims=True)  # [NT, Hkv, G, TR, 1]
    probs = probs.reshape(nt, hkv, g * tr, k).astype(values.dtype)
    out = lax.dot_general(probs, values, (((3,), (2,)), batch), preferred_element_type=jnp.float32, precision=_HIGHEST)
    out = out.reshape(nt, hkv, g, tr, d) / denom  # [NT, Hkv, G, TR, D]
    return out.transpose(0, 3, 1, 2, 4).reshape(t, h * d).astype(q.dtype)
