"""The JAX runner on a GPU (skipped without one): the tiny random Llama's chunked prefill, mixed steps and
greedy decode on the GPU against the torch runner on the CPU, fp32 and bf16."""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")


def _gpu_devices() -> list:
    try:
        return jax.devices("gpu")
    except RuntimeError:  # no GPU backend in this jaxlib, or no device
        return []


pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not _gpu_devices(), reason="needs a JAX GPU device"),
]

ATOL = 1e-3  # as test_runner.py: fp32 on the GPU keeps fp32 matmuls (Precision.HIGHEST), not TF32


def _drive(kit, runner, steps: int = 10):
    """Three requests arriving at different steps, prefill chunks of 5 beside decodes; the greedy tokens."""
    alloc = kit.BlockAllocator(64, seed=3)
    prompts = {"a": [5, 9, 17, 33, 2, 8, 44, 61, 70, 3, 11], "b": [7, 7, 21], "c": list(range(20, 34))}
    arrivals = {"a": 0, "b": 1, "c": 3}
    seqs, logits = {}, []
    for step in range(steps):
        for req_id, at in arrivals.items():
            if at == step:
                seqs[req_id] = kit.Seq(req_id, list(prompts[req_id]), kit.GREEDY)
        sched = [s.schedule(alloc, 4, max_tokens=5) for s in seqs.values()]
        out = runner.compute_logits(kit.make_step(step, sched))
        for r in sched:
            row = None
            if r.sample:
                row = np.asarray(out[r.req_id], dtype=np.float32)
                logits.append(row)
            seqs[r.req_id].advance(r, None if row is None else [int(row[0].argmax())])
    return {k: s.token_ids for k, s in seqs.items()}, logits


def test_jax_gpu_runner_matches_torch_cpu(tiny, kit):
    config, sd, model = tiny
    gpu = kit.make_jax_runner(config, sd, buckets=kit.TINY_BUCKETS, device="gpu")
    assert gpu.device.platform == "gpu"
    assert gpu.kv_cache.device_kv.devices() == {gpu.device}
    ours, our_logits = _drive(kit, gpu)
    ref, ref_logits = _drive(kit, kit.make_torch_runner(model))
    assert ours == ref
    assert max(float(np.abs(a - b).max()) for a, b in zip(our_logits, ref_logits)) <= ATOL


def test_jax_gpu_bf16_runs_and_stays_close(tiny, kit):
    """bf16 on the GPU: the same steps run, and the first logits stay within bf16's rounding of fp32's."""
    config, sd, model = tiny
    from backends.jax import JaxModelRunner
    from engine.model_runner import KVCacheSpec

    runner = JaxModelRunner(config, "bfloat16", "gpu", state_dict=sd, buckets=kit.TINY_BUCKETS)
    runner.initialize_kv_cache(KVCacheSpec(64, 16, 4))
    _tokens, logits = _drive(kit, runner, steps=4)
    _ref_tokens, ref_logits = _drive(kit, kit.make_torch_runner(model), steps=4)
    scale = max(float(np.abs(r).max()) for r in ref_logits)
    assert all(np.isfinite(a).all() for a in logits)
    assert max(float(np.abs(a - b).max()) for a, b in zip(logits, ref_logits)) <= 0.05 * max(scale, 1.0)
