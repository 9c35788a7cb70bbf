"""The decode fast path (LlamaModel.fast_path, backends/torch/model.py) against the reference op sequence:
the same logits bit for bit on a tiny model (fp32 and bf16), the same greedy tokens on SmolLM2."""

from __future__ import annotations

import pytest
import torch

from backends.torch import TorchModelRunner
from backends.torch.model import apply_rope, apply_rope_signed
from engine.model_runner import KVCacheSpec


def test_signed_rope_is_bit_identical():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(5, 6, 8, generator=g)
    cos, sin = torch.randn(2, 5, 1, 8, generator=g)
    signed = sin.clone()
    signed[..., :4].neg_()
    assert torch.equal(apply_rope_signed(x, cos, signed), apply_rope(x, cos, sin))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_fast_path_logits_equal_reference_bit_for_bit(kit, dtype):
    config = kit.tiny_config()
    model = TorchModelRunner(config, dtype, seed=3, progress=False).model
    fast, ref = (TorchModelRunner(model, dtype, cpu_decode_kernel=False) for _ in range(2))  # torch ops only
    for r in (fast, ref):
        r.initialize_kv_cache(KVCacheSpec(64, 16, 4))
    alloc_f, alloc_r = kit.BlockAllocator(64, seed=1), kit.BlockAllocator(64, seed=1)
    prompts = {"a": list(range(3, 14)), "b": [7, 7, 21, 5]}
    seqs_f = [kit.Seq(k, list(v), kit.GREEDY) for k, v in prompts.items()]
    seqs_r = [kit.Seq(k, list(v), kit.GREEDY) for k, v in prompts.items()]
    for step in range(5):
        sched_f = [s.schedule(alloc_f, 4, max_tokens=6) for s in seqs_f]
        sched_r = [s.schedule(alloc_r, 4, max_tokens=6) for s in seqs_r]
        model.fast_path = True
        a = fast.compute_logits(kit.make_step(step, sched_f))
        model.fast_path = False
        b = ref.compute_logits(kit.make_step(step, sched_r))
        model.fast_path = True
        assert a.keys() == b.keys()
        for req_id in a:
            assert torch.equal(a[req_id], b[req_id]), (step, req_id)
        for seqs, sched, logits in ((seqs_f, sched_f, a), (seqs_r, sched_r, b)):
            for s, r in zip(seqs, sched):
                s.advance(r, [int(logits[r.req_id][0].argmax())] if r.sample else None)


def test_smollm2_greedy_tokens_identical_with_and_without_fast_path(smollm2_model, kit):
    """Batch-1 decode of the real model, both paths stepped alternately on one model: same tokens."""
    model = smollm2_model
    runners, seqs, allocs = [], [], []
    for _ in range(2):
        r = TorchModelRunner(model, model.dtype, cpu_decode_kernel=False)  # the torch ops, not the C kernel
        r.initialize_kv_cache(KVCacheSpec(32, 0, 16))
        runners.append(r)
        seqs.append(kit.Seq("x", [1, 4093, 314, 253, 3117, 28, 1359, 2380, 30], kit.GREEDY))
        allocs.append(kit.BlockAllocator(32, seed=2))
    tokens: list[list[int]] = [[], []]
    try:
        for step in range(6):
            for i, fast in enumerate((True, False)):
                model.fast_path = fast
                r = seqs[i].schedule(allocs[i], 16)
                out = runners[i].execute(kit.make_step(step, [r]))
                seqs[i].advance(r, out.sampled_token_ids["x"])
                tokens[i] += out.sampled_token_ids["x"]
    finally:
        model.fast_path = True
    assert len(tokens[0]) == 6 and tokens[0] == tokens[1]
