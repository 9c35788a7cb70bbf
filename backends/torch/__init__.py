"""PyTorch backend: a Llama-family decoder over a paged KV cache behind the ModelRunner protocol.

Names are imported on first use (PEP 562), so ``backends.torch.model`` and the attention kernels load
without the runner's imports (msgspec through the sampling parameters): bench/gpu_check.py runs on a
host that has torch and nothing else of this project's dependencies.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_WHERE = {
    "AttentionBackend": "backends.torch.attention",
    "AttentionMetadata": "backends.torch.attention",
    "GatherSDPABackend": "backends.torch.attention",
    "select_attention_backend": "backends.torch.attention_dispatch",
    "PagedKVCache": "backends.torch.kv_cache",
    "LlamaModel": "backends.torch.model",
    "TorchModelRunner": "backends.torch.runner",
    "Sampler": "backends.torch.sampler",
    "SamplerOutput": "backends.torch.sampler",
    "build_model": "backends.torch.weights",
    "load_weights": "backends.torch.weights",
    "random_state_dict": "backends.torch.weights",
}

__all__ = [
    "AttentionBackend",
    "AttentionMetadata",
    "GatherSDPABackend",
    "LlamaModel",
    "PagedKVCache",
    "Sampler",
    "SamplerOutput",
    "TorchModelRunner",
    "build_model",
    "load_weights",
    "random_state_dict",
    "select_attention_backend",
]

if TYPE_CHECKING:
    from backends.torch.attention import AttentionBackend, AttentionMetadata, GatherSDPABackend
    from backends.torch.attention_dispatch import select_attention_backend
    from backends.torch.kv_cache import PagedKVCache
    from backends.torch.model import LlamaModel
    from backends.torch.runner import TorchModelRunner
    from backends.torch.sampler import Sampler, SamplerOutput
    from backends.torch.weights import build_model, load_weights, random_state_dict


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'backends.torch' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
