"""The C decode kernel (backends/torch/cpu_decode.py) against the torch path: the same logits within fp32
rounding on random block tables with GQA, bit-identical at 1 and 2 threads, bad input refused, and the
runner falling back to torch ops where the kernel does not serve. Greedy parity with transformers on the real
model runs through the kernel in test_parity_smollm2.py (its decode steps have 2-4 rows)."""

from __future__ import annotations

import pytest
import torch

from backends.runner_driver import tiny_config
from backends.torch import TorchModelRunner
from backends.torch.attention import GatherSDPABackend
from backends.torch.cpu_attention import CpuPagedBackend
from backends.torch.cpu_decode import MAX_ROWS, build_library, gemv, load_library
from backends.torch.weights import build_model, random_state_dict
from engine.model_runner import KVCacheSpec

pytestmark = pytest.mark.skipif(load_library() is None, reason="no C compiler: the kernel is not built here")

BLOCK = 4


def _runner(model, kernel: bool, blocks: int = 64) -> TorchModelRunner:
    # all intra-op threads, not the adaptive choice: the thread count under test is the one set
    runner = TorchModelRunner(model, torch.float32, cpu_decode_kernel=kernel, adaptive_threads=False)
    runner.initialize_kv_cache(KVCacheSpec(blocks, 0, BLOCK))
    return runner


def _decode_logits(kit, model, kernel: bool, num_rows: int, steps: int = 6, threads: int = 1):
    """Prefill ``num_rows`` requests of different lengths (5 to 51 tokens: chunks, the torch path), then ``steps``
    decode steps of all rows together; the logits of every decode step."""
    blocks = max(64, 16 * num_rows)
    runner = _runner(model, kernel, blocks)
    alloc = kit.BlockAllocator(blocks, seed=num_rows)
    lengths = [5 + (6 * i) % 47 for i in range(num_rows)]
    seqs = [kit.Seq(f"r{i}", [(7 * i + j) % 90 + 3 for j in range(n)], kit.GREEDY) for i, n in enumerate(lengths)]
    for i, s in enumerate(seqs):  # prefill one request a step
        r = s.schedule(alloc, BLOCK)
        out = runner.compute_logits(kit.make_step(i, [r]))
        s.advance(r, [int(out[s.req_id][-1].argmax())])
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        steps_logits = []
        for step in range(steps):
            sched = [s.schedule(alloc, BLOCK) for s in seqs]
            assert all(r.is_decode for r in sched)
            out = runner.compute_logits(kit.make_step(100 + step, sched))
            steps_logits.append(out)
            for s, r in zip(seqs, sched):
                s.advance(r, [int(out[s.req_id][0].argmax())])
    finally:
        torch.set_num_threads(old)
    return steps_logits, runner


@pytest.mark.parametrize("num_rows", [1, 2, 4, 5, 8, 16, 32])
def test_kernel_matches_torch_path(tiny, kit, num_rows):
    """Up to 4 rows the kernel's products are GEMVs; from 5 on register-blocked GEMMs over blocks of rows and
    32 columns (the tiny model's 48, 80 and 97 columns also take the 16-column and single-column tails), with
    attention per (row, KV head) and the output head through torch."""
    _config, _sd, model = tiny
    got, runner = _decode_logits(kit, model, True, num_rows)
    want, plain = _decode_logits(kit, model, False, num_rows)
    assert runner.cpu_decoder is not None and "cpu-kernel" in runner.kernels
    assert plain.cpu_decoder is None
    for g, w in zip(got, want):
        assert g.keys() == w.keys()
        for k in g:
            torch.testing.assert_close(g[k], w[k], atol=2e-5, rtol=1e-5)


def test_untied_head_and_block_crossing(kit):
    """A separate output head; 12 decode steps of 4-token blocks cross several block boundaries."""
    config = tiny_config(tie_word_embeddings=False)
    model = build_model(config, torch.float32, state_dict=random_state_dict(config, seed=4, std=0.2), progress=False)
    got, _ = _decode_logits(kit, model, True, 2, steps=12)
    want, _ = _decode_logits(kit, model, False, 2, steps=12)
    for g, w in zip(got, want):
        for k in g:
            torch.testing.assert_close(g[k], w[k], atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("num_rows", [3, 32])
def test_same_bits_at_one_and_two_threads(tiny, kit, num_rows):
    """Threads split columns and heads, never a sum: the thread count does not change a bit."""
    _config, _sd, model = tiny
    one, _ = _decode_logits(kit, model, True, num_rows, steps=2, threads=1)
    two, _ = _decode_logits(kit, model, True, num_rows, steps=2, threads=2)
    for a, b in zip(one, two):
        for k in a:
            assert torch.equal(a[k], b[k])


def test_bad_input_is_refused_not_a_crash(tiny):
    _config, _sd, model = tiny
    decoder = _runner(model, True).cpu_decoder
    ids, pos = torch.tensor([5]), torch.tensor([3])
    table = torch.tensor([[0, 1]])
    assert decoder.step(ids, pos, table, 3, 1).shape == (1, model.config.vocab_size)
    with pytest.raises(ValueError, match="block id out of range"):
        decoder.step(ids, pos, torch.tensor([[64, 1]]), 3, 1)
    with pytest.raises(ValueError, match="out of range"):
        decoder.step(torch.tensor([model.config.vocab_size]), pos, table, 3, 1)
    with pytest.raises(ValueError, match="block table too short"):
        decoder.step(ids, torch.tensor([9]), table, 9, 1)  # position 9 needs a third block
    with pytest.raises(ValueError, match="int64"):
        decoder.step(ids.int(), pos, table, 3, 1)


def test_runner_falls_back_where_the_kernel_does_not_serve(tiny, kit):
    config, sd, model = tiny
    assert _runner(model, False).cpu_decoder is None
    bf16 = TorchModelRunner(config, "bfloat16", state_dict=sd)
    bf16.initialize_kv_cache(KVCacheSpec(16, 0, BLOCK))
    assert bf16.cpu_decoder is None
    # more rows than the kernel serves: the torch path (its decode attention in C, cpu_attention.py; the gather
    # backend without the kernel), the same logits within fp32 rounding
    got, runner = _decode_logits(kit, model, True, MAX_ROWS + 1, steps=2)
    want, plain = _decode_logits(kit, model, False, MAX_ROWS + 1, steps=2)
    assert isinstance(runner.attn, CpuPagedBackend) and "decode-attention=cpu-kernel" in runner.kernels
    assert type(plain.attn) is GatherSDPABackend and "cpu-kernel" not in plain.kernels
    for g, w in zip(got, want):
        for k in g:
            torch.testing.assert_close(g[k], w[k], atol=2e-5, rtol=1e-5)


def test_build_is_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("ZOO_KERNEL_CACHE", str(tmp_path))
    first = build_library()
    assert first is not None and first.parent == tmp_path
    mtime = first.stat().st_mtime_ns
    assert build_library() == first and first.stat().st_mtime_ns == mtime


def test_gemv_alone():
    lib = load_library()
    g = torch.Generator().manual_seed(1)
    w_t = torch.randn(37, 300, generator=g)
    for rows in (1, 3):
        x = torch.randn(rows, 37, generator=g)
        h = torch.randn(rows, 300, generator=g)
        torch.testing.assert_close(gemv(lib, x, w_t, 2), x @ w_t, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(gemv(lib, x, w_t, 1, out=h.clone()), h + x @ w_t, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="shapes"):
        gemv(lib, torch.randn(1, 36), w_t, 1)
    with pytest.raises(ValueError, match="shapes"):
        gemv(lib, torch.randn(65, 37), w_t, 1)  # more rows than a call serves


def test_real_model_batch_of_32_same_greedy_tokens(smollm2_model, kit):
    """SmolLM2-135M (head_dim 64: the kernel's specialised attention), 32 rows of different prompts and lengths:
    the kernel's steps give the torch path's greedy tokens, and logits within fp32 rounding."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)  # correctness only: one thread is fastest on a shared test machine
    try:
        tokens, logits = _real_model_decodes(smollm2_model, kit)
    finally:
        torch.set_num_threads(old)
    assert tokens[True] == tokens[False]
    for g, w in zip(logits[True], logits[False]):
        for k in g:
            torch.testing.assert_close(g[k], w[k], atol=2e-4, rtol=1e-4)


def _real_model_decodes(model, kit):
    """With and without the kernel: each row's tokens and the logits of 2 decode steps of all 32 rows."""
    tokens, logits = {}, {}
    for kernel in (True, False):
        runner = TorchModelRunner(model, torch.float32, cpu_decode_kernel=kernel, adaptive_threads=False)
        runner.initialize_kv_cache(KVCacheSpec(256, 0, 16))
        alloc = kit.BlockAllocator(256, seed=3)
        seqs = [
            kit.Seq(f"r{i}", [(37 * i + 11 * j) % 4000 + 100 for j in range(4 + i % 13)], kit.GREEDY) for i in range(32)
        ]
        for i, s in enumerate(seqs):
            r = s.schedule(alloc, 16)
            out = runner.compute_logits(kit.make_step(i, [r]))
            s.advance(r, [int(out[s.req_id][-1].argmax())])
        step_logits = []
        for step in range(2):
            sched = [s.schedule(alloc, 16) for s in seqs]
            out = runner.compute_logits(kit.make_step(100 + step, sched))
            step_logits.append(out)
            for s, r in zip(seqs, sched):
                s.advance(r, [int(out[s.req_id][0].argmax())])
        tokens[kernel] = [list(s.token_ids) for s in seqs]
        logits[kernel] = step_logits
    return tokens, logits
