"""Attention backends on the Triton paged kernel (triton_kernels.py): ``triton_paged`` and ``flash_sdpa``.

Metadata is four tensors with one row per step row, whatever the row's kind, so a decode step's
metadata has a fixed shape per batch bucket and can be written into a CUDA graph's static buffers::

    slot_mapping  [T]      int64   flat cache slot of the row's new K/V (-1: a padded row, nothing stored)
    block_tables  [T, W]   int32   the row's sequence's blocks (rows of one chunk repeat the same table)
    ctx_lens      [T]      int32   keys the row attends: its position + 1 (0: padded, or served by SDPA)

``triton_paged`` runs every row through the paged kernel. ``flash_sdpa`` runs the rows of fresh prompts
(no cached history) through SDPA's causal kernel over the new K/V, which is FlashAttention on SM80+,
and every other row (decodes, speculative verify rows, chunks after a cached prefix) through the paged
kernel; their ``ctx_lens`` are 0 in the kernel's launch.
"""

from __future__ import annotations

import numpy as np

from backends.torch.attention import AttentionBackend, PagedMetadata, as_slot_tensor, sdpa_one
from backends.torch.step_buffers import StepBuffers
from backends.torch.triton_kernels import paged_attention, store_kv


def paged_rows(
    decode_seq_lens: list[int],
    decode_block_ids: list[list[int]],
    chunk_specs: list[tuple[int, int, list[int]]],
    block_size: int,
    width: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Per-row block tables [T, W] int32 (zero-padded) and context lengths [T] int32.

    Rows are decodes first, then each chunk's rows; ``width`` (W) defaults to the widest table needed.
    """
    num_blocks = [-(-n // block_size) for n in decode_seq_lens]
    num_blocks += [-(-(start + n) // block_size) for start, n, _ in chunk_specs]
    w = max(num_blocks, default=1) if width is None else width
    if num_blocks and max(num_blocks) > w:
        raise ValueError(f"a row needs {max(num_blocks)} blocks, more than the table width {w}")
    num_rows = len(decode_seq_lens) + sum(n for _, n, _ in chunk_specs)
    tables = np.zeros((num_rows, max(w, 1)), dtype=np.int32)
    ctx = np.zeros(num_rows, dtype=np.int32)
    for i, (n, ids) in enumerate(zip(decode_seq_lens, decode_block_ids)):
        nb = num_blocks[i]
        tables[i, :nb] = ids[:nb]
        ctx[i] = n
    row = len(decode_seq_lens)
    for j, (start, n, ids) in enumerate(chunk_specs):
        nb = num_blocks[len(decode_seq_lens) + j]
        tables[row : row + n, :nb] = ids[:nb]
        ctx[row : row + n] = np.arange(start + 1, start + n + 1, dtype=np.int32)
        row += n
    return tables, ctx


class TritonPagedBackend(AttentionBackend):
    """Every row through the Triton paged kernel (SM75, SM89; any device under TRITON_INTERPRET=1)."""

    name = "triton_paged"
    static_metadata = True  # metadata is fixed-shape tensors: decode can run in a CUDA graph
    sdpa_for_fresh_prompts = False

    def build_metadata(self, decode_seq_lens, decode_block_ids, chunk_specs, slot_mapping, buffers=None):
        tables, ctx = paged_rows(decode_seq_lens, decode_block_ids, chunk_specs, self.block_size)
        sdpa_chunks: list[tuple[int, int]] = []
        if self.sdpa_for_fresh_prompts:
            row = len(decode_seq_lens)
            for start, n, _ in chunk_specs:
                if start == 0:
                    sdpa_chunks.append((row, n))
                    ctx[row : row + n] = 0
                row += n
        own = buffers is None
        buf = StepBuffers(self.device) if own else buffers
        meta = PagedMetadata(
            slot_mapping=as_slot_tensor(slot_mapping, buf),
            block_tables=buf.put(tables),
            ctx_lens=buf.put(ctx),
            sdpa_chunks=sdpa_chunks,
        )
        if own:
            buf.upload()
        return meta

    def forward(self, q, k, v, kv_cache, meta: PagedMetadata):
        t = q.shape[0]
        store_kv(k, v, kv_cache, meta.slot_mapping)
        out = paged_attention(q, kv_cache, meta.block_tables, meta.ctx_lens, self.scale)  # [T, H, D]
        for row, n in meta.sdpa_chunks:
            qc = q[row : row + n].transpose(0, 1)  # [H, n, D]
            kc = k[row : row + n].transpose(0, 1)  # [Hkv, n, D]
            vc = v[row : row + n].transpose(0, 1)
            o = sdpa_one(qc, kc, vc, is_causal=True)  # [H, n, D]
            out[row : row + n] = o.transpose(0, 1)
        return out.view(t, self.num_heads * self.head_dim)


class FlashSDPABackend(TritonPagedBackend):
    """Fresh prompts through SDPA (FlashAttention on SM80+), every other row through the paged kernel."""

    name = "flash_sdpa"
    sdpa_for_fresh_prompts = True
