"""The row tiles of a chunk step and the KV blocks each tile gathers (numpy, host side).

attention.py's ``chunk_attention`` cuts the step's ``T`` padded rows into ``NT`` tiles of ``TR`` rows and
scores each tile only against the KV blocks its rows can see::

    tile j's blocks = for each chunk s with a row in tile j (in row order):
                      s's blocks 0 .. (largest position of s's rows in tile j) // block_size

padded to a width bucket ``W`` (``width(max over tiles)``, e.g. ``BucketPolicy.key_blocks``) with block 0
at chunk -2 (matches no row). The row mask (same chunk, key position <= row position) is unchanged, so
the result equals attention over all of a step's gathered keys (the previous, dense form): the blocks a
tile leaves out are exactly those every one of its rows masks. A tile of several short prompts gathers
the few blocks of those prompts, not the whole step's.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from backends.jax.attention import ChunkMeta

TILE_ROWS = 64  # rows per tile at most (the tile is gcd(T, 64) rows: T's buckets are powers of two)


def tile_rows(num_rows: int) -> int:
    """Rows per tile for a program of ``num_rows`` padded rows (divides it)."""
    return math.gcd(num_rows, TILE_ROWS)


def build_chunk_meta(
    row_seg: np.ndarray,  # [T] int32: chunk of each row, -1 = pad
    row_pos: np.ndarray,  # [T] int32
    seg_blocks: Sequence[np.ndarray],  # per chunk: its block ids (at least those its rows can see)
    block_size: int,
    width: Callable[[int], int],  # max tile width in blocks -> its static bucket (>= the argument)
) -> ChunkMeta:
    t = len(row_seg)
    tr = tile_rows(t)
    nt = t // tr
    tiles: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    for j in range(nt):
        segs = row_seg[j * tr : (j + 1) * tr]
        pos = row_pos[j * tr : (j + 1) * tr]
        ids, seg_of, pos_of = [], [], []
        for s in dict.fromkeys(segs[segs >= 0].tolist()):  # the tile's chunks, in row order
            visible = int(pos[segs == s].max()) // block_size + 1
            blocks = np.asarray(seg_blocks[s][:visible], dtype=np.int32)
            if len(blocks) < visible:
                raise ValueError(f"chunk {s} has {len(blocks)} blocks, its rows need {visible}")
            ids.append(blocks)
            seg_of.append(np.full(visible, s, dtype=np.int32))
            pos_of.append(np.arange(visible, dtype=np.int32) * block_size)
        if ids:
            tiles.append((np.concatenate(ids), np.concatenate(seg_of), np.concatenate(pos_of)))
        else:
            tiles.append((np.zeros(0, np.int32),) * 3)
    w = width(max(1, max(len(ids) for ids, _, _ in tiles)))
    tile_ids = np.zeros((nt, w), dtype=np.int32)
    tile_seg = np.full((nt, w), -2, dtype=np.int32)  # padded blocks match no row
    tile_pos = np.zeros((nt, w), dtype=np.int32)
    for j, (ids, seg_of, pos_of) in enumerate(tiles):
        tile_ids[j, : len(ids)] = ids
        tile_seg[j, : len(ids)] = seg_of
        tile_pos[j, : len(ids)] = pos_of
    return ChunkMeta(
        np.asarray(row_seg, dtype=np.int32), np.asarray(row_pos, dtype=np.int32), tile_ids, tile_seg, tile_pos
    )
