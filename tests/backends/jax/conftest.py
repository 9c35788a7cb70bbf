"""Shared fixtures of the JAX backend tests: a tiny random Llama shared with a torch twin, a toy
block allocator and step builders, and one JAX runner of the real SmolLM2 per session."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from backends.checkpoint import ModelConfig
from backends.jax import BucketPolicy, JaxModelRunner
from controlplane.engine.batch import ScheduledRequest, SchedulerOutput
from controlplane.engine.model_runner import KVCacheSpec
from controlplane.engine.sampling_params import SamplingParams


def tiny_config(**overrides: Any) -> ModelConfig:
    fields = dict(
        name="tiny-llama",
        vocab_size=97,
        hidden_size=48,
        intermediate_size=80,
        num_hidden_layers=2,
        num_attention_heads=6,
        num_key_value_heads=2,
        head_dim=8,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        rope_scaling=None,
        max_position_embeddings=256,
        tie_word_embeddings=True,
        bos_token_id=1,
        eos_token_id=2,
    )
    fields.update(overrides)
    return ModelConfig(**fields)


class BlockAllocator:
    """Hands out device block ids in a scrambled order, so block tables are non-contiguous."""

    def __init__(self, num_blocks: int, seed: int = 0) -> None:
        self.free = np.random.default_rng(seed).permutation(num_blocks).tolist()

    def grow(self, block_ids: list[int], num_tokens: int, block_size: int) -> list[int]:
        while len(block_ids) * block_size < num_tokens:
            block_ids.append(self.free.pop())
        return block_ids


@dataclass
class Seq:
    """A request as the test drives it: all known tokens and how many have KV."""

    req_id: str
    token_ids: list[int]
    params: SamplingParams
    num_computed: int = 0
    block_ids: list[int] | None = None
    num_output: int = 0

    def schedule(self, alloc: BlockAllocator, block_size: int, max_tokens: int | None = None) -> ScheduledRequest:
        n = len(self.token_ids) - self.num_computed
        if max_tokens is not None:
            n = min(n, max_tokens)
        self.block_ids = alloc.grow(self.block_ids or [], self.num_computed + n, block_size)
        return ScheduledRequest(
            req_id=self.req_id,
            token_ids=self.token_ids[self.num_computed : self.num_computed + n],
            start_pos=self.num_computed,
            block_ids=list(self.block_ids),
            sample=self.num_computed + n == len(self.token_ids),
            sampling_params=self.params,
            num_output_tokens=self.num_output,
        )

    def advance(self, sched: ScheduledRequest, sampled: list[int] | None) -> None:
        self.num_computed += len(sched.token_ids)
        if sampled:
            self.token_ids.extend(sampled)
            self.num_output += len(sampled)


def make_step(step_id: int, requests: list[ScheduledRequest], **moves: Any) -> SchedulerOutput:
    return SchedulerOutput(step_id=step_id, requests=requests, **moves)


def make_jax_runner(
    config: Any,
    state_dict: Any,
    num_device_blocks: int = 64,
    num_host_blocks: int = 16,
    block_size: int = 4,
    buckets: BucketPolicy | None = None,
) -> JaxModelRunner:
    runner = JaxModelRunner(config, "float32", state_dict=state_dict, buckets=buckets)
    runner.initialize_kv_cache(KVCacheSpec(num_device_blocks, num_host_blocks, block_size))
    return runner


def make_torch_runner(model: Any, num_device_blocks: int = 64, num_host_blocks: int = 16, block_size: int = 4):
    from backends.torch import TorchModelRunner

    runner = TorchModelRunner(model, "float32")
    runner.initialize_kv_cache(KVCacheSpec(num_device_blocks, num_host_blocks, block_size))
    return runner


GREEDY = SamplingParams(temperature=0.0, max_tokens=64)
# tiny-model tests: small buckets so each program compiles in well under a second
TINY_BUCKETS = BucketPolicy(token_buckets=(16, 64), min_context_blocks=8, min_key_blocks=8)


@pytest.fixture(scope="session")
def kit() -> SimpleNamespace:
    """The helpers above (test modules cannot import conftest under --import-mode=importlib)."""
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
def tiny():
    """(config, HF-named fp32 torch state dict, torch LlamaModel) of a 2-layer random Llama."""
    from backends.torch import build_model, random_state_dict

    config = tiny_config()
    sd = random_state_dict(config, seed=1, std=0.2)
    return config, sd, build_model(config, "float32", state_dict=sd)


@pytest.fixture(scope="session")
def smollm2_jax(smollm2_checkpoint) -> JaxModelRunner:
    """The JAX runner of the real model, fp32, built once; each LLMEngine re-initializes its KV cache."""
    return JaxModelRunner(smollm2_checkpoint, "float32", progress=False)
