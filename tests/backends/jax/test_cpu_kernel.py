"""The C decode kernel as an XLA FFI custom call (backends/jax/cpu_kernel.py): which steps take it, its logits
against the pure-XLA program and the torch runner, the cache it writes, and bad input."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from backends.jax import cpu_kernel

ATOL = 1e-3  # the backends' parity bound; kernel and XLA agree to ~1e-5 here

pytestmark = pytest.mark.skipif(not cpu_kernel.load(), reason="no C/C++ compiler for the FFI kernel")


def _run(runner, kit, prompts, steps, block_seed=4):
    """Greedy steps (prefill, then decodes of all rows): per step {req_id: logits}, and the final tokens."""
    alloc = kit.BlockAllocator(64, seed=block_seed)
    seqs = [kit.Seq(f"r{i}", list(p), kit.GREEDY) for i, p in enumerate(prompts)]
    logits = []
    for step in range(steps):
        sched = [s.schedule(alloc, 4) for s in seqs]
        out = runner.compute_logits(kit.make_step(step, sched))
        logits.append(out)
        for s, r in zip(seqs, sched):
            s.advance(r, [int(out[s.req_id][0].argmax())] if r.sample else None)
    return logits, [s.token_ids for s in seqs]


@pytest.mark.parametrize("rows", [1, 3, 4, 6, 9])  # 6 and 9: padded to batch buckets 8 and 16
def test_kernel_decodes_match_xla_and_torch(tiny, kit, rows):
    """rows decode rows a step over scrambled block tables; the kernel runner's logits equal the pure-XLA
    runner's and the torch runner's within float rounding, and greedy tokens are identical."""
    config, sd, model = tiny
    kernel = kit.make_jax_runner(config, sd, buckets=kit.TINY_BUCKETS)
    xla = kit.make_jax_runner(config, sd, buckets=kit.TINY_BUCKETS, cpu_decode_kernel=False)
    torch_runner = kit.make_torch_runner(model)
    assert kernel.decode_path == f"cpu-kernel<={cpu_kernel.MAX_PADDED_ROWS}+xla" and xla.decode_path == "xla"
    prompts = [[3 + i, 14, 15, 92 - i, 65, 35, 8][: 3 + 2 * i] for i in range(rows)]
    runs = [_run(r, kit, prompts, steps=14) for r in (kernel, xla, torch_runner)]
    (k_logits, k_tokens), (x_logits, x_tokens), (t_logits, t_tokens) = runs
    assert k_tokens == x_tokens == t_tokens
    diffs = [
        max(float(np.abs(np.asarray(a[q]) - np.asarray(b[q])).max()) for q in a)
        for ref in (x_logits, t_logits)
        for a, b in zip(k_logits, ref)
    ]
    assert max(diffs) <= ATOL, max(diffs)
    # the kernel wrote the same K/V as the XLA layer programs (the cache both read back next step)
    np.testing.assert_allclose(kernel.kv_cache.layer(1)[0], xla.kv_cache.layer(1)[0], atol=1e-5)


def test_which_steps_take_the_kernel(tiny, kit, monkeypatch):
    """<= MAX_ROWS plain decodes: the kernel, one row each; up to MAX_PADDED_ROWS: the kernel, padded to the batch
    bucket; LoRA rows: the XLA layer programs (test_lora.py)."""
    config, sd, _model = tiny
    runner = kit.make_jax_runner(config, sd, buckets=kit.TINY_BUCKETS)
    calls = []
    real = cpu_kernel.kernel_decode_step
    monkeypatch.setattr(cpu_kernel, "kernel_decode_step", lambda *a, **k: calls.append(a[3].shape[0]) or real(*a, **k))
    n = cpu_kernel.MAX_ROWS + 1
    _run(runner, kit, [[5 + i, 6, 7] for i in range(n)], steps=3)
    assert calls == [8, 8]  # 5 rows: padded to the batch bucket of 8
    calls.clear()
    _run(runner, kit, [[5 + i, 6, 7] for i in range(2)], steps=3)
    assert calls == [2, 2]  # the prefill step is a chunk; both decode steps took the kernel


def test_flag_off_runs_pure_xla(tiny, kit, monkeypatch):
    config, sd, _model = tiny
    runner = kit.make_jax_runner(config, sd, buckets=kit.TINY_BUCKETS, cpu_decode_kernel=False)
    assert runner.kernel_params is None
    monkeypatch.setattr(cpu_kernel, "kernel_decode_step", None)  # would fail if called
    _run(runner, kit, [[5, 6, 7]], steps=3)


def test_warmup_compiles_the_kernel_programs(tiny, kit):
    config, sd, _model = tiny
    runner = kit.make_jax_runner(config, sd, num_device_blocks=128, buckets=kit.TINY_BUCKETS)
    runner.warmup(max_num_seqs=4, max_context_tokens=40)
    before = runner.num_compilations
    alloc = kit.BlockAllocator(128, seed=1)
    seqs = [kit.Seq(f"r{i}", [3 + i, 5, 7], kit.GREEDY) for i in range(4)]
    out = runner.execute(kit.make_step(0, sched := [s.schedule(alloc, 4) for s in seqs]))
    for s, r in zip(seqs, sched):
        s.advance(r, out.sampled_token_ids[s.req_id])
    chunk_compiles = runner.num_compilations - before
    for step in range(1, 30):
        active = seqs[: 1 + step % 4]
        sched = [s.schedule(alloc, 4) for s in active]
        out = runner.execute(kit.make_step(step, sched))
        for s, r in zip(active, sched):
            s.advance(r, out.sampled_token_ids[s.req_id])
    assert runner.num_compilations - before == chunk_compiles


def test_bad_block_table_is_an_error_not_a_crash(tiny, kit):
    config, sd, _model = tiny
    runner = kit.make_jax_runner(config, sd, buckets=kit.TINY_BUCKETS)
    num_blocks = runner.kv_cache.device_kv.shape[2]
    tables = np.full((1, 8), num_blocks + 5, dtype=np.int32)  # past the cache
    one = np.ones(1, dtype=np.int32)
    with pytest.raises(Exception, match="block"):
        logits, _kv = cpu_kernel.kernel_decode_step(
            runner.params,
            runner.kernel_params,
            jax.numpy.array(runner.kv_cache.device_kv),  # a copy: the runner's cache stays valid
            one,
            one,
            tables,
            np.int32(1),
            dims=runner.dims,
        )
        jax.block_until_ready(logits)
