"""CPU weights pre-packed for oneDNN: the model's ``x @ W_t`` matmuls run on blocked copies of W.

Profiling the batch-32 decode step of SmolLM2 (fp32, CPU) put ~73% of it in ``torch.mm`` / ``torch.addmm``
over the stored ``[in, out]`` weights, at 65-83 GFLOP/s a core for M = 32 rows and 8-25 GFLOP/s for one
row, where oneDNN's ``_linear_pointwise`` over a weight reordered once into its blocked layout reaches
~100 GFLOP/s at M = 32 (the same op Inductor's CPU ``freezing`` pass uses for fp32 linears). The lm head
([576, 49152]) gains most: 2x at M = 32. A single row keeps MKL's GEMV over the plain data (faster there).

A packed weight is a tensor subclass (the pattern of torchao's quantized weights): it still holds the
``[in, out]`` data, so loading, ``.t()`` views, state dicts and every other op see a plain tensor, and it
carries the packed copy beside it. Only the two calls the model makes on weights are redirected::

    torch.mm(x, W_t)            -> mkldnn._linear_pointwise(x, W_packed)               [T, out]
    torch.addmm(h, x, W_t)      -> mkldnn._linear_pointwise.binary(x, h, W_packed, "add") h + x @ W

model.py is unchanged. The packed copies double the memory of the matrices (SmolLM2 fp32: +~540 MB).
Pack after the weights are final (a later in-place write to the data would leave the packed copy stale);
``pack_weights`` is idempotent. fp32 on CPU only (bf16 needs AVX512-BF16 and is not measured here).
"""

from __future__ import annotations

import torch
from torch import nn
from torch._C import DisableTorchFunctionSubclass

PACK_BATCH_HINT = 32  # oneDNN picks its blocking for this many rows; any row count runs
# one row (batch-1 decode) is a GEMV that reads the weight once: MKL over the [in, out] data was faster
# there in the same run (44 vs 57 ms CPU a step), so single rows keep torch's own path
MIN_PACKED_ROWS = 2


def packing_available() -> bool:
    """Whether this torch has oneDNN's linear ops (CPU builds with MKLDNN)."""
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


class PackedWeight(torch.Tensor):
    """A ``[in, out]`` weight with its oneDNN-packed ``[out, in]`` copy in ``packed``."""

    packed: torch.Tensor

    @staticmethod
    def __new__(cls, weight_t: torch.Tensor, packed: torch.Tensor | None = None) -> PackedWeight:
        return torch.Tensor._make_subclass(cls, weight_t, False)

    def __init__(self, weight_t: torch.Tensor, packed: torch.Tensor | None = None) -> None:
        if packed is None:
            packed = torch.ops.mkldnn._reorder_linear_weight(weight_t.t().contiguous(), PACK_BATCH_HINT)
        self.packed = packed

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if not kwargs:
            if func is torch.mm and isinstance(args[1], PackedWeight) and _fits(args[0], args[1]):
                return torch.ops.mkldnn._linear_pointwise(args[0].contiguous(), args[1].packed, None, "none", [], "")
            if func is torch.addmm and isinstance(args[2], PackedWeight) and _fits(args[1], args[2]):
                x, residual = args[1].contiguous(), args[0].contiguous()
                return torch.ops.mkldnn._linear_pointwise.binary(x, residual, args[2].packed, None, "add")
            if func is torch.Tensor.detach:  # nn.Parameter(...) detaches: keep the type and the packed copy
                with DisableTorchFunctionSubclass():
                    plain = torch.Tensor.detach(args[0])
                return PackedWeight(plain, args[0].packed)
        with DisableTorchFunctionSubclass():
            return func(*args, **(kwargs or {}))


def _fits(x: torch.Tensor, w: PackedWeight) -> bool:
    """The redirected op serves plain 2-D fp32 CPU activations; anything else takes torch's own path."""
    return (
        type(x) is torch.Tensor
        and x.dim() == 2
        and x.shape[0] >= MIN_PACKED_ROWS
        and x.dtype == torch.float32
        and x.device.type == "cpu"
    )


def _packed_param(p: torch.Tensor) -> nn.Parameter:
    if isinstance(p, PackedWeight):
        return p if isinstance(p, nn.Parameter) else nn.Parameter(p, requires_grad=False)
    return nn.Parameter(PackedWeight(p.detach()), requires_grad=False)


def pack_weights(model: nn.Module) -> bool:
    """Pack the matrices of a CPU fp32 LlamaModel in place (layers' projections and the output head);
    False (nothing done) where packing does not apply."""
    if not packing_available() or model.dtype != torch.float32 or model.embed_t.device.type != "cpu":
        return False
    for layer in model.layers:
        for name in ("qkv_proj_t", "o_proj_t", "gate_up_proj_t", "down_proj_t"):
            setattr(layer, name, _packed_param(getattr(layer, name)))
    if model.lm_head_t is model.embed_t:  # tied: the one table is both the lookup and the head
        model.embed_t = _packed_param(model.embed_t)
        model.lm_head_t = model.embed_t
    else:
        model.lm_head_t = _packed_param(model.lm_head_t)
    return True
