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

Flash-decoding (vLLM's paged attention v2 does the same with 512-key partitions): when rows x KV heads are
too few programs to fill the GPU (small decode batches), each row's keys are also split over several
programs, each keeping its own (m, l, acc), and a second kernel merges them; and each iteration gathers a
tile of several pages, not one. attention_tiling() picks both; ``num_splits`` forces a split count. An
eager launch over short tables keeps one split (EAGER_SPLIT_MIN_KEYS): there the second launch costs more
host time than the split saves GPU time.

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
    out_ptr,  # [T, H, D] contiguous (one split), or the splits' fp32 acc [T, H, S, D]
    ml_ptr,  # the splits' fp32 (m, l) [2, T, H, S]; unused with one split
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
    TILE: tl.constexpr,  # keys per iteration: a multiple of BLOCK_SIZE (several pages gathered at once)
    NUM_SPLITS: tl.constexpr,
):
    t = tl.program_id(0)
    kvh = tl.program_id(1)
    split = tl.program_id(2)
    ctx_len = tl.load(ctx_ptr + t)
    # the row's keys shared out evenly, in whole tiles, from its context length read here on the device
    # (not from the table width): a CUDA graph's fixed grid still splits each row's actual context
    split_keys = tl.cdiv(tl.cdiv(ctx_len, NUM_SPLITS), TILE) * TILE
    first = split * split_keys
    last = tl.minimum(ctx_len, first + split_keys)

    g = tl.arange(0, GROUP_PAD)  # [G]
    d = tl.arange(0, HEAD_DIM_PAD)  # [D]
    kidx = tl.arange(0, TILE)  # [K]
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
    for start in range(first, last, TILE):
        pos = start + kidx  # [K]
        key_ok = pos < last
        block = tl.load(tables_ptr + t * stride_tables + pos // BLOCK_SIZE, mask=key_ok, other=0).to(tl.int64)
        slot = block * BLOCK_SIZE + pos % BLOCK_SIZE
        offs = slot[:, None] * token_stride + kvh * HEAD_DIM + d[None, :]  # [K, D]
        kv_mask = key_ok[:, None] & d_mask[None, :]
        k = tl.load(cache_ptr + offs, mask=kv_mask, other=0.0).to(tl.float32)  # [K, D]
        v = tl.load(cache_ptr + stride_cache_kv + offs, mask=kv_mask, other=0.0).to(tl.float32)
        s = tl.sum(q[:, None, :] * k[None, :, :], axis=2)  # [G, K]
        s = tl.where(key_ok[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))  # [G]; finite: the tile's first key is valid
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new[:, None])  # [G, K]
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.sum(p[:, :, None] * v[None, :, :], axis=1)  # [G, D]
        m_i = m_new
    gd_mask = g_mask[:, None] & d_mask[None, :]
    if NUM_SPLITS == 1:
        l_safe = tl.where(l_i > 0.0, l_i, 1.0)
        out = acc / l_safe[:, None]
        dst = out_ptr + (t * GROUP * NUM_KV_HEADS + heads[:, None]) * HEAD_DIM + d[None, :]
        tl.store(dst, out.to(out_ptr.dtype.element_ty), mask=gd_mask)
    else:  # this split's unnormalised partial; _merge_splits_kernel combines them
        row = (t * GROUP * NUM_KV_HEADS + heads) * NUM_SPLITS + split  # [G]
        tl.store(out_ptr + row[:, None] * HEAD_DIM + d[None, :], acc, mask=gd_mask)
        ml_stride = tl.num_programs(0) * GROUP * NUM_KV_HEADS * NUM_SPLITS
        tl.store(ml_ptr + row, m_i, mask=g_mask)
        tl.store(ml_ptr + ml_stride + row, l_i, mask=g_mask)


@triton.jit
def _merge_splits_kernel(
    acc_ptr,  # [T, H, S, D] fp32
    ml_ptr,  # [2, T, H, S] fp32
    out_ptr,  # [T, H, D] contiguous
    ml_stride,  # T * H * S
    NUM_SPLITS: tl.constexpr,
    SPLITS_PAD: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    HEAD_DIM_PAD: tl.constexpr,
):
    """One program per (row, head): out = sum_s w_s acc_s / sum_s w_s l_s, w_s = exp(m_s - max m)."""
    row = tl.program_id(0) * tl.num_programs(1) + tl.program_id(1)
    s = tl.arange(0, SPLITS_PAD)
    d = tl.arange(0, HEAD_DIM_PAD)
    s_mask = s < NUM_SPLITS
    d_mask = d < HEAD_DIM
    m = tl.load(ml_ptr + row * NUM_SPLITS + s, mask=s_mask, other=float("-inf"))
    l_s = tl.load(ml_ptr + ml_stride + row * NUM_SPLITS + s, mask=s_mask, other=0.0)
    m_max = tl.max(m, axis=0)
    m_max = tl.where(m_max == float("-inf"), 0.0, m_max)  # no keys at all (ctx 0): zeros
    w = tl.exp(m - m_max)  # [S]; 0 for an empty split
    l_sum = tl.sum(w * l_s, axis=0)
    acc = tl.load(
        acc_ptr + (row * NUM_SPLITS + s[:, None]) * HEAD_DIM + d[None, :],
        mask=s_mask[:, None] & d_mask[None, :],
        other=0.0,
    )
    out = tl.sum(w[:, None] * acc, axis=0) / tl.where(l_sum > 0.0, l_sum, 1.0)
    tl.store(out_ptr + row * HEAD_DIM + d, out.to(out_ptr.dtype.element_ty), mask=d_mask)


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


_TILE_ELEMENTS = 8192  # G_pad * tile * D_pad fp32 products per iteration: ~64 registers a thread at 4 warps
_MAX_SPLITS = 64


def attention_tiling(
    rows: int, hkv: int, group: int, head_dim: int, width: int, block_size: int, num_sms: int
) -> tuple[int, int]:
    """(tile, num_splits) of one launch over block tables ``width`` blocks wide.

    tile: keys per loop iteration, as many pages as fit the register budget (at least one page).
    num_splits: enough (row, KV head, split) programs to fill the GPU twice, rounded up to a power of two
        (flash-decoding; vLLM's paged attention v2 splits by 512 keys), at most 64 and one per tile of the
        widest table; 1 (and one-page tiles) when rows x KV heads already fill it. Each program takes its
        share of its row's actual context (read on the device).
    Static per (rows, width): a CUDA graph's bucket replays the same grid whatever its context lengths."""
    want = -(-2 * num_sms // (rows * hkv))
    if want <= 1:  # the grid is full already: one page a tile, the launch as before (measured no slower)
        return block_size, 1
    tile = max(block_size, min(128, _TILE_ELEMENTS // (_pad(group) * _pad(head_dim))))
    tile = max(block_size, tile // block_size * block_size)
    return tile, _splits(width * block_size, tile, want)


def _splits(max_keys: int, tile: int, want: int) -> int:
    """A power of two (each count compiles its own kernel: a few, however the tables' widths vary), at most
    one per tile of the widest table and _MAX_SPLITS."""
    splits = min(_MAX_SPLITS, _pad(want), _pad(-(-max_keys // tile)))
    return max(1, splits)


# (num_splits, tile) for every launch, or None: how bench/paged_attention_ab.py runs the one-split, one-page
# kernel (the layout before flash-decoding) beside the default in the same process
FORCED_TILING: tuple[int, int] | None = None

# An eager launch (not under CUDA-graph capture) splits only when its widest table reaches this many keys.
# Measured on an H200 (bench/results/2026-12-04-paged-attention-ab-h200.json): the split path's second
# launch and scratch cost ~45 us of host time a call, while the one-split kernel's GPU time is ~0.1 ms at
# 512 keys (a wash) and ~0.8 ms at 4,096 (the split saves ~0.7 ms). Captured graphs replay with no host
# cost, so they always split.
EAGER_SPLIT_MIN_KEYS = 1024


def _eager_on_cuda(device: torch.device) -> bool:
    return device.type == "cuda" and not torch.cuda.is_current_stream_capturing()


_SM_COUNT: dict[int, int] = {}


def _num_sms(device: torch.device) -> int:
    if device.type != "cuda":
        return 4  # the interpreter: small, but enough for the split path to run
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _SM_COUNT:
        _SM_COUNT[index] = torch.cuda.get_device_properties(index).multi_processor_count
    return _SM_COUNT[index]


def paged_attention(
    q: torch.Tensor,  # [T, H, D]
    kv_cache: torch.Tensor,  # [2, N, bs, Hkv, D]
    block_tables: torch.Tensor,  # [T, W] int32
    ctx_lens: torch.Tensor,  # [T] int32
    scale: float,
    out: torch.Tensor | None = None,  # [T, H, D]
    num_splits: int | None = None,  # None = attention_tiling's; tests force 1 or several (up to 64)
    tile: int | None = None,  # None = attention_tiling's; tests force a power of two >= the block size
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
    width = block_tables.shape[1]
    chosen_tile, splits = attention_tiling(t, hkv, group, d, width, bs, _num_sms(q.device))
    if splits > 1 and width * bs < EAGER_SPLIT_MIN_KEYS and _eager_on_cuda(q.device):
        chosen_tile, splits = bs, 1  # a second launch would cost more host time than its split saves
    if FORCED_TILING is not None:
        num_splits, tile = FORCED_TILING
    tile = tile or chosen_tile
    if num_splits is not None:  # forced (tests): exactly that many, empty ones too
        splits = max(1, min(_MAX_SPLITS, num_splits))
    if splits == 1:
        part, ml = out, out  # written directly
    else:
        scratch = torch.empty(t * h * splits * (d + 2), dtype=torch.float32, device=q.device)  # one allocation
        part, ml = scratch[: t * h * splits * d], scratch[t * h * splits * d :]  # acc [T,H,S,D]; (m, l) [2,T,H,S]
    _paged_attention_kernel[(t, hkv, splits)](
        q,
        kv_cache,
        block_tables,
        ctx_lens,
        part,
        ml,
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
        TILE=tile,
        NUM_SPLITS=splits,
    )
    if splits > 1:
        _merge_splits_kernel[(t, h)](part, ml, out, t * h * splits, splits, _pad(splits), d, _pad(d))
    return out
