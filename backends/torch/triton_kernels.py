"""Triton kernels of the paged KV cache: storing a step's new K/V, and attention over block tables.

Both run on CUDA, and on CPU tensors under ``TRITON_INTERPRET=1`` (how the tests check them here).
Cache layout (backends/torch/kv_cache.py), one layer::

    kv_cache  [2, num_blocks, block_size, Hkv, D]      kv_cache[0] = K, kv_cache[1] = V

Attention is one program per (query row, KV head), the layout of vLLM's paged-attention v1 and of the
"unified" Triton attention in vllm/attention/ops/triton_unified_attention.py (vLLM 0.9; the idea, not the
code). Every row carries its own block table row and context length, so decode rows, speculative verify
rows and prefill rows with cached history all go through the same launch::

    row t:  q[t, kvh*G : (kvh+1)*G, :]        the G = H // Hkv query heads sharing KV head kvh (GQA)
            block_tables[t, :]                 its sequence's blocks
            ctx_lens[t]                        keys it sees: positions 0 .. ctx_lens[t]-1 (causal: pos + 1)

    for each key block j < ceil(ctx_lens[t] / block_size):          online softmax (Milakov & Gimelshein)
        K_j, V_j = kv_cache[:, block_tables[t, j], :, kvh, :]        [bs, D] each
        s = (q @ K_j^T) * scale, keys >= ctx_lens[t] masked         [G, bs]
        m, l, acc updated                                            acc [G, D]
    out[t, heads] = acc / l

A row with ``ctx_lens[t] == 0`` (a padded row of a CUDA-graph bucket, or a row another kernel serves)
writes zeros. The dot products are broadcast-multiply-and-sum rather than ``tl.dot``: G is 1-8 and the
head dim may be 8 in tests, below ``tl.dot``'s 16x16 minimum; decode is bound by reading K/V anyway.
All arithmetic is fp32 whatever the cache dtype (fp32, bf16, fp16 or fp8 values are upcast on load).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _store_kv_kernel(
    k_ptr,  # [T, Hkv, D]
    v_ptr,
    cache_ptr,  # [2, N * bs, Hkv * D] (flat slots)
    slot_ptr,  # [T] int64; < 0 = skip the row
    stride_kt,
    stride_vt,
    stride_cache_kv,
    HKV_D: tl.constexpr,
    HKV_D_PAD: tl.constexpr,
):
    t = tl.program_id(0)
    slot = tl.load(slot_ptr + t)
    if slot >= 0:
        offs = tl.arange(0, HKV_D_PAD)
        mask = offs < HKV_D
        k = tl.load(k_ptr + t * stride_kt + offs, mask=mask)
        v = tl.load(v_ptr + t * stride_vt + offs, mask=mask)
        dst = cache_ptr + slot * HKV_D + offs
        tl.store(dst, k.to(cache_ptr.dtype.element_ty), mask=mask)
        tl.store(dst + stride_cache_kv, v.to(cache_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _paged_attention_kernel(
    q_ptr,  # [T, H, D]
    cache_ptr,  # [2, N, bs, Hkv, D] contiguous
    tables_ptr,  # [T, W] int32
    ctx_ptr,  # [T] int32
    out_ptr,  # [T, H, D] contiguous
    scale,
    stride_qt,
    stride_qh,
    stride_tables,
    stride_cache_kv,
    NUM_KV_HEADS: tl.constexpr,
    GROUP: tl.constexpr,  # H // Hkv
    GROUP_PAD: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    HEAD_DIM_PAD: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
):
    t = tl.program_id(0)
    kvh = tl.program_id(1)
    ctx_len = tl.load(ctx_ptr + t)

    g = tl.arange(0, GROUP_PAD)  # [G]
    d = tl.arange(0, HEAD_DIM_PAD)  # [D]
    kpos = tl.arange(0, BLOCK_SIZE)  # [bs]
    g_mask = g < GROUP
    d_mask = d < HEAD_DIM
    heads = kvh * GROUP + g
    q = tl.load(
        q_ptr + t * stride_qt + heads[:, None] * stride_qh + d[None, :],
        mask=g_mask[:, None] & d_mask[None, :],
        other=0.0,
    ).to(tl.float32)  # [G, D]
    q = q * scale

    m_i = tl.full([GROUP_PAD], float("-inf"), tl.float32)
    l_i = tl.zeros([GROUP_PAD], tl.float32)
    acc = tl.zeros([GROUP_PAD, HEAD_DIM_PAD], tl.float32)
    token_stride = NUM_KV_HEADS * HEAD_DIM  # elements between consecutive slots of one block
    for start in range(0, ctx_len, BLOCK_SIZE):
        block = tl.load(tables_ptr + t * stride_tables + start // BLOCK_SIZE).to(tl.int64)
        key_ok = (start + kpos) < ctx_len  # [bs]
        base = block * BLOCK_SIZE * token_stride + kvh * HEAD_DIM
        offs = base + kpos[:, None] * token_stride + d[None, :]  # [bs, D]
        kv_mask = key_ok[:, None] & d_mask[None, :]
        k = tl.load(cache_ptr + offs, mask=kv_mask, other=0.0).to(tl.float32)  # [bs, D]
        v = tl.load(cache_ptr + stride_cache_kv + offs, mask=kv_mask, other=0.0).to(tl.float32)
        s = tl.sum(q[:, None, :] * k[None, :, :], axis=2)  # [G, bs]
        s = tl.where(key_ok[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))  # [G]; finite: key 0 of every visited block is valid
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new[:, None])  # [G, bs]
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.sum(p[:, :, None] * v[None, :, :], axis=1)  # [G, D]
        m_i = m_new
    l_safe = tl.where(l_i > 0.0, l_i, 1.0)
    out = acc / l_safe[:, None]
    tl.store(
        out_ptr + (t * GROUP * NUM_KV_HEADS + heads[:, None]) * HEAD_DIM + d[None, :],
        out.to(out_ptr.dtype.element_ty),
        mask=g_mask[:, None] & d_mask[None, :],
    )


def _pad(n: int) -> int:
    return triton.next_power_of_2(max(n, 1))


def store_kv(k: torch.Tensor, v: torch.Tensor, kv_cache: torch.Tensor, slot_mapping: torch.Tensor) -> None:
    """Write k/v [T, Hkv, D] into ``kv_cache`` [2, N, bs, Hkv, D] at flat slots [T] (slots < 0 skipped)."""
    t, hkv, d = k.shape
    if t == 0:
        return
    assert k.stride(2) == 1 and k.stride(1) == d and v.stride(2) == 1 and v.stride(1) == d, "rows must be packed"
    assert kv_cache.is_contiguous()
    _store_kv_kernel[(t,)](
        k, v, kv_cache, slot_mapping, k.stride(0), v.stride(0), kv_cache.stride(0), hkv * d, _pad(hkv * d)
    )


def paged_attention(
    q: torch.Tensor,  # [T, H, D]
    kv_cache: torch.Tensor,  # [2, N, bs, Hkv, D]
    block_tables: torch.Tensor,  # [T, W] int32
    ctx_lens: torch.Tensor,  # [T] int32
    scale: float,
    out: torch.Tensor | None = None,  # [T, H, D]
) -> torch.Tensor:
    """Attention of each row over its own first ``ctx_lens[t]`` cached keys; [T, H, D] in q's dtype."""
    t, h, d = q.shape
    _, _, bs, hkv, d_cache = kv_cache.shape
    if d_cache != d or h % hkv:
        raise ValueError(f"q heads {h} x {d} do not fit a cache of {hkv} KV heads x {d_cache}")
    assert q.stride(2) == 1 and kv_cache.is_contiguous() and block_tables.stride(1) == 1
    if out is None:
        out = torch.empty((t, h, d), dtype=q.dtype, device=q.device)
    if t == 0:
        return out
    group = h // hkv
    _paged_attention_kernel[(t, hkv)](
        q,
        kv_cache,
        block_tables,
        ctx_lens,
        out,
        scale,
        q.stride(0),
        q.stride(1),
        block_tables.stride(0),
        kv_cache.stride(0),
        NUM_KV_HEADS=hkv,
        GROUP=group,
        GROUP_PAD=_pad(group),
        HEAD_DIM=d,
        HEAD_DIM_PAD=_pad(d),
        BLOCK_SIZE=bs,
    )
    return out
