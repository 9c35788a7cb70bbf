"""Decode CUDA graphs: replayed steps give the eager steps' logits (skipped cleanly without CUDA)."""

from __future__ import annotations

import pytest
import torch

from backends.torch import TorchModelRunner
from engine.model_runner import KVCacheSpec

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def _decode_logits(runner, kit, num_steps: int):
    alloc = kit.BlockAllocator(64, seed=5)
    seqs = [kit.Seq(f"r{i}", list(range(3 + i, 9 + 2 * i)), kit.GREEDY) for i in range(3)]
    logits = []
    for step in range(num_steps):
        sched = [s.schedule(alloc, 4) for s in seqs]  # step 0: whole prompts; then plain decodes
        out = runner.compute_logits(kit.make_step(step, sched))
        logits.append({k: v.cpu() for k, v in out.items()})
        for s, r in zip(seqs, sched):
            s.advance(r, [int(out[s.req_id][0].argmax())])
    return logits, [s.token_ids for s in seqs]


def test_graph_replay_matches_eager(tiny, kit):
    config, sd, _model = tiny
    graphs = TorchModelRunner(config, "float32", "cuda", state_dict=sd, attention_backend="triton_paged")
    graphs.initialize_kv_cache(KVCacheSpec(64, 8, 4))
    assert graphs.graphs is not None, graphs.kernels
    assert graphs.graph_capture_s > 0 and "captured" in graphs.kernels
    eager = TorchModelRunner(
        config, "float32", "cuda", state_dict=sd, attention_backend="triton_paged", cuda_graphs=False
    )
    eager.initialize_kv_cache(KVCacheSpec(64, 8, 4))
    assert eager.graphs is None and "graphs=off" in eager.kernels
    got, got_tokens = _decode_logits(graphs, kit, 6)
    want, want_tokens = _decode_logits(eager, kit, 6)
    assert got_tokens == want_tokens
    for g, w in zip(got, want):
        for k in g:
            torch.testing.assert_close(g[k], w[k], atol=1e-4, rtol=1e-4)


def test_batch_beyond_the_largest_graph_runs_eagerly(tiny, kit):
    config, sd, _model = tiny
    runner = TorchModelRunner(config, "float32", "cuda", state_dict=sd, max_graph_batch=2)
    runner.initialize_kv_cache(KVCacheSpec(64, 8, 4))
    assert runner.graphs is not None and runner.graphs.batch_sizes == (1, 2)
    got, _ = _decode_logits(runner, kit, 3)  # 3 decodes > bucket 2: the eager path serves them
    assert all(len(step) == 3 for step in got)


def test_dispatch_table_picks_a_kernel_for_this_gpu(tiny):
    config, sd, _model = tiny
    runner = TorchModelRunner(config, "float32", "cuda", state_dict=sd)
    major, minor = torch.cuda.get_device_capability()
    assert runner.kernel_plan.device == f"cuda SM{major}{minor}"
    assert runner.kernel_plan.attention in ("triton_paged", "flash_sdpa", "gather_sdpa")
