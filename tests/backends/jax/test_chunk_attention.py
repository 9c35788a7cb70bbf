"""The tiled chunk attention (each row tile scores only the KV blocks its chunks can see, chunk_meta.py) against
the dense masked form it replaced (every row against every gathered key of the step; kept in bench/jax_chunk_ab.py
for the A/B), on random steps: several chunks, partial last blocks, prefix-cached starts (start_pos > 0), padded
rows, tiles shared by chunks."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from backends.jax.attention import chunk_attention
from backends.jax.chunk_meta import build_chunk_meta, tile_rows
from bench.jax_chunk_ab import dense_chunk_attention, dense_meta
from engine.buckets import next_pow2

H, HKV, D, BS, NUM_BLOCKS, LAYERS = 6, 2, 8, 4, 96, 2


def random_step(rng, num_rows: int):
    """Chunks (start_pos, length, block ids) packed into ``num_rows`` rows, the rest padding."""
    free = list(rng.permutation(np.arange(1, NUM_BLOCKS)))
    row_seg = np.full(num_rows, -1, np.int32)
    row_pos = np.zeros(num_rows, np.int32)
    seg_blocks, row = [], 0
    while row < num_rows - 1 and len(seg_blocks) < 7:
        n = int(rng.integers(1, min(40, num_rows - row) + 1))
        start = int(rng.choice([0, 0, rng.integers(1, 30)]))  # a prefix-cache hit or a later chunk
        nb = -(-(start + n) // BS)
        seg_blocks.append(np.array([free.pop() for _ in range(nb)], np.int32))
        row_seg[row : row + n] = len(seg_blocks) - 1
        row_pos[row : row + n] = np.arange(start, start + n)
        row += n
        if rng.random() < 0.2:
            row += int(rng.integers(0, 5))  # rows left unused between chunks read as padding too
    return row_seg, row_pos, seg_blocks


@pytest.mark.parametrize("num_rows", [16, 48, 128, 256])
def test_tiled_chunk_attention_equals_the_dense_masked_form(num_rows):
    rng = np.random.default_rng(num_rows)
    kv = jnp.asarray(rng.standard_normal((LAYERS, 2, NUM_BLOCKS, BS, HKV, D)).astype(np.float32))
    for _ in range(3):
        row_seg, row_pos, seg_blocks = random_step(rng, num_rows)
        q = jnp.asarray(rng.standard_normal((num_rows, H, D)).astype(np.float32))
        meta = build_chunk_meta(row_seg, row_pos, seg_blocks, BS, lambda n: max(2, next_pow2(n)))
        assert meta.tile_block_ids.shape[0] * tile_rows(num_rows) == num_rows
        dense = dense_meta(row_seg, row_pos, seg_blocks, BS, lambda n: max(2, next_pow2(n)))
        layer = jnp.int32(1)
        got = np.asarray(chunk_attention(q, kv, layer, meta))
        want = np.asarray(dense_chunk_attention(q, kv, layer, dense))
        real = row_seg >= 0  # padded rows are garbage in both forms (never sampled)
        assert real.sum() > 0
        np.testing.assert_allclose(got[real], want[real], rtol=2e-5, atol=2e-6)
        assert np.isfinite(got).all()


def test_a_tile_gathers_only_the_blocks_its_chunks_can_see():
    """Two 64-row tiles: the first holds chunk 0 (positions 0..63) and the head of chunk 1; the second the rest of
    chunk 1 only, so it gathers none of chunk 0's blocks."""
    bs = 16
    row_seg = np.array([0] * 64 + [1] * 64, np.int32)  # chunk 0 fills tile 0
    row_seg[60:] = 1
    row_pos = np.concatenate([np.arange(60), 100 + np.arange(68)]).astype(np.int32)
    blocks = [np.arange(10, 14, dtype=np.int32), np.arange(20, 31, dtype=np.int32)]
    meta = build_chunk_meta(row_seg, row_pos, blocks, bs, next_pow2)
    assert meta.tile_block_ids.shape == (2, 16)
    # tile 0: chunk 0's blocks 0..3 (position 59), chunk 1's blocks 0..6 (position 103)
    assert meta.tile_block_ids[0, :11].tolist() == [10, 11, 12, 13, *range(20, 27)]
    assert meta.tile_block_seg[0].tolist() == [0] * 4 + [1] * 7 + [-2] * 5
    # tile 1: chunk 1's blocks 0..10 (position 167), nothing of chunk 0
    assert meta.tile_block_ids[1, :11].tolist() == list(range(20, 31))
    assert meta.tile_block_pos[1, :11].tolist() == [16 * i for i in range(11)]
    assert (meta.tile_block_seg[1, 11:] == -2).all()


def test_a_chunk_with_too_few_blocks_is_an_error():
    with pytest.raises(ValueError, match="chunk 0 has 1 blocks"):
        build_chunk_meta(np.zeros(16, np.int32), np.arange(16, dtype=np.int32), [np.array([3])], 4, next_pow2)
