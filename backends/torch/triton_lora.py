"""Triton kernels of batched LoRA: every row gathers its own adapter's slot (Punica's BGMV, one launch for
all the rows of a step whatever their adapters), for the CUDA path of lora_batch.py.

Both run on CUDA, and on CPU tensors under ``TRITON_INTERPRET=1`` (how the tests check them here).
Slot layouts are lora_slots.py's, one layer's slice::

    a  [S, in, nR]     the group's A matrices side by side (n projections of rank R), per slot
    b  [S, R, out]     one projection's B (scaling folded in), per slot

    shrink   row t, slot s = row_slots[t] (< 0: skip):   y[t, :]  = x[t, :] @ a[s]              [nR]
    expand   row t, slot s:                              out[t, col0 : col0 + out] += y[t, j*R : (j+1)*R] @ b[s]

The decomposition (shrink to the rank, then expand) is Punica's (Chen et al., "Punica: Multi-Tenant LoRA
Serving", 2023; the BGMV kernels of punica/csrc/bgmv, and vLLM's Triton ``lora_shrink`` / ``lora_expand``
in vllm/lora/ops/triton_ops, vLLM 0.8) -- the idea, not their code. Programs: one per (row, block of output
columns); the reduction runs in fp32 by broadcast-multiply-and-sum (no ``tl.dot``: a decode row is a
single vector, and tests use ranks below ``tl.dot``'s 16). Outputs are read, added to and written back in
their own dtype; rows whose slot is negative (no adapter) are not touched at all.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

BLOCK_K = 32  # input features per step of the shrink's reduction
BLOCK_N = 64  # output columns per program (expand) / rank columns per program (shrink)
BLOCK_RANK = 16  # rank entries per step of the expand's reduction


@triton.jit
def _shrink_kernel(
    x_ptr,  # [T, IN]
    a_ptr,  # [S, IN, NR] contiguous
    slot_ptr,  # [T] int32
    y_ptr,  # [T, NR] fp32 contiguous
    stride_xt,
    IN: tl.constexpr,
    NR: tl.constexpr,
    BLOCK_K: tl.constexpr,
    BLOCK_R: tl.constexpr,
):
    t = tl.program_id(0)
    r = tl.program_id(1) * BLOCK_R + tl.arange(0, BLOCK_R)  # [BR]
    r_mask = r < NR
    slot = tl.load(slot_ptr + t).to(tl.int64)
    if slot >= 0:
        acc = tl.zeros([BLOCK_R], tl.float32)
        a_base = a_ptr + slot * IN * NR
        for k0 in range(0, IN, BLOCK_K):
            k = k0 + tl.arange(0, BLOCK_K)  # [BK]
            k_mask = k < IN
            xk = tl.load(x_ptr + t * stride_xt + k, mask=k_mask, other=0.0).to(tl.float32)  # [BK]
            ak_mask = k_mask[:, None] & r_mask[None, :]
            ak = tl.load(a_base + k[:, None] * NR + r[None, :], mask=ak_mask, other=0.0).to(tl.float32)  # [BK, BR]
            acc += tl.sum(xk[:, None] * ak, axis=0)
        tl.store(y_ptr + t * NR + r, acc, mask=r_mask)


@triton.jit
def _expand_kernel(
    y_ptr,  # [T, NR] fp32 contiguous
    b_ptr,  # [S, R, OUT] contiguous
    slot_ptr,  # [T] int32
    out_ptr,  # [T, *] (columns col0 .. col0 + OUT are this projection's)
    stride_ot,
    y_col0,  # this projection's first column of y (j * R)
    out_col0,
    NR: tl.constexpr,
    R: tl.constexpr,
    OUT: tl.constexpr,
    BLOCK_R: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    t = tl.program_id(0)
    n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)  # [BN]
    n_mask = n < OUT
    slot = tl.load(slot_ptr + t).to(tl.int64)
    if slot >= 0:
        delta = tl.zeros([BLOCK_N], tl.float32)
        b_base = b_ptr + slot * R * OUT
        for r0 in range(0, R, BLOCK_R):
            r = r0 + tl.arange(0, BLOCK_R)  # [BR]
            r_mask = r < R
            yr = tl.load(y_ptr + t * NR + y_col0 + r, mask=r_mask, other=0.0)  # [BR]
            br_mask = r_mask[:, None] & n_mask[None, :]
            br = tl.load(b_base + r[:, None] * OUT + n[None, :], mask=br_mask, other=0.0).to(tl.float32)  # [BR, BN]
            delta += tl.sum(yr[:, None] * br, axis=0)  # [BN]
        dst = out_ptr + t * stride_ot + out_col0 + n
        old = tl.load(dst, mask=n_mask, other=0.0).to(tl.float32)
        tl.store(dst, (old + delta).to(out_ptr.dtype.element_ty), mask=n_mask)


def lora_shrink(x: torch.Tensor, a: torch.Tensor, row_slots: torch.Tensor) -> torch.Tensor:
    """y [T, nR] fp32 = x[t] @ a[row_slots[t]] for rows with a slot >= 0 (other rows: left unwritten).
    x [T, in] (rows may be strided, columns packed); a [S, in, nR] contiguous; row_slots [T] int32."""
    t, num_in = x.shape
    _, a_in, nr = a.shape
    if a_in != num_in or row_slots.shape != (t,):
        raise ValueError(f"lora_shrink: x {tuple(x.shape)}, a {tuple(a.shape)}, row_slots {tuple(row_slots.shape)}")
    assert x.stride(1) == 1 and a.is_contiguous() and row_slots.dtype == torch.int32
    y = torch.empty((t, nr), dtype=torch.float32, device=x.device)
    if t:
        block_r = min(BLOCK_N, triton.next_power_of_2(nr))
        _shrink_kernel[(t, triton.cdiv(nr, block_r))](
            x, a, row_slots, y, x.stride(0), IN=num_in, NR=nr, BLOCK_K=BLOCK_K, BLOCK_R=block_r
        )
    return y


def lora_expand(
    y: torch.Tensor, b: torch.Tensor, row_slots: torch.Tensor, out: torch.Tensor, y_col0: int, out_col0: int
) -> None:
    """out[t, out_col0 : out_col0 + out_features] += y[t, y_col0 : y_col0 + R] @ b[row_slots[t]] for rows with
    a slot >= 0. y [T, nR] fp32 contiguous (lora_shrink's); b [S, R, out_features] contiguous; out [T, *]
    with packed columns."""
    t, nr = y.shape
    _, rank, num_out = b.shape
    if y_col0 + rank > nr or out_col0 + num_out > out.shape[1] or out.shape[0] < t:
        raise ValueError(f"lora_expand: y {tuple(y.shape)}, b {tuple(b.shape)}, out {tuple(out.shape)}")
    assert y.is_contiguous() and b.is_contiguous() and out.stride(1) == 1 and row_slots.dtype == torch.int32
    if t:
        block_n = min(BLOCK_N, triton.next_power_of_2(num_out))
        _expand_kernel[(t, triton.cdiv(num_out, block_n))](
            y, b, row_slots, out, out.stride(0), y_col0, out_col0,
            NR=nr, R=rank, OUT=num_out, BLOCK_R=min(BLOCK_RANK, triton.next_power_of_2(rank)), BLOCK_N=block_n,
        )  # fmt: skip
