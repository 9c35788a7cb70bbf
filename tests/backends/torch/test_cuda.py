"""The runner on a CUDA device (skipped cleanly without one)."""

from __future__ import annotations

import pytest
import torch

from backends.torch import TorchModelRunner
from engine.model_runner import KVCacheSpec

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def _run(runner, kit, num_steps: int):
    alloc = kit.BlockAllocator(32, seed=4)
    seqs = [kit.Seq("a", [5, 6, 7, 8, 9, 10, 11], kit.GREEDY), kit.Seq("b", [40, 41], kit.GREEDY)]
    logits = []
    for step in range(num_steps):
        sched = [s.schedule(alloc, 4, max_tokens=4) for s in seqs]
        out = runner.compute_logits(kit.make_step(step, sched))
        logits.append({k: v.cpu() for k, v in out.items()})
        for s, r in zip(seqs, sched):
            s.advance(r, [int(out[s.req_id][0].argmax())] if r.sample else None)
    return logits, seqs


def test_cuda_matches_cpu(tiny, kit):
    config, sd, model = tiny
    gpu = TorchModelRunner(config, "float32", "cuda", state_dict=sd)
    gpu.initialize_kv_cache(KVCacheSpec(32, 8, 4))
    assert gpu.kv_cache.host_kv.is_pinned()
    cpu = kit.make_runner(model, num_device_blocks=32, block_size=4)
    got, gseqs = _run(gpu, kit, 5)
    want, cseqs = _run(cpu, kit, 5)
    for g, w in zip(got, want):
        assert g.keys() == w.keys()
        for k in g:
            torch.testing.assert_close(g[k], w[k], atol=1e-3, rtol=1e-3)
    assert [s.token_ids for s in gseqs] == [s.token_ids for s in cseqs]


def test_cuda_swap_round_trip(tiny):
    config, sd, _model = tiny
    runner = TorchModelRunner(config, "float32", "cuda", state_dict=sd)
    runner.initialize_kv_cache(KVCacheSpec(8, 8, 4))
    kv = runner.kv_cache
    kv.device_kv.normal_()
    before = kv.device_kv[:, :, [1, 3]].clone()
    kv.swap_out([(1, 6), (3, 2)])
    kv.device_kv.zero_()
    kv.swap_in([(6, 5), (2, 0)])
    torch.cuda.synchronize()
    assert torch.equal(kv.device_kv[:, :, [5, 0]], before)


def test_execute_step_time_and_bf16(tiny, kit):
    config, sd, _model = tiny
    runner = TorchModelRunner(config, "bfloat16", "cuda", state_dict=sd)
    runner.initialize_kv_cache(KVCacheSpec(16, 0, 4))
    alloc = kit.BlockAllocator(16)
    s = kit.Seq("x", [1, 2, 3, 4, 5], kit.GREEDY)
    r = s.schedule(alloc, 4)
    out = runner.execute(kit.make_step(0, [r]))
    assert out.step_time_s > 0 and len(out.sampled_token_ids["x"]) == 1
