"""Step metadata in preallocated buffers (backends/torch/step_buffers.py): reused step after step, growing
when a step needs more, and giving the same metadata and logits, bit for bit, as fresh allocations."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from backends.torch.attention import GatherSDPABackend
from backends.torch.step_buffers import StepBuffers


def _mixed_steps(kit, runner, num_steps: int = 6, seed: int = 11):
    """Chunked prefills sharing steps with decodes of unequal lengths; yields each step's logits."""
    alloc = kit.BlockAllocator(64, seed=seed)
    prompts = {"a": list(range(3, 17)), "b": [7, 7, 21], "c": [5, 9, 17, 33, 2, 8, 44]}
    seqs = {k: kit.Seq(k, list(v), kit.GREEDY) for k, v in prompts.items()}
    for step in range(num_steps):
        sched = [s.schedule(alloc, 4, max_tokens=5) for s in seqs.values()]
        logits = runner.compute_logits(kit.make_step(step, sched))
        yield logits
        for r in sched:
            s = seqs[r.req_id]
            s.advance(r, [int(logits[r.req_id][0].argmax())] if r.sample else None)


def test_consecutive_steps_reuse_the_buffers_and_match_fresh_allocations(tiny, kit):
    _config, _sd, model = tiny
    reused, fresh = kit.make_runner(model), kit.make_runner(model)
    region = reused.buffers.regions
    ptrs = []
    for step, (a, b) in enumerate(zip(_mixed_steps(kit, reused), _mixed_steps(kit, fresh))):
        ptrs.append({dtype: r.host.data_ptr() for dtype, r in region.items()})
        assert region[torch.int64].cursor > 0  # this step's rows and tables came from the region
        fresh.buffers = StepBuffers(fresh.device)  # the baseline: new memory every step
        assert a.keys() == b.keys() and a
        for req_id in a:
            assert torch.equal(a[req_id], b[req_id]), (step, req_id)
    assert len(ptrs) == 6 and all(p == ptrs[0] for p in ptrs)  # the same memory every step
    assert torch.bool in region  # decode groups or chunks after a prefix had masks
    assert all(r.grows == 0 for r in region.values())


def _assert_same_metadata(a, b) -> None:
    assert torch.equal(a.slot_mapping, b.slot_mapping) and a.num_decodes == b.num_decodes
    for x, y in [*zip(a.decode_groups, b.decode_groups), *zip(a.chunks, b.chunks)]:
        assert torch.equal(x.block_table, y.block_table)
        assert (x.mask is None) == (y.mask is None)
        if x.mask is not None:
            assert x.mask.shape == y.mask.shape and torch.equal(x.mask, y.mask)
    assert len(a.decode_groups) == len(b.decode_groups) and len(a.chunks) == len(b.chunks)


def test_gather_metadata_in_buffers_grows_and_equals_fresh():
    backend = GatherSDPABackend(4, 2, 8, 4, torch.device("cpu"))
    rng = np.random.default_rng(0)
    # decodes of very unequal lengths (several groups, masked), a chunk after a prefix, a fresh prompt
    seq_lens = [90, 88, 40, 9, 9, 3]
    tables = [rng.permutation(64)[: -(-n // 4)].tolist() for n in seq_lens]
    chunks = [(6, 5, [30, 31, 32]), (0, 4, [40])]
    slots = rng.integers(0, 256, len(seq_lens) + 9)
    expected = backend.build_metadata(seq_lens, tables, chunks, slots)
    buf = StepBuffers("cpu", {torch.int64: 8, torch.bool: 8})  # far too small: grows while building
    for _ in range(3):
        buf.reset()
        meta = backend.build_metadata(seq_lens, tables, chunks, slots, buf)
        _assert_same_metadata(meta, expected)
    assert len(expected.decode_groups) > 1 and expected.decode_groups[0].mask is not None
    grown = {dtype: r.grows for dtype, r in buf.regions.items()}
    assert all(g >= 1 for g in grown.values())
    buf.reset()
    _assert_same_metadata(backend.build_metadata(seq_lens, tables, chunks, slots, buf), expected)
    assert {dtype: r.grows for dtype, r in buf.regions.items()} == grown  # grown once, then reused


def test_put_keeps_shape_and_dtype():
    buf = StepBuffers("cpu")
    t = buf.put(np.arange(6, dtype=np.int32).reshape(2, 3))
    assert t.dtype == torch.int32 and t.shape == (2, 3) and t.tolist() == [[0, 1, 2], [3, 4, 5]]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_pieces_are_uploaded_in_one_copy_per_region_including_outgrown_ones():
    buf = StepBuffers("cuda", {torch.int64: 4})
    for step in range(2):
        buf.reset()
        a_np, a = buf.take(3)
        a_np[:] = [1, 2, 3 + step]
        b_np, b = buf.take(10)  # outgrows the region: ``a`` lives in the retired one
        b_np[:] = np.arange(10)
        buf.upload()
        assert a.device.type == "cuda" and a.tolist() == [1, 2, 3 + step] and b.tolist() == list(range(10))
