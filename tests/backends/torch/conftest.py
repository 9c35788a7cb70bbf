"""Shared fixtures of the torch backend tests: a tiny random Llama, a dense reference forward,
a toy block allocator and step builders, and (slow) the transformers reference for SmolLM2."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from backends.checkpoint import ModelConfig
from backends.torch import TorchModelRunner, build_model, random_state_dict
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


# ---- dense reference: no paging, no fusion, explicit softmax ---------------------------------


def dense_logits(config: Any, sd: dict[str, torch.Tensor], token_ids: list[int]) -> torch.Tensor:
    """fp32 logits [T, V] of a whole sequence, computed the textbook way (float64 internally)."""
    from backends.torch.model import rope_tables

    f = {k: v.double() for k, v in sd.items()}
    t = len(token_ids)
    h, hkv, d = config.num_attention_heads, config.num_key_value_heads, config.head_dim
    x = f["model.embed_tokens.weight"][torch.tensor(token_ids)]
    cos, sin = rope_tables(d, config.rope_theta, config.rope_scaling, t).double()[:, :t, None, :]

    def norm(v: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return w * v / torch.sqrt(v.pow(2).mean(-1, keepdim=True) + config.rms_norm_eps)

    def rope(v: torch.Tensor) -> torch.Tensor:
        v1, v2 = v[..., : d // 2], v[..., d // 2 :]
        return v * cos + torch.cat((-v2, v1), -1) * sin

    causal = torch.tril(torch.ones(t, t, dtype=torch.bool))
    for i in range(config.num_hidden_layers):
        p = f"model.layers.{i}."
        y = norm(x, f[p + "input_layernorm.weight"])
        q = rope((y @ f[p + "self_attn.q_proj.weight"].T).view(t, h, d))
        k = rope((y @ f[p + "self_attn.k_proj.weight"].T).view(t, hkv, d))
        v = (y @ f[p + "self_attn.v_proj.weight"].T).view(t, hkv, d)
        k = k.repeat_interleave(h // hkv, dim=1)
        v = v.repeat_interleave(h // hkv, dim=1)
        s = torch.einsum("qhd,khd->hqk", q, k) / d**0.5
        a = s.masked_fill(~causal, float("-inf")).softmax(-1)
        o = torch.einsum("hqk,khd->qhd", a, v).reshape(t, h * d)
        x = x + o @ f[p + "self_attn.o_proj.weight"].T
        y = norm(x, f[p + "post_attention_layernorm.weight"])
        g = torch.nn.functional.silu(y @ f[p + "mlp.gate_proj.weight"].T) * (y @ f[p + "mlp.up_proj.weight"].T)
        x = x + g @ f[p + "mlp.down_proj.weight"].T
    head = f["model.embed_tokens.weight"] if config.tie_word_embeddings else f["lm_head.weight"]
    return (norm(x, f["model.norm.weight"]) @ head.T).float()


# ---- a toy block allocator and request builder (the real scheduler lives elsewhere) ---------


class BlockAllocator:
    """Hands out device block ids in a scrambled order, so block tables are non-contiguous."""

    def __init__(self, num_blocks: int, seed: int = 0) -> None:
        g = torch.Generator().manual_seed(seed)
        self.free = torch.randperm(num_blocks, generator=g).tolist()

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


GREEDY = SamplingParams(temperature=0.0, max_tokens=64)


@pytest.fixture(scope="session")
def kit() -> SimpleNamespace:
    """The helpers above (test modules cannot import conftest under --import-mode=importlib)."""
    return SimpleNamespace(
        GREEDY=GREEDY,
        BlockAllocator=BlockAllocator,
        Seq=Seq,
        dense_logits=dense_logits,
        make_runner=make_runner,
        make_step=make_step,
        tiny_config=tiny_config,
    )


@pytest.fixture(scope="session")
def tiny():
    """(config, HF-named fp32 state dict, shared LlamaModel) of a 2-layer random Llama."""
    config = tiny_config()
    sd = random_state_dict(config, seed=1, std=0.2)
    return config, sd, build_model(config, "float32", state_dict=sd)


def make_runner(model: Any, num_device_blocks: int = 64, num_host_blocks: int = 16, block_size: int = 4):
    runner = TorchModelRunner(model, model.dtype)
    runner.initialize_kv_cache(KVCacheSpec(num_device_blocks, num_host_blocks, block_size))
    return runner
