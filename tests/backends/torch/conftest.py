"""Shared fixtures of the torch backend tests: a tiny random Llama, a dense reference forward,
a toy block allocator and step builders, and (slow) the transformers reference for SmolLM2."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch

from backends.runner_driver import GREEDY, BlockAllocator, Seq, make_step, tiny_config
from backends.torch import TorchModelRunner
from engine.model_runner import KVCacheSpec

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


@pytest.fixture(scope="session")
def kit() -> SimpleNamespace:
    """Helpers for test modules (they cannot import conftest under --import-mode=importlib)."""
    return SimpleNamespace(
        GREEDY=GREEDY,
        BlockAllocator=BlockAllocator,
        Seq=Seq,
        dense_logits=dense_logits,
        make_runner=make_runner,
        make_step=make_step,
        tiny_config=tiny_config,
        chunked_greedy_logits=chunked_greedy_logits,
    )


def make_runner(model: Any, num_device_blocks: int = 64, num_host_blocks: int = 16, block_size: int = 4):
    runner = TorchModelRunner(model, model.dtype)
    runner.initialize_kv_cache(KVCacheSpec(num_device_blocks, num_host_blocks, block_size))
    return runner


def chunked_greedy_logits(runner, num_steps: int, num_host_blocks: int = 0, seed: int = 0):
    """Two requests (7 and 2 prompt tokens) in 4-token chunks, then greedy decodes, for ``num_steps`` steps on a
    fresh 32-block cache: (each step's logits per request, each request's tokens)."""
    runner.initialize_kv_cache(KVCacheSpec(32, num_host_blocks, 4))
    alloc = BlockAllocator(32, seed=seed)
    seqs = [Seq("a", [5, 6, 7, 8, 9, 10, 11], GREEDY), Seq("b", [40, 41], GREEDY)]
    logits = []
    for step in range(num_steps):
        sched = [s.schedule(alloc, 4, max_tokens=4) for s in seqs]
        out = runner.compute_logits(make_step(step, sched))
        logits.append(out)
        for s, r in zip(seqs, sched):
            s.advance(r, [int(out[s.req_id][0].argmax())] if r.sample else None)
    return logits, [s.token_ids for s in seqs]
