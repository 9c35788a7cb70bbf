"""Attention backends by name, and the dispatch table (backends/kernel_dispatch.py) applied to a torch device.

The Triton backends (triton_attention.py) are imported only when chosen, so a host without triton
runs ``gather_sdpa``.
"""

from __future__ import annotations

import importlib.util
import os

import torch

from backends.kernel_dispatch import ATTENTION_KERNELS, KernelPlan, choose_kernels
from backends.torch.attention import AttentionBackend, GatherSDPABackend

ATTENTION_BACKENDS: dict[str, type[AttentionBackend]] = {GatherSDPABackend.name: GatherSDPABackend}


def attention_backend_class(name: str) -> type[AttentionBackend]:
    """The backend class registered as ``name`` (backends/kernel_dispatch.py's ATTENTION_KERNELS)."""
    if name in ("triton_paged", "flash_sdpa") and name not in ATTENTION_BACKENDS:
        from backends.torch.triton_attention import FlashSDPABackend, TritonPagedBackend

        ATTENTION_BACKENDS[TritonPagedBackend.name] = TritonPagedBackend
        ATTENTION_BACKENDS[FlashSDPABackend.name] = FlashSDPABackend
    if name not in ATTENTION_BACKENDS:
        raise ValueError(f"unknown attention backend {name!r}; have {sorted(ATTENTION_KERNELS)}")
    return ATTENTION_BACKENDS[name]


def kernel_plan(
    device: torch.device, name: str | None = None, kv_dtype: str = "auto", cuda_graphs: bool = True
) -> KernelPlan:
    """backends/kernel_dispatch.py's table applied to this process's ``device``."""
    if name is not None and name not in ATTENTION_KERNELS:
        raise ValueError(f"unknown attention backend {name!r}; have {sorted(ATTENTION_KERNELS)}")
    capability = torch.cuda.get_device_capability(device) if device.type == "cuda" else None
    return choose_kernels(
        device.type,
        capability,
        attention=name,
        kv_dtype=kv_dtype,
        cuda_graphs=cuda_graphs,
        triton_available=importlib.util.find_spec("triton") is not None,
        triton_interpret=os.environ.get("TRITON_INTERPRET") == "1",
    )


def select_attention_backend(
    device: torch.device,
    num_heads: int,
    num_kv_heads: int,
    head_dim: int,
    block_size: int,
    name: str | None = None,
) -> AttentionBackend:
    """Choose the attention implementation once, by device kind and compute capability.

    ``name`` forces a backend; otherwise the dispatch table (backends/kernel_dispatch.py) decides.
    """
    plan = kernel_plan(device, name)
    return attention_backend_class(plan.attention)(num_heads, num_kv_heads, head_dim, block_size, device)
