"""A chunk step of one chunk (solo_attention.py: causal row groups, the chunk's own keys from its projection, its
earlier context gathered once) against the tiled form every step may take (attention.py ``chunk_attention``): equal
on real rows, with and without earlier context, a start inside a block, padded rows, one group or eight."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from backends.jax.attention import chunk_attention, write_kv
from backends.jax.chunk_meta import build_chunk_meta
from backends.jax.solo_attention import build_solo_meta, num_groups, solo_attention
from engine.buckets import next_pow2

H, HKV, D, BS, NUM_BLOCKS, LAYERS = 6, 2, 8, 4, 320, 2


@pytest.mark.parametrize(
    ("num_rows", "start", "length"), [(256, 0, 256), (256, 37, 200), (512, 130, 512), (64, 5, 50), (1024, 0, 900)]
)
def test_one_chunk_equals_the_tiled_form(num_rows, start, length):
    rng = np.random.default_rng(num_rows + start)
    kv = jnp.asarray(rng.standard_normal((LAYERS, 2, NUM_BLOCKS, BS, HKV, D)).astype(np.float32))
    blocks = rng.permutation(np.arange(1, NUM_BLOCKS))[: -(-(start + length) // BS)].astype(np.int32)
    q, k, v = (jnp.asarray(rng.standard_normal((num_rows, n, D)).astype(np.float32)) for n in (H, HKV, HKV))
    positions = start + np.arange(length)
    slots = np.zeros(num_rows, np.int32)  # padded rows write to block 0 (the scratch block here)
    slots[:length] = blocks[positions // BS] * BS + positions % BS
    layer = jnp.int32(1)
    kv = write_kv(kv, layer, jnp.asarray(slots), k, v)  # as the layer does before attending
    row_seg = np.full(num_rows, -1, np.int32)
    row_seg[:length] = 0
    row_pos = np.zeros(num_rows, np.int32)
    row_pos[:length] = positions
    tiled = chunk_attention(q, kv, layer, build_chunk_meta(row_seg, row_pos, [blocks], BS, next_pow2))
    meta = build_solo_meta(blocks, start, BS, next_pow2)
    assert meta.context_block_ids.shape[0] == next_pow2(max(1, -(-start // BS)))
    solo = solo_attention(q, k, v, kv, layer, meta)
    np.testing.assert_allclose(np.asarray(solo)[:length], np.asarray(tiled)[:length], rtol=2e-5, atol=2e-6)
    assert np.isfinite(np.asarray(solo)).all()


def test_groups_and_a_context_too_short():
    assert [num_groups(t) for t in (64, 128, 256, 512, 4096)] == [1, 2, 4, 8, 8]
    with pytest.raises(ValueError, match="context of 9 tokens needs 3"):
        build_solo_meta(np.array([5, 6], np.int32), 9, BS, next_pow2)
