"""Paged attention over block tables.

The KV cache of one layer is one tensor (kv_cache.py), K and V stacked on its first axis::

    kv_cache  [2, num_blocks, block_size, Hkv, D]     kv_cache[0] = K, kv_cache[1] = V

    flat slot s = block_id * block_size + offset   (token at position p of a request lives in
    block block_ids[p // block_size], offset p % block_size)

One step's rows are ordered decodes first, then the other chunks (prefill / speculative)::

    rows  | d0 d1 ... d(B-1) | chunk 0 tokens | chunk 1 tokens | ...
          '-- num_decodes --'

A backend is picked once at runner construction (attention_dispatch.py: by device kind and compute
capability) and then called for every layer of every step with the same metadata object,
built once per step by ``backend.build_metadata``. ``GatherSDPABackend`` (here) gathers each
sequence's blocks into a contiguous view and calls ``scaled_dot_product_attention`` (CPU, and a
correct-but-slow fallback on CUDA); the Triton paged kernel's backends ``triton_paged`` and
``flash_sdpa`` are in triton_attention.py. Which one a device gets is backends/kernel_dispatch.py's
table, applied by attention_dispatch.py.

Decodes are attended in groups of consecutive rows. Every row of a group is padded to the group's
longest context, so the gather copies ``rows * max_blocks`` blocks per layer; splitting rows sorted
by context length (the runner sorts them, longest first) into a few groups bounds that padding::

    rows (seq_len desc)   | d0 d1 d2 | d3 d4 d5 d6 | d7 |
    groups                | 17 blks  | 9 blocks    | 2  |     one gather + one SDPA call each

A group of one row needs no mask: its gather is sliced to its exact length.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from backends.torch.step_buffers import StepBuffers


@dataclass(slots=True)
class PrefillChunk:
    """A run of rows of one request that is not a plain decode.

    row_start/num_rows: its rows in the flat batch. start_pos: positions already cached before it.
    block_table: [ceil((start_pos + num_rows) / block_size)] int64 blocks covering the context.
    mask: [num_rows, start_pos + num_rows] bool (True = attend) when start_pos > 0; None means a
        fresh sequence attended causally over its own new K/V (no gather).
    """

    row_start: int
    num_rows: int
    start_pos: int
    block_table: torch.Tensor
    mask: torch.Tensor | None


@dataclass(slots=True)
class DecodeGroup:
    """Consecutive decode rows attended with one gather and one SDPA call.

    block_table: [num_rows * max_blocks] int64, row-major, padded with block 0.
    context_len: keys each row attends over after the gather: max_blocks * block_size, or the exact
        seq_len when num_rows == 1.
    mask: [num_rows, 1, 1, context_len] bool (True = attend), None when every row's seq_len equals
        context_len.
    seq_lens: [num_rows] int64 keys of each row, for backends that attend over the blocks in place
        (cpu_attention.py: no padding, no mask); None here.
    """

    row_start: int
    num_rows: int
    block_table: torch.Tensor
    context_len: int
    mask: torch.Tensor | None
    seq_lens: torch.Tensor | None = None


@dataclass(slots=True)
class AttentionMetadata:
    """Per-step attention inputs, shared by every layer.

    slot_mapping: [T] int64 flat cache slot of each row's new K/V.
    num_decodes: leading rows that are single-token decodes.
    decode_groups: partition of the decode rows [0, num_decodes) into consecutive groups.
    """

    slot_mapping: torch.Tensor
    num_decodes: int = 0
    decode_groups: list[DecodeGroup] = field(default_factory=list)
    chunks: list[PrefillChunk] = field(default_factory=list)


@dataclass(slots=True)
class PagedMetadata:
    """Per-row metadata of the Triton paged kernel (triton_attention.py); fixed shape per batch, so a
    decode step's can live in a CUDA graph's static buffers (cuda_graphs.py)."""

    slot_mapping: torch.Tensor  # [T] int64; -1 = a padded row (nothing stored)
    block_tables: torch.Tensor  # [T, W] int32
    ctx_lens: torch.Tensor  # [T] int32; 0 = a padded row, or one SDPA serves
    sdpa_chunks: list[tuple[int, int]] = field(default_factory=list)  # (row_start, num_rows), flash_sdpa only


# A new decode group costs one more gather + SDPA call per layer (~tens of us each on CPU); split
# only where it saves more padded blocks than this (padded row-blocks; one is block_size tokens).
GROUP_SPLIT_MIN_SAVED_BLOCKS = 16


def split_decode_groups(num_blocks: list[int], min_saved_blocks: int = GROUP_SPLIT_MIN_SAVED_BLOCKS) -> list[int]:
    """Start rows of decode groups for rows needing ``num_blocks`` blocks each (best sorted desc).

    Greedy, one pass: a row opens a new group when padding it and every later row to the current
    group's width would waste more than ``min_saved_blocks`` blocks beyond padding them to its own.
    """
    starts = [0]
    width = num_blocks[0] if num_blocks else 0
    n = len(num_blocks)
    for i in range(1, n):
        nb = num_blocks[i]
        if (width - nb) * (n - i) > min_saved_blocks:
            starts.append(i)
            width = nb
        else:
            width = max(width, nb)
    return starts


_ARANGE = np.arange(0, dtype=np.int64)


def arange_view(n: int) -> np.ndarray:
    """0..n-1 as int64, a view of one array kept between steps (grown in powers of two)."""
    global _ARANGE
    if _ARANGE.size < n:
        _ARANGE = np.arange(1 << max(0, n - 1).bit_length(), dtype=np.int64)
    return _ARANGE[:n]


def as_slot_tensor(slot_mapping: np.ndarray | torch.Tensor, buffers: StepBuffers) -> torch.Tensor:
    """The step's slot mapping as an int64 tensor on the device: as given when it already is one (the
    runner's, in its step buffers), else copied into a piece of ``buffers``."""
    if isinstance(slot_mapping, torch.Tensor):
        return slot_mapping
    return buffers.put(np.asarray(slot_mapping, dtype=np.int64))


class AttentionBackend:
    """Writes new K/V into the paged cache and attends. Subclasses own their metadata format."""

    name = "base"
    static_metadata = False  # True: metadata is fixed-shape tensors, so decode steps can be graph-captured

    def __init__(self, num_heads: int, num_kv_heads: int, head_dim: int, block_size: int, device: torch.device):
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.block_size = block_size
        self.device = device
        self.scale = head_dim**-0.5

    def build_metadata(
        self,
        decode_seq_lens: list[int],
        decode_block_ids: list[list[int]],
        chunk_specs: list[tuple[int, int, list[int]]],  # (start_pos, num_rows, block_ids) per chunk
        slot_mapping: np.ndarray | torch.Tensor,  # [T] int64; a tensor: already on the device
        buffers: StepBuffers | None = None,  # the runner's step buffers (step_buffers.py); None: fresh ones
    ) -> AttentionMetadata:
        """Builds the step's metadata into pieces of ``buffers`` (uploaded by the caller, who owns them),
        or, without buffers, into fresh memory uploaded here."""
        raise NotImplementedError

    def forward(
        self,
        q: torch.Tensor,  # [T, H, D]
        k: torch.Tensor,  # [T, Hkv, D]
        v: torch.Tensor,  # [T, Hkv, D]
        kv_cache: torch.Tensor,  # [2, N, bs, Hkv, D]
        meta: AttentionMetadata,
    ) -> torch.Tensor:  # [T, H * D]
        raise NotImplementedError


class GatherSDPABackend(AttentionBackend):
    """Gather the blocks of each sequence, then one SDPA call for all decodes and one per chunk."""

    name = "gather_sdpa"

    def build_metadata(self, decode_seq_lens, decode_block_ids, chunk_specs, slot_mapping, buffers=None):
        bs = self.block_size
        own = buffers is None
        buf = StepBuffers(self.device) if own else buffers
        meta = AttentionMetadata(slot_mapping=as_slot_tensor(slot_mapping, buf))
        num_decodes = len(decode_seq_lens)
        meta.num_decodes = num_decodes
        if num_decodes:
            self._decode_metadata(meta, decode_seq_lens, decode_block_ids, buf)
        row = num_decodes
        for start_pos, num_rows, block_ids in chunk_specs:
            ctx = start_pos + num_rows
            nb = -(-ctx // bs)
            mask = None
            if start_pos > 0:
                # row i sits at position start_pos + i and sees keys 0..start_pos + i
                mask_np, mask = buf.take(num_rows * ctx, torch.bool)
                np.less_equal(
                    arange_view(ctx)[None, :],
                    start_pos + arange_view(num_rows)[:, None],
                    out=mask_np.reshape(num_rows, ctx),
                )
                mask = mask.view(num_rows, ctx)
            table_np, table = buf.take(nb)
            table_np[:] = block_ids[:nb]
            meta.chunks.append(PrefillChunk(row, num_rows, start_pos, table, mask))
            row += num_rows
        if own:
            buf.upload()
        return meta

    def _decode_metadata(self, meta, decode_seq_lens, decode_block_ids, buf: StepBuffers) -> None:
        """The decode rows' part of ``meta``: groups of rows, each a padded block table (and a mask)."""
        bs = self.block_size
        num_decodes = len(decode_seq_lens)
        num_blocks = [-(-n // bs) for n in decode_seq_lens]
        starts = split_decode_groups(num_blocks)
        for start, end in zip(starts, [*starts[1:], num_decodes]):
            rows = end - start
            if rows == 1:
                n, nb = decode_seq_lens[start], num_blocks[start]
                table_np, table = buf.take(nb)
                table_np[:] = decode_block_ids[start][:nb]
                meta.decode_groups.append(DecodeGroup(start, 1, table, n, None))
                continue
            width = max(num_blocks[start:end])
            table_np, table = buf.take(rows * width)
            table_np[:] = 0
            table_rows = table_np.reshape(rows, width)
            for i in range(rows):
                nb = num_blocks[start + i]
                table_rows[i, :nb] = decode_block_ids[start + i][:nb]
            mask = None
            if any(n != width * bs for n in decode_seq_lens[start:end]):
                keys = width * bs
                mask_np, mask = buf.take(rows * keys, torch.bool)
                seq_lens = np.asarray(decode_seq_lens[start:end], dtype=np.int64)
                np.less(arange_view(keys)[None, :], seq_lens[:, None], out=mask_np.reshape(rows, keys))
                mask = mask.view(rows, 1, 1, keys)
            meta.decode_groups.append(DecodeGroup(start, rows, table, width * bs, mask))

    def _gather(self, kv_cache: torch.Tensor, block_table: torch.Tensor) -> torch.Tensor:
        """K and V of the listed blocks in one copy: [2, len(block_table) * bs, Hkv, D]."""
        n = kv_cache.shape[1]
        flat = kv_cache.view(2, n, -1).index_select(1, block_table)  # [2, nb, bs * Hkv * D]
        return flat.view(2, -1, self.num_kv_heads, self.head_dim)

    def _attend_decodes(self, q: torch.Tensor, kv_cache: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        """The decode rows' attention output [num_decodes, H * D] (their K/V already in the cache)."""
        h, hkv, d = self.num_heads, self.num_kv_heads, self.head_dim
        outs: list[torch.Tensor] = []
        for g in meta.decode_groups:
            b, ctx = g.num_rows, g.context_len
            kv = self._gather(kv_cache, g.block_table)  # [2, b * L_pad, Hkv, D]
            kv = kv.view(2, b, -1, hkv, d)[:, :, :ctx].transpose(2, 3)  # [2, b, Hkv, ctx, D]
            # GQA folded into the query axis: the H // Hkv heads sharing a KV head are its query rows
            qd = q[g.row_start : g.row_start + b].reshape(b, hkv, h // hkv, d)  # [b, Hkv, g, D]
            o = F.scaled_dot_product_attention(qd, kv[0], kv[1], attn_mask=g.mask)  # [b, Hkv, g, D]
            outs.append(o.reshape(b, h * d))
        return outs[0] if len(outs) == 1 else torch.cat(outs, dim=0)

    def forward(self, q, k, v, kv_cache, meta):
        t = q.shape[0]
        h, hkv, d = self.num_heads, self.num_kv_heads, self.head_dim
        kv_cache[0].view(-1, hkv, d).index_copy_(0, meta.slot_mapping, k)
        kv_cache[1].view(-1, hkv, d).index_copy_(0, meta.slot_mapping, v)

        outs: list[torch.Tensor] = []
        if meta.num_decodes:
            outs.append(self._attend_decodes(q, kv_cache, meta))
        for c in meta.chunks:
            qc = q[c.row_start : c.row_start + c.num_rows].transpose(0, 1)  # [H, n, D]
            if c.mask is None:
                kc = k[c.row_start : c.row_start + c.num_rows].transpose(0, 1)  # [Hkv, n, D]
                vc = v[c.row_start : c.row_start + c.num_rows].transpose(0, 1)
                o = sdpa_one(qc, kc, vc, is_causal=True)
            else:
                ctx = c.start_pos + c.num_rows
                kv = self._gather(kv_cache, c.block_table)[:, :ctx].transpose(1, 2)  # [2, Hkv, ctx, D]
                o = sdpa_one(qc, kv[0], kv[1], attn_mask=c.mask)
            outs.append(o.transpose(0, 1).reshape(c.num_rows, h * d))
        if len(outs) == 1:
            return outs[0]
        out = torch.cat(outs, dim=0)
        assert out.shape[0] == t
        return out


def sdpa_one(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **kwargs) -> torch.Tensor:
    """One sequence's attention, q [H, n, D] over k, v [Hkv, ctx, D] (GQA), as a batch of one: PyTorch sends a 3-D
    call to its math path on the CPU and a 4-D one to its flash kernel, ~2.7x faster at 512 tokens and ~8x at 2,048
    (bench/results/2026-12-05-sdpa-4d.json). The same values, to fp32 rounding."""
    return F.scaled_dot_product_attention(q[None], k[None], v[None], enable_gqa=True, **kwargs)[0]
