"""Attention for a chunk step that holds one chunk only (a long prompt, or the next piece of one): causal in
row groups, so the scores it computes are about half of a T x T square instead of all of it.

The tiled form (attention.py ``chunk_attention``) pads every row tile to the widest tile's key window; one long
prompt's widest tile sees every key, so it scores T x T, and gathers the prompt's keys once per tile from the cache
(T / 64 copies of them). Here the chunk's own keys and values come straight from this layer's projection (the same
values the layer has just written to the cache), its earlier context (a prefix-cache hit, the chunks before it) is
gathered once, and the rows are cut into ``G`` static groups, group g scoring the context and own keys 0 ..
(g + 1) T / G only::

    rows  ──group 0──┬──group 1──┬── ... ──group G-1──      (T / G rows each; G = min(8, T / 64))
    keys  [context P | own 0 .. (g + 1) T / G]              mask: context position < start; own key <= row

    own scores:  T^2 (G + 1) / 2G   (G = 8: 0.56 T^2)        plus T x P for the context

Padded rows (past the chunk's last) score garbage as in the tiled form and are never sampled; a real row never
sees a padded row's key (causal). Scores and the softmax are fp32, normalised after the PV product as the tiled
form is, and the dots keep their batch axis (the KV head) leading, which XLA's CPU dots want.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jax import lax

from backends.jax.attention import MASKED

SOLO_MIN_ROWS = 256  # a single chunk of at least this many padded rows takes this path (fewer: the tiled form)
MAX_GROUPS = 8
MIN_GROUP_ROWS = 64
_HIGHEST = lax.Precision.HIGHEST


@struct.dataclass
class SoloMeta:
    """context_block_ids [P] int32: the blocks holding the chunk's earlier context (positions < start), padded
    with block 0; start: int32 scalar, the chunk's first position (its context's length)."""

    context_block_ids: jax.Array
    start: jax.Array


def build_solo_meta(blocks: np.ndarray, start: int, block_size: int, width) -> SoloMeta:
    """``blocks``: the chunk's block ids (at least those of its context); ``width``: a context width in blocks ->
    its static bucket (>= it, >= 1)."""
    num_context = -(-start // block_size)
    if len(blocks) < num_context:
        raise ValueError(f"the chunk has {len(blocks)} blocks, its context of {start} tokens needs {num_context}")
    ids = np.zeros(width(max(1, num_context)), dtype=np.int32)
    ids[:num_context] = blocks[:num_context]
    return SoloMeta(ids, np.int32(start))


def num_groups(num_rows: int) -> int:
    return max(1, min(MAX_GROUPS, num_rows // MIN_GROUP_ROWS))


def solo_attention(q: jax.Array, k: jax.Array, v: jax.Array, kv: jax.Array, layer: jax.Array, meta: SoloMeta):
    """q [T, H, D], k / v [T, Hkv, D] (the chunk's own, rows in position order) -> [T, H * D]."""
    t, h, d = q.shape
    block_size, hkv = kv.shape[3], kv.shape[4]
    g = h // hkv
    p = meta.context_block_ids.shape[0] * block_size
    batch = ((0,), (0,))  # the KV head leads every operand
    context_k = kv[layer, 0, meta.context_block_ids].reshape(p, hkv, d).astype(k.dtype)
    context_v = kv[layer, 1, meta.context_block_ids].reshape(p, hkv, d).astype(v.dtype)
    context_ok = jnp.arange(p) < meta.start  # [P]
    groups = num_groups(t)
    rows = t // groups
    out = []
    for i in range(groups):
        r0, r1 = i * rows, (i + 1) * rows
        keys = jnp.concatenate([context_k, k[:r1]]).transpose(1, 0, 2)  # [Hkv, P + r1, D]
        values = jnp.concatenate([context_v, v[:r1]]).transpose(1, 0, 2)
        own_ok = np.arange(r1)[None, :] <= np.arange(r0, r1)[:, None]  # [rows, r1], static
        mask = jnp.concatenate([jnp.broadcast_to(context_ok, (rows, p)), jnp.asarray(own_ok)], axis=1)
        qg = q[r0:r1].reshape(rows, hkv, g, d).transpose(1, 2, 0, 3).reshape(hkv, g * rows, d)
        scores = (
            lax.dot_general(qg, keys, (((2,), (2,)), batch), preferred_element_type=jnp.float32, precision=_HIGHEST)
            * d**-0.5
        )  # [Hkv, G * rows, K]
        scores = jnp.where(mask[None, None], scores.reshape(hkv, g, rows, -1), MASKED)
        probs = jnp.exp(scores - jnp.max(scores, axis=-1, keepdims=True))
        denom = jnp.sum(probs, axis=-1, keepdims=True)  # [Hkv, G, rows, 1]
        probs = probs.reshape(hkv, g * rows, -1).astype(values.dtype)
        o = lax.dot_general(
            probs, values, (((2,), (1,)), batch), preferred_element_type=jnp.float32, precision=_HIGHEST
        )
        o = o.reshape(hkv, g, rows, d) / denom
        out.append(o.transpose(2, 0, 1, 3).reshape(rows, h * d))
    return jnp.concatenate(out).astype(q.dtype)
