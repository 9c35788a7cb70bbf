"""PyTorch backend: a Llama-family decoder over a paged KV cache behind the ModelRunner protocol."""

from backends.torch.attention import AttentionBackend, AttentionMetadata, GatherSDPABackend, select_attention_backend
from backends.torch.kv_cache import PagedKVCache
from backends.torch.model import LlamaModel
from backends.torch.runner import TorchModelRunner
from backends.torch.sampler import Sampler, SamplerOutput
from backends.torch.weights import build_model, load_weights, random_state_dict

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
