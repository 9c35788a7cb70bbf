"""JAX backend: a Llama-family decoder over a paged KV cache behind the ModelRunner protocol."""

from backends.jax.buckets import BucketPolicy, CompileCounter
from backends.jax.kv_cache import PagedKVCache
from backends.jax.model import LlamaParams, load_params, random_tensors
from backends.jax.runner import JaxModelRunner
from backends.jax.sampler import Sampler, SamplerOutput

__all__ = [
    "BucketPolicy",
    "CompileCounter",
    "JaxModelRunner",
    "LlamaParams",
    "PagedKVCache",
    "Sampler",
    "SamplerOutput",
    "load_params",
    "random_tensors",
]
