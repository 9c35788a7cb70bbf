"""Decode attention on the CPU in C: each decode row attends over its own blocks of the paged cache, in place.

``GatherSDPABackend`` (attention.py) serves a batch of decode rows by copying every row's blocks, padded to its
group's longest context, into a contiguous tensor (``index_select``) and calling SDPA with a mask. Profiled on
a batch-32 SmolLM2-135M decode step (fp32, CPU, contexts 64-128), that was ~30% of the step: SDPA's CPU flash
kernel 2.6 ms a layer (it is built for long query blocks; a decode has H / Hkv = 3 query rows per KV head) and
the gather 1.5 ms a layer, against ~60% for all the matmuls together.

``CpuPagedBackend`` keeps everything else of the gather backend (the K/V write, prefill and verify chunks) and
sends the decode rows to ``zoo_paged_decode_attention`` in csrc/cpu_decode.c: one OpenMP region a layer, one
unit of work per (row, KV head) that reads each cached K and V row once for its query heads, no copy, no
padding, no mask. The sums run in another order than SDPA's: outputs differ by float rounding (~1e-6), and a
unit runs on one thread, so the bits do not depend on the thread count.

Chosen by the runner in place of ``gather_sdpa`` wherever the C decode kernel is (cpu_decode.py: a C compiler,
fp32 CPU cache, not ``ZOO_CPU_DECODE=0`` nor ``--no-cpu-decode-kernel``); otherwise the gather path stays.
"""

from __future__ import annotations

import ctypes
from typing import Any

import torch

from backends.torch.attention import AttentionMetadata, DecodeGroup, GatherSDPABackend
from backends.torch.step_buffers import StepBuffers

_P = ctypes.c_void_p
_ERRORS = {-1: "bad shapes", -2: "a context longer than its block table, or a block id out of range"}


def bind(lib: ctypes.CDLL) -> ctypes.CDLL:
    """Declare the attention entry points of the kernel library (cpu_decode.load_library's)."""
    lib.zoo_attn_scratch_floats.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]
    lib.zoo_attn_scratch_floats.restype = ctypes.c_long
    c_int, c_long = ctypes.c_int, ctypes.c_long
    lib.zoo_paged_decode_attention.argtypes = [
        *(_P, c_long, _P, c_long, c_long, c_int),  # q, ldq, kv, kv_half, num_blocks, block_size
        *(c_int, c_int, c_int, _P, c_int, _P, c_int),  # H, Hkv, D, tables, W, seq_lens, B
        *(_P, c_long, _P, c_long, c_int),  # out, ldo, scratch, scratch_floats, nt
    ]
    lib.zoo_paged_decode_attention.restype = ctypes.c_int
    return lib


def serves(device: torch.device, kv_dtype: torch.dtype, num_heads: int, num_kv_heads: int) -> bool:
    """Whether the C decode attention can read this cache."""
    return device.type == "cpu" and kv_dtype == torch.float32 and num_heads % num_kv_heads == 0


class CpuPagedBackend(GatherSDPABackend):
    """The gather backend with its decode rows attended by the C kernel (see the module docstring)."""

    name = "cpu_paged"

    def __init__(
        self, lib: ctypes.CDLL, num_heads: int, num_kv_heads: int, head_dim: int, block_size: int, device: Any
    ) -> None:
        super().__init__(num_heads, num_kv_heads, head_dim, block_size, torch.device(device))
        if not serves(self.device, torch.float32, num_heads, num_kv_heads):
            raise ValueError("the C decode attention serves fp32 CPU caches with H % Hkv == 0")
        self.lib = bind(lib)
        self._scratch = torch.empty(0)

    def _decode_metadata(self, meta: AttentionMetadata, decode_seq_lens, decode_block_ids, buf: StepBuffers) -> None:
        """One group of every decode row: a [rows, W] block table (W: the longest row's blocks) and the rows'
        own context lengths; padding entries are never read."""
        bs = self.block_size
        rows = len(decode_seq_lens)
        num_blocks = [-(-n // bs) for n in decode_seq_lens]
        width = max(num_blocks)
        table_np, table = buf.take(rows * width)
        table_rows = table_np.reshape(rows, width)
        for i, (nb, ids) in enumerate(zip(num_blocks, decode_block_ids)):
            table_rows[i, :nb] = ids[:nb]
        lens_np, lens = buf.take(rows)
        lens_np[:] = decode_seq_lens
        meta.decode_groups.append(DecodeGroup(0, rows, table, width * bs, None, lens))

    def _attend_decodes(self, q: torch.Tensor, kv_cache: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        (g,) = meta.decode_groups
        b, h, hkv, d = g.num_rows, self.num_heads, self.num_kv_heads, self.head_dim
        qd = q[:b]  # [b, H, D]: a view of the rotated q|k rows (row stride (H + Hkv) * D)
        if qd.dtype != torch.float32 or qd.stride(2) != 1 or qd.stride(1) != d:
            qd = qd.float().contiguous()
        if kv_cache.dtype != torch.float32 or not kv_cache.is_contiguous() or kv_cache.device.type != "cpu":
            raise ValueError("the C decode attention needs a contiguous fp32 CPU cache")
        nt = torch.get_num_threads()
        need = self.lib.zoo_attn_scratch_floats(h, hkv, nt, g.context_len)
        if self._scratch.numel() < need:
            self._scratch = torch.empty(max(need, 2 * self._scratch.numel()))
        out = torch.empty(b, h * d)
        rc = self.lib.zoo_paged_decode_attention(
            qd.data_ptr(),
            qd.stride(0),
            kv_cache.data_ptr(),
            kv_cache[0].numel(),
            kv_cache.shape[1],
            self.block_size,
            h,
            hkv,
            d,
            g.block_table.data_ptr(),
            g.block_table.numel() // b,
            g.seq_lens.data_ptr(),
            b,
            out.data_ptr(),
            h * d,
            self._scratch.data_ptr(),
            self._scratch.numel(),
            nt,
        )
        if rc != 0:
            raise ValueError(f"C decode attention: {_ERRORS.get(rc, f'error {rc}')}")
        return out
