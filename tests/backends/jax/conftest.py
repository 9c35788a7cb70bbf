"""Shared fixtures of the JAX backend tests: a tiny random Llama shared with a torch twin, a toy
block allocator and step builders, and one JAX runner of the real SmolLM2 per session."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from backends.jax import BucketPolicy, JaxModelRunner
from backends.runner_driver import GREEDY, BlockAllocator, Seq, make_step, tiny_config
from engine.model_runner import KVCacheSpec


def make_jax_runner(
    config: Any,
    state_dict: Any,
    num_device_blocks: int = 64,
    num_host_blocks: int = 16,
    block_size: int = 4,
    buckets: BucketPolicy | None = None,
    **kw: Any,
) -> JaxModelRunner:
    runner = JaxModelRunner(config, "float32", state_dict=state_dict, buckets=buckets, **kw)
    runner.initialize_kv_cache(KVCacheSpec(num_device_blocks, num_host_blocks, block_size))
    return runner


def make_torch_runner(model: Any, num_device_blocks: int = 64, num_host_blocks: int = 16, block_size: int = 4):
    from backends.torch import TorchModelRunner

    runner = TorchModelRunner(model, "float32")
    runner.initialize_kv_cache(KVCacheSpec(num_device_blocks, num_host_blocks, block_size))
    return runner


# tiny-model tests: small buckets so each program compiles in well under a second
TINY_BUCKETS = BucketPolicy(token_buckets=(16, 64), min_context_blocks=8, min_key_blocks=8)


@pytest.fixture(scope="session")
def kit() -> SimpleNamespace:
    """Helpers for test modules (they cannot import conftest under --import-mode=importlib)."""
    return SimpleNamespace(
        GREEDY=GREEDY,
        TINY_BUCKETS=TINY_BUCKETS,
        BlockAllocator=BlockAllocator,
        Seq=Seq,
        make_jax_runner=make_jax_runner,
        make_torch_runner=make_torch_runner,
        make_step=make_step,
        tiny_config=tiny_config,
    )


@pytest.fixture(scope="session")
def smollm2_jax(smollm2_checkpoint) -> JaxModelRunner:
    """The JAX runner of the real model, fp32, built once; each LLMEngine re-initializes its KV cache."""
    return JaxModelRunner(smollm2_checkpoint, "float32", progress=False)
