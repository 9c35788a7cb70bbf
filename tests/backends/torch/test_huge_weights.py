"""backends/torch/huge_weights.py: the runner's weights moved onto huge pages are the same tensors with the
same bits (a tied head stays tied, oneDNN-packed copies untouched), the runner computes the same logits with
and without the move, and without huge pages nothing moves."""

from __future__ import annotations

import pytest
import torch

from backends import huge_pages as hp
from backends.runner_driver import tiny_config
from backends.torch import TorchModelRunner, build_model, huge_weights, random_state_dict
from engine.model_runner import KVCacheSpec

AVAILABLE = hp.unavailable_reason() == ""


def _model(seed: int = 0):
    config = tiny_config()
    return config, build_model(config, "float32", state_dict=random_state_dict(config, seed=seed), progress=False)


@pytest.mark.skipif(not AVAILABLE, reason=f"no transparent huge pages here: {hp.unavailable_reason()}")
def test_move_keeps_tensors_bits_and_ties():
    _, model = _model()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    objects = {n: p for n, p in model.named_parameters()}
    result, arena = huge_weights.move_to_huge_pages(model)
    assert arena is not None and result.huge > 0
    lo, hi = arena.address, arena.address + arena.nbytes
    for name, p in model.named_parameters():
        assert p is objects[name]  # the same tensor objects, re-pointed
        assert lo <= p.data_ptr() < hi, name
        assert torch.equal(p, before[name]), name
    if model.lm_head_t is model.embed_t:
        assert model.lm_head_t.data_ptr() == model.embed_t.data_ptr()


def test_runner_logits_same_with_and_without_huge_pages(kit):
    _, a = _model(seed=3)
    _, b = _model(seed=3)
    runners = []
    for model, huge in ((a, True), (b, False)):
        r = TorchModelRunner(model, torch.float32, huge_pages=huge, adaptive_threads=False)
        r.initialize_kv_cache(KVCacheSpec(64, 0, 4))
        runners.append(r)
    assert runners[1].huge_pages is None and "huge-pages" not in runners[1].kernels
    if AVAILABLE:
        assert runners[0].huge_pages.huge > 0 and "huge-pages" in runners[0].kernels
    outs = []
    for r in runners:
        alloc = kit.BlockAllocator(64, seed=1)
        seq = kit.Seq("r0", [5, 9, 13, 2, 7, 11], kit.GREEDY)
        logits = []
        for step in range(4):  # the prefill, then decode steps (the C kernel where it is built)
            sched = seq.schedule(alloc, 4)
            out = r.compute_logits(kit.make_step(step, [sched]))[seq.req_id]
            logits.append(out)
            seq.advance(sched, [int(out[-1].argmax())])
        outs.append(logits)
    for x, y in zip(*outs):
        assert torch.equal(x, y)


def test_nothing_moves_without_huge_pages(monkeypatch):
    monkeypatch.setattr(hp, "thp_mode", lambda: "never")
    _, model = _model()
    ptrs = [p.data_ptr() for p in model.parameters()]
    result, arena = huge_weights.move_to_huge_pages(model)
    assert arena is None and result.huge == 0 and "never" in result.reason
    assert [p.data_ptr() for p in model.parameters()] == ptrs
    t = huge_weights.zeros((1024, 1024), torch.float32, torch.device("cpu"))
    assert t.shape == (1024, 1024) and not t.any()


def test_ensure_moves_a_shared_model_once():
    _, model = _model()
    first = huge_weights.ensure_on_huge_pages(model)
    ptrs = [p.data_ptr() for p in model.parameters()]
    assert huge_weights.ensure_on_huge_pages(model) is first
    assert [p.data_ptr() for p in model.parameters()] == ptrs


def test_zeros_on_huge_pages_are_zeros_and_writable():
    t = huge_weights.zeros((3, 1024, 1024), torch.float32, torch.device("cpu"))
    assert t.shape == (3, 1024, 1024) and t.dtype == torch.float32 and not t.any()
    t[2, 5, 7] = 1.5
    assert float(t.sum()) == 1.5
    small = huge_weights.zeros((4,), torch.float32, torch.device("cpu"))
    assert not small.any()
