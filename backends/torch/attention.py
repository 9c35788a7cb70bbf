"""Paged attention over block tables.

The KV cache of one layer is two tensors (kv_cache.py)::

    k_cache, v_cache  [num_blocks, block_size, Hkv, D]

    flat slot s = block_id * block_size + offset   (token at position p of a request lives in
    block block_ids[p // block_size], offset p % block_size)

One step's rows are ordered decodes first, then the other chunks (prefill / speculative)::

    rows  | d0 d1 ... d(B-1) | chunk 0 tokens | chunk 1 tokens | ...
          '-- num_decodes --'

A backend is picked once at runner construction by ``select_attention_backend`` (device kind and
compute capability) and then called for every layer of every step with the same metadata object,
built once per step by ``backend.build_metadata``. Only ``GatherSDPABackend`` exists today: it
gathers each sequence's blocks into a contiguous view and calls ``scaled_dot_product_attention``
(CPU, and a correct-but-slow fallback on CUDA). A paged GPU kernel (flash-attn ``block_table``,
flashinfer) plugs in as another ``AttentionBackend`` subclass registered in
``select_attention_backend``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F


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
class AttentionMetadata:
    """Per-step attention inputs, shared by every layer.

    slot_mapping: [T] int64 flat cache slot of each row's new K/V.
    num_decodes: leading rows that are single-token decodes.
    decode_block_table: [B, max_blocks] int64 (padded with block 0), None when B == 0.
    decode_mask: [B, 1, 1, max_blocks * block_size] bool, True for positions < seq_len.
    """

    slot_mapping: torch.Tensor
    num_decodes: int = 0
    decode_block_table: torch.Tensor | None = None
    decode_mask: torch.Tensor | None = None
    chunks: list[PrefillChunk] = field(default_factory=list)


class AttentionBackend:
    """Writes new K/V into the paged cache and attends. Subclasses own their metadata format."""

    name = "base"
    min_compute_capability: tuple[int, int] | None = None  # CUDA (major, minor); None = any device

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
        slot_mapping: np.ndarray,
    ) -> AttentionMetadata:
        raise NotImplementedError

    def forward(
        self,
        q: torch.Tensor,  # [T, H, D]
        k: torch.Tensor,  # [T, Hkv, D]
        v: torch.Tensor,  # [T, Hkv, D]
        k_cache: torch.Tensor,  # [N, bs, Hkv, D]
        v_cache: torch.Tensor,
        meta: AttentionMetadata,
    ) -> torch.Tensor:  # [T, H * D]
        raise NotImplementedError


class GatherSDPABackend(AttentionBackend):
    """Gather the blocks of each sequence, then one SDPA call for all decodes and one per chunk."""

    name = "gather_sdpa"

    def build_metadata(self, decode_seq_lens, decode_block_ids, chunk_specs, slot_mapping):
        bs = self.block_size
        dev = self.device
        meta = AttentionMetadata(slot_mapping=torch.from_numpy(slot_mapping).to(dev, non_blocking=True))
        num_decodes = len(decode_seq_lens)
        if num_decodes:
            seq_lens = np.asarray(decode_seq_lens, dtype=np.int64)
            max_blocks = int(-(-seq_lens.max() // bs))
            table = np.zeros((num_decodes, max_blocks), dtype=np.int64)
            for i, (n, ids) in enumerate(zip(seq_lens, decode_block_ids)):
                nb = -(-int(n) // bs)
                table[i, :nb] = ids[:nb]
            mask = np.arange(max_blocks * bs)[None, :] < seq_lens[:, None]  # [B, L]
            meta.num_decodes = num_decodes
            meta.decode_block_table = torch.from_numpy(table).to(dev, non_blocking=True)
            meta.decode_mask = torch.from_numpy(mask[:, None, None, :]).to(dev, non_blocking=True)
        row = num_decodes
        for start_pos, num_rows, block_ids in chunk_specs:
            ctx = start_pos + num_rows
            nb = -(-ctx // bs)
            mask = None
            if start_pos > 0:
                # row i sits at position start_pos + i and sees keys 0..start_pos + i
                m = np.arange(ctx)[None, :] <= (start_pos + np.arange(num_rows))[:, None]
                mask = torch.from_numpy(m).to(dev, non_blocking=True)
            table = torch.tensor(block_ids[:nb], dtype=torch.int64, device=dev)
            meta.chunks.append(PrefillChunk(row, num_rows, start_pos, table, mask))
            row += num_rows
        return meta

    def forward(self, q, k, v, k_cache, v_cache, meta):
        t = q.shape[0]
        hkv, d = self.num_kv_heads, self.head_dim
        k_cache.view(-1, hkv, d).index_copy_(0, meta.slot_mapping, k)
        v_cache.view(-1, hkv, d).index_copy_(0, meta.slot_mapping, v)

        outs: list[torch.Tensor] = []
        b = meta.num_decodes
        if b:
            ctx = meta.decode_block_table.shape[1] * self.block_size
            flat_table = meta.decode_block_table.view(-1)  # index_select: ~4x faster than k_cache[table]
            kd = k_cache.index_select(0, flat_table).view(b, ctx, hkv, d).transpose(1, 2)  # [B, Hkv, L, D]
            vd = v_cache.index_select(0, flat_table).view(b, ctx, hkv, d).transpose(1, 2)
            qd = q[:b].unsqueeze(2)  # [B, H, 1, D]
            o = F.scaled_dot_product_attention(qd, kd, vd, attn_mask=meta.decode_mask, enable_gqa=True)
            outs.append(o.reshape(b, self.num_heads * d))
        for c in meta.chunks:
            qc = q[c.row_start : c.row_start + c.num_rows].transpose(0, 1)  # [H, n, D]
            if c.mask is None:
                kc = k[c.row_start : c.row_start + c.num_rows].transpose(0, 1)  # [Hkv, n, D]
                vc = v[c.row_start : c.row_start + c.num_rows].transpose(0, 1)
                o = F.scaled_dot_product_attention(qc, kc, vc, is_causal=True, enable_gqa=True)
            else:
                ctx = c.start_pos + c.num_rows
                kc = k_cache.index_select(0, c.block_table).view(-1, hkv, d)[:ctx].transpose(0, 1)  # [Hkv, ctx, D]
                vc = v_cache.index_select(0, c.block_table).view(-1, hkv, d)[:ctx].transpose(0, 1)
                o = F.scaled_dot_product_attention(qc, kc, vc, attn_mask=c.mask, enable_gqa=True)
            outs.append(o.transpose(0, 1).reshape(c.num_rows, self.num_heads * d))
        if len(outs) == 1:
            return outs[0]
        out = torch.cat(outs, dim=0)
        assert out.shape[0] == t
        return out


# Registered backends, most preferred first. A paged GPU kernel registers here with its
# ``min_compute_capability``; ``gather_sdpa`` (no minimum) is the fallback everywhere.
ATTENTION_BACKENDS: dict[str, type[AttentionBackend]] = {GatherSDPABackend.name: GatherSDPABackend}


def select_attention_backend(
    device: torch.device,
    num_heads: int,
    num_kv_heads: int,
    head_dim: int,
    block_size: int,
    name: str | None = None,
) -> AttentionBackend:
    """Choose the attention implementation once, by device kind and compute capability.

    ``name`` forces a registered backend. Otherwise CPU gets ``gather_sdpa``; a CUDA device gets the
    first registered backend whose ``min_compute_capability`` it meets, else ``gather_sdpa``.
    """
    if name is None:
        name = GatherSDPABackend.name
        if device.type == "cuda":
            capability = torch.cuda.get_device_capability(device)
            for candidate, cls in ATTENTION_BACKENDS.items():
                if cls.min_compute_capability is not None and capability >= cls.min_compute_capability:
                    name = candidate
                    break
    if name not in ATTENTION_BACKENDS:
        raise ValueError(f"unknown attention backend {name!r}; have {sorted(ATTENTION_BACKENDS)}")
    return ATTENTION_BACKENDS[name](num_heads, num_kv_heads, head_dim, block_size, device)
