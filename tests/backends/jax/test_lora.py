"""Batched LoRA in the JAX runner against the torch runner (itself checked against merged dense weights in
tests/backends/torch/test_lora_runner.py): adapters and base rows in one step, decodes and prefill chunks,
one slot for three adapters (eviction and reload)."""

from __future__ import annotations

import numpy as np
import pytest

from backends.checkpoint.peft_writer import random_peft_adapters
from backends.jax import JaxModelRunner
from backends.torch import TorchModelRunner
from engine.lora import LoraConfig
from engine.model_runner import KVCacheSpec

ATOL = 1e-3
TARGETS = {
    "qv": ("q_proj", "v_proj"),
    "all": ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"),
    "mlp": ("gate_proj", "down_proj"),
}


@pytest.fixture(scope="module")
def loras(tiny, tmp_path_factory):
    specs = {name: (t, 2 + 2 * i) for i, (name, t) in enumerate(TARGETS.items())}
    return random_peft_adapters(tmp_path_factory.mktemp("jax_adapters"), tiny[0], specs, seed=10)


def _pair(tiny, kit, loras, max_loras):
    config, sd, model = tiny
    spec = KVCacheSpec(64, 0, 4)
    jax_runner = JaxModelRunner(config, "float32", state_dict=sd, buckets=kit.TINY_BUCKETS,
                                lora_config=LoraConfig(max_loras, 8))  # fmt: skip
    torch_runner = TorchModelRunner(model, lora_config=LoraConfig(max_loras, 8))
    for runner in (jax_runner, torch_runner):
        runner.initialize_kv_cache(spec)
        for lora in loras.values():
            runner.add_lora(lora)
    return jax_runner, torch_runner


def test_mixed_batch_matches_torch(tiny, kit, loras):
    jax_runner, torch_runner = _pair(tiny, kit, loras, max_loras=3)
    alloc = kit.BlockAllocator(64, seed=4)
    jobs = {
        "a": ([5, 9, 17, 33, 2, 8, 44, 61, 70, 3, 11], "all"),
        "b": ([7, 7, 21], None),
        "c": (list(range(20, 34)), "qv"),
        "d": ([4, 8, 15, 16, 23, 42], "all"),
        "e": ([1, 2, 3], "mlp"),
    }
    seqs = {r: kit.Seq(r, list(p), kit.GREEDY) for r, (p, _) in jobs.items()}
    for step in range(6):
        sched = []
        for s in seqs.values():
            r = s.schedule(alloc, 4, max_tokens=5)
            lora = jobs[s.req_id][1]
            r.lora_id = None if lora is None else loras[lora].lora_id
            sched.append(r)
        got = jax_runner.compute_logits(kit.make_step(step, sched))
        ref = torch_runner.compute_logits(kit.make_step(step, sched))
        assert got.keys() == ref.keys()
        for req_id in got:
            np.testing.assert_allclose(got[req_id], ref[req_id].numpy(), atol=ATOL, rtol=0)
        for r in sched:
            s = seqs[r.req_id]
            s.advance(r, [int(ref[r.req_id][0].argmax())] if r.req_id in ref else None)
    assert all(s.num_output >= 2 for s in seqs.values())


def test_one_slot_evicts_and_reloads(tiny, kit, loras):
    jax_runner, torch_runner = _pair(tiny, kit, loras, max_loras=1)
    prompt = [3, 14, 15, 92, 65]
    for step, name in enumerate(["qv", "all", "mlp", "qv"]):
        r = kit.Seq(f"r{step}", list(prompt), kit.GREEDY).schedule(kit.BlockAllocator(64, seed=step), 4)
        r.lora_id = loras[name].lora_id
        got = jax_runner.compute_logits(kit.make_step(step, [r]))[r.req_id]
        ref = torch_runner.compute_logits(kit.make_step(step, [r]))[r.req_id].numpy()
        np.testing.assert_allclose(got, ref, atol=ATOL, rtol=0)
    stats = jax_runner.lora_stats()
    assert (stats.num_loads_total, stats.num_evictions_total, stats.num_device) == (4, 3, 1)
