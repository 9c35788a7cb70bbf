"""The Triton paged kernel against the gather + SDPA path: on a CUDA device where there is one, else on CPU
tensors under TRITON_INTERPRET=1.

Random block tables, GQA (6 query heads over 2 KV heads), partial last blocks, a step mixing decodes,
a chunk after a cached prefix, speculative verify rows and a fresh prompt; fp32, tolerance 1e-5 (1e-4 on a
GPU: its own summation order).
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

if not torch.cuda.is_available():
    # before triton is first imported: @triton.jit (its own tl.* helpers included) reads it then
    os.environ["TRITON_INTERPRET"] = "1"
pytest.importorskip("triton")

from backends.torch import TorchModelRunner, build_model
from backends.torch.attention import GatherSDPABackend
from backends.torch.attention_dispatch import attention_backend_class, kernel_plan, select_attention_backend
from backends.torch.triton_attention import FlashSDPABackend, TritonPagedBackend, paged_rows
from backends.torch.triton_kernels import paged_attention, store_kv

H, HKV, D, BS, NUM_BLOCKS = 6, 2, 8, 4, 48
CPU = torch.device("cpu")
DEVICE = torch.device("cuda") if torch.cuda.is_available() else CPU
TOL = 1e-5 if DEVICE.type == "cpu" else 1e-4


def _step(seed: int, decode_lens: list[int], chunks: list[tuple[int, int]]):
    """Random cache, scrambled block tables, and one step's q/k/v and slots.

    decode_lens: context length of each decode row (its new token included).
    chunks: (start_pos, num_rows) of each non-decode request.
    """
    g = torch.Generator().manual_seed(seed)
    kv_cache = torch.randn(2, NUM_BLOCKS, BS, HKV, D, generator=g)
    free = torch.randperm(NUM_BLOCKS, generator=g).tolist()

    def table(n: int) -> list[int]:
        return [free.pop() for _ in range(-(-n // BS))]

    decode_tables = [table(n) for n in decode_lens]
    chunk_specs = [(start, n, table(start + n)) for start, n in chunks]
    slots = [t[(n - 1) // BS] * BS + (n - 1) % BS for n, t in zip(decode_lens, decode_tables)]
    for start, n, t in chunk_specs:
        slots += [t[p // BS] * BS + p % BS for p in range(start, start + n)]
    rows = len(slots)
    q = torch.randn(rows, H, D, generator=g)
    k = torch.randn(rows, HKV, D, generator=g)
    v = torch.randn(rows, HKV, D, generator=g)
    kv_cache, q, k, v = (t.to(DEVICE) for t in (kv_cache, q, k, v))
    return kv_cache, decode_tables, chunk_specs, np.asarray(slots, dtype=np.int64), q, k, v


def _run(backend_cls, seed, decode_lens, chunks):
    kv_cache, tables, chunk_specs, slots, q, k, v = _step(seed, decode_lens, chunks)
    ref_cache = kv_cache.clone()
    ref = GatherSDPABackend(H, HKV, D, BS, DEVICE)
    ref_out = ref.forward(q, k, v, ref_cache, ref.build_metadata(decode_lens, tables, chunk_specs, slots))
    backend = backend_cls(H, HKV, D, BS, DEVICE)
    out = backend.forward(q, k, v, kv_cache, backend.build_metadata(decode_lens, tables, chunk_specs, slots))
    assert torch.equal(kv_cache, ref_cache)  # the same K/V stored in the same slots
    return out, ref_out


@pytest.mark.parametrize(
    "decode_lens",
    [
        [1],  # the first token of a sequence: one key
        [4, 8],  # full last blocks
        [13, 3, 7, 22, 1],  # partial last blocks, unsorted, one long
    ],
)
def test_decode_rows_match_gather(decode_lens):
    out, ref = _run(TritonPagedBackend, 1, decode_lens, [])
    torch.testing.assert_close(out, ref, atol=TOL, rtol=TOL)


@pytest.mark.parametrize("backend_cls", [TritonPagedBackend, FlashSDPABackend])
def test_mixed_step_matches_gather(backend_cls):
    # decodes | chunk after a 9-token cached prefix | 3 verify rows (1 token + 2 drafts) | fresh prompt
    out, ref = _run(backend_cls, 2, [10, 5, 17], [(9, 6), (14, 3), (0, 7)])
    torch.testing.assert_close(out, ref, atol=TOL, rtol=TOL)


def test_flash_sdpa_sends_only_fresh_prompts_to_sdpa():
    backend = FlashSDPABackend(H, HKV, D, BS, CPU)
    meta = backend.build_metadata([5], [[3, 4]], [(4, 2, [7, 8]), (0, 3, [9])], np.arange(6))
    assert meta.sdpa_chunks == [(3, 3)]
    assert meta.ctx_lens.tolist() == [5, 5, 6, 0, 0, 0]
    assert meta.block_tables.tolist() == [[3, 4], [7, 8], [7, 8], [9, 0], [9, 0], [9, 0]]


def test_padded_rows_store_nothing_and_attend_to_nothing():
    """A CUDA-graph bucket pads with slot -1 and ctx_len 0: no write, zero output."""
    kv_cache, tables, _, slots, q, k, v = _step(3, [6, 2], [])
    before = kv_cache.clone()
    pad_slots = torch.tensor([*slots.tolist(), -1, -1], device=DEVICE)
    pad_k = torch.cat((k, torch.ones(2, HKV, D, device=DEVICE)))
    store_kv(pad_k, torch.cat((v, torch.ones(2, HKV, D, device=DEVICE))), kv_cache, pad_slots)
    changed = (kv_cache != before).any(dim=(0, 3, 4)).reshape(-1).nonzero().reshape(-1).tolist()
    assert sorted(changed) == sorted(slots.tolist())
    table_np, ctx_np = paged_rows([6, 2], tables, [], BS, width=5)
    table_np = np.concatenate((table_np, np.zeros((2, 5), np.int32)))
    ctx_np = np.concatenate((ctx_np, np.zeros(2, np.int32)))
    table, ctx = torch.from_numpy(table_np).to(DEVICE), torch.from_numpy(ctx_np).to(DEVICE)
    out = paged_attention(torch.cat((q, q[:2])), kv_cache, table, ctx, 0.5)
    assert torch.equal(out[2:].cpu(), torch.zeros(2, H, D))
    assert out[:2].abs().sum() > 0


def test_paged_rows_rejects_a_table_too_narrow():
    with pytest.raises(ValueError, match="table width"):
        paged_rows([9], [[1, 2, 3]], [], BS, width=2)


def test_select_by_name_builds_the_triton_backends():
    """By name on this device (a CPU runs them under the interpreter); unnamed, the dispatch table's choice."""
    assert isinstance(select_attention_backend(DEVICE, H, HKV, D, BS, name="triton_paged"), TritonPagedBackend)
    assert isinstance(select_attention_backend(DEVICE, H, HKV, D, BS, name="flash_sdpa"), FlashSDPABackend)
    chosen = select_attention_backend(DEVICE, H, HKV, D, BS)
    assert type(chosen) is attention_backend_class(kernel_plan(DEVICE).attention)
    if DEVICE.type == "cpu":
        assert isinstance(chosen, GatherSDPABackend)  # the table's CPU choice


@pytest.mark.parametrize("name", ["triton_paged", "flash_sdpa"])
def test_runner_on_the_triton_kernel_matches_gather(tiny, kit, name):
    """The tiny model over chunked prefills (history rows), then decodes: same logits, same tokens."""
    config, sd, model = tiny
    if DEVICE.type != "cpu":
        model = build_model(config, "float32", DEVICE, state_dict=sd)

    def run(runner):
        return kit.chunked_greedy_logits(runner, 4, num_host_blocks=8, seed=4)

    got, got_tokens = run(TorchModelRunner(model, model.dtype, attention_backend=name))
    want, want_tokens = run(TorchModelRunner(model, model.dtype))
    assert got_tokens == want_tokens
    for g, w in zip(got, want):
        assert g.keys() == w.keys()
        for k in g:
            torch.testing.assert_close(g[k], w[k], atol=TOL, rtol=TOL)


def test_fp8_cache_stores_rounded_values_and_attends_over_them():
    """An FP8 (e4m3) cache: the store kernel writes 8-bit values, and attention over it equals attention
    over the same values held in fp32 (the kernel upcasts on load). The new K/V are e4m3-representable:
    the interpreter's own fp8 rounding drops the carry into the exponent (0.1227 -> 0.0625), which the
    GPU's conversion instruction does not, so rounding itself is not what this checks."""
    kv_cache, tables, _, slots, q, k, v = _step(4, [9, 14], [])
    k, v = k.to(torch.float8_e4m3fn).float(), v.to(torch.float8_e4m3fn).float()
    fp8 = kv_cache.to(torch.float8_e4m3fn)
    store_kv(k, v, fp8, torch.from_numpy(slots).to(DEVICE))
    flat = fp8.float().view(2, -1, HKV, D)
    idx = torch.from_numpy(slots).to(DEVICE)
    assert torch.equal(flat[0][idx], k) and torch.equal(flat[1][idx], v)
    table_np, ctx_np = paged_rows([9, 14], tables, [], BS)
    t, c = torch.from_numpy(table_np).to(DEVICE), torch.from_numpy(ctx_np).to(DEVICE)
    got = paged_attention(q, fp8, t, c, D**-0.5)
    want = paged_attention(q, fp8.float(), t, c, D**-0.5)
    torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-6)


def test_fp8_cache_block_moves_copy_bytes():
    from backends.kv_layout import KVLayout
    from backends.torch.kv_cache import PagedKVCache

    cache = PagedKVCache(KVLayout(2, HKV, D, 8, 4, BS), torch.float8_e4m3fn, CPU)
    cache.device_kv.copy_(torch.randn(cache.device_kv.shape).to(torch.float8_e4m3fn))
    before = cache.device_kv.view(torch.uint8).clone()
    cache.swap_out([(3, 1)])
    cache.copy([(3, 5)])
    cache.swap_in([(1, 6)])
    moved = cache.device_kv.view(torch.uint8)
    assert torch.equal(moved[:, :, 5], before[:, :, 3]) and torch.equal(moved[:, :, 6], before[:, :, 3])


@pytest.mark.parametrize(("num_splits", "tile"), [(1, 4), (2, 4), (3, 8), (7, 4), (64, 4), (2, 16)])
def test_split_keys_merge_to_the_same_attention(num_splits, tile):
    """Flash-decoding's splits (each row's keys shared out over programs in whole tiles, then merged) change
    no output: rows of 1 to 40 keys, a row with none (zeros), one split, or more splits than tiles."""
    decode_lens = [1, 17, 40, 5, 33]
    kv_cache, tables, _, _slots, q, _k, _v = _step(5, decode_lens, [])
    table_np, ctx_np = paged_rows(decode_lens, tables, [], BS, width=12)
    table_np = np.concatenate((table_np, np.zeros((1, 12), np.int32)))
    ctx_np = np.concatenate((ctx_np, np.zeros(1, np.int32)))
    table, ctx = torch.from_numpy(table_np).to(DEVICE), torch.from_numpy(ctx_np).to(DEVICE)
    q = torch.cat((q, q[:1]))
    got = paged_attention(q, kv_cache, table, ctx, D**-0.5, num_splits=num_splits, tile=tile)
    want = paged_attention(q, kv_cache, table, ctx, D**-0.5, num_splits=1, tile=BS)
    torch.testing.assert_close(got, want, atol=TOL, rtol=TOL)
    assert torch.equal(got[-1].cpu(), torch.zeros(H, D))
    ref = GatherSDPABackend(H, HKV, D, BS, DEVICE)
    n = len(decode_lens)
    ref_cache = kv_cache.clone()
    slots = np.asarray([t[(c - 1) // BS] * BS + (c - 1) % BS for c, t in zip(decode_lens, tables)], dtype=np.int64)
    # the reference stores the rows' own K/V first: store the values already there, so the cache is unchanged
    flat = ref_cache.view(2, -1, HKV, D)
    k_now, v_now = flat[0][torch.from_numpy(slots).to(DEVICE)], flat[1][torch.from_numpy(slots).to(DEVICE)]
    out = ref.forward(q[:n], k_now, v_now, ref_cache, ref.build_metadata(decode_lens, tables, [], slots))
    torch.testing.assert_close(got[:n].reshape(out.shape), out, atol=TOL, rtol=TOL)


def test_tiling_fills_the_gpu_and_stays_static():
    from backends.torch.triton_kernels import attention_tiling

    # SmolLM2 (G 3, D 64) on 132 SMs: tiles of 2 pages, splits a power of two >= 2 x 132 / (batch x 3)
    assert attention_tiling(1, 3, 3, 64, 512, 16, 132) == (32, 64)
    assert attention_tiling(8, 3, 3, 64, 512, 16, 132) == (32, 16)
    assert attention_tiling(64, 3, 3, 64, 512, 16, 132) == (32, 2)
    assert attention_tiling(128, 3, 3, 64, 512, 16, 132) == (16, 1)  # a full grid: one-page tiles, no split
    assert attention_tiling(128, 8, 4, 128, 512, 16, 132) == (16, 1)  # Llama-3-8B at batch 128
    assert attention_tiling(8, 8, 4, 128, 512, 16, 132) == (16, 8)
    assert attention_tiling(1, 8, 4, 128, 2, 16, 132) == (16, 2)  # never more splits than tiles of the table
    widths = range(30, 300)  # eager steps' tables grow a block at a time: few split counts, few compiles
    assert {attention_tiling(1, 8, 4, 128, w, 16, 132)[1] for w in widths} == {32, 64}


def test_eager_launches_over_short_tables_keep_one_split(monkeypatch):
    """Outside graph capture on CUDA (faked here), tables under EAGER_SPLIT_MIN_KEYS keys launch one kernel,
    wider ones split and merge; the outputs agree either way."""
    from backends.torch import triton_kernels as tk

    merges = []
    real_merge = tk._merge_splits_kernel

    class CountingMerge:
        def __getitem__(self, grid):
            merges.append(grid)
            return real_merge[grid]

    monkeypatch.setattr(tk, "_merge_splits_kernel", CountingMerge())
    monkeypatch.setattr(tk, "_eager_on_cuda", lambda device: True)
    kv_cache, tables, _, _slots, q, _k, _v = _step(6, [9], [])
    for width, splits in ((12, False), (tk.EAGER_SPLIT_MIN_KEYS // BS, True)):
        table_np, ctx_np = paged_rows([9], tables, [], BS, width=width)
        table, ctx = torch.from_numpy(table_np).to(DEVICE), torch.from_numpy(ctx_np).to(DEVICE)
        merges.clear()
        got = tk.paged_attention(q, kv_cache, table, ctx, D**-0.5, tile=BS)
        assert bool(merges) is splits, width
        want = tk.paged_attention(q, kv_cache, table, ctx, D**-0.5, num_splits=1, tile=BS)
        torch.testing.assert_close(got, want, atol=TOL, rtol=TOL)
