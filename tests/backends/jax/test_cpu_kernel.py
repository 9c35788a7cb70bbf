"""The C decode kernel as an XLA FFI custom call (backends/jax/cpu_kernel.py): which steps take it, its logits
against the pure-XLA program and the torch runner, the cache it writes, and bad input."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from backends.head_panels import PANEL, pack_panels
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


def test_pack_panels_layout():
    """Panel p holds columns 32p .. 32p + 31 of the [E, V] head, row-major; the last panel zero-padded."""
    head_t = np.arange(3 * 70, dtype=np.float32).reshape(3, 70)
    panels = pack_panels(head_t)
    assert panels.shape == (3, 3, PANEL) and panels.flags.c_contiguous
    np.testing.assert_array_equal(panels[1], head_t[:, 32:64])
    np.testing.assert_array_equal(panels[2, :, :6], head_t[:, 64:])
    assert not panels[2, :, 6:].any()
    assert cpu_kernel.head_for(4) == cpu_kernel.HEAD_KERNEL
    assert cpu_kernel.head_for(5) == cpu_kernel.HEAD_PANELS and cpu_kernel.head_for(5, True) == cpu_kernel.HEAD_XLA


@pytest.mark.parametrize("vocab", [97, 112, 128])  # a last panel of 1 column, of 16 (one vector), none
def test_panel_head_equals_the_kernels_and_xlas_head(kit, vocab):
    """The blocked GEMM over the panel-packed head gives the kernel's matrix-vector head bit for bit (each logit
    sums k = 0..E-1 in order in one accumulator), at any thread count, and XLA's dot within float rounding."""
    from backends.torch import random_state_dict

    config = kit.tiny_config(vocab_size=vocab)
    runner = kit.make_jax_runner(config, random_state_dict(config, seed=3, std=0.2), buckets=kit.TINY_BUCKETS)
    rows, width = 9, 4
    rng = np.random.default_rng(vocab)
    tokens = rng.integers(0, vocab, rows).astype(np.int32)
    positions = rng.integers(0, width * runner.block_size, rows).astype(np.int32)
    tables = (1 + np.arange(rows * width, dtype=np.int32)).reshape(rows, width)  # every row its own blocks
    out = {}
    for head in (cpu_kernel.HEAD_XLA, cpu_kernel.HEAD_KERNEL, cpu_kernel.HEAD_PANELS):
        for threads in (1, 2):
            logits, _kv = cpu_kernel.kernel_decode_step(
                runner.params,
                runner.kernel_params,
                jax.numpy.array(runner.kv_cache.device_kv),  # a copy: each call starts from the same cache
                tokens,
                positions,
                tables,
                np.int32(threads),
                dims=runner.dims,
                head=head,
            )
            out[head, threads] = np.asarray(logits)
    assert out[cpu_kernel.HEAD_PANELS, 1].shape == (rows, vocab)
    for threads in (1, 2):
        np.testing.assert_array_equal(out[cpu_kernel.HEAD_PANELS, threads], out[cpu_kernel.HEAD_KERNEL, 1])
        np.testing.assert_allclose(out[cpu_kernel.HEAD_PANELS, threads], out[cpu_kernel.HEAD_XLA, 1], atol=1e-5)
    with pytest.raises(ValueError, match="head"):
        cpu_kernel.kernel_decode_step(
            runner.params,
            runner.kernel_params,
            runner.kv_cache.device_kv,
            tokens,
            positions,
            tables,
            np.int32(1),
            dims=runner.dims,
            head=3,
        )


def test_cpu_decode_head_flag(tiny, kit):
    """cpu_decode_head='xla' (the A/B reference) gives the same greedy tokens as the default panel head."""
    config, sd, _model = tiny
    panels = kit.make_jax_runner(config, sd, buckets=kit.TINY_BUCKETS)
    xla = kit.make_jax_runner(config, sd, buckets=kit.TINY_BUCKETS, cpu_decode_head="xla")
    prompts = [[3 + i, 14, 15, 92 - i][: 2 + i % 3] for i in range(6)]
    (p_logits, p_tokens), (x_logits, x_tokens) = (_run(r, kit, prompts, steps=6) for r in (panels, xla))
    assert p_tokens == x_tokens
    assert max(float(np.abs(a[q] - b[q]).max()) for a, b in zip(p_logits, x_logits) for q in a) <= 1e-5
    with pytest.raises(ValueError, match="cpu_decode_head"):
        kit.make_jax_runner(config, sd, cpu_decode_head="onednn")
