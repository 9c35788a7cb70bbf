"""The C decode attention (backends/torch/cpu_attention.py) against the gather + SDPA path: random block tables,
GQA, 8/16/32 rows of mixed context lengths with partial last blocks, decode rows beside prefill chunks; the
same bits at 1 and 2 threads; bad tables refused."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from backends.torch.attention import GatherSDPABackend
from backends.torch.cpu_attention import CpuPagedBackend
from backends.torch.cpu_decode import load_library

pytestmark = pytest.mark.skipif(load_library() is None, reason="no C compiler: the kernel is not built here")

CPU = torch.device("cpu")


def _case(rows: int, h: int, hkv: int, d: int, bs: int, seed: int, chunk: int = 0):
    """A cache of random blocks, ``rows`` decodes of random lengths (random distinct blocks each) and optionally
    one prefill chunk of ``chunk`` rows after 5 cached tokens."""
    g = torch.Generator().manual_seed(seed)
    lens = sorted((int(x) for x in torch.randint(1, 6 * bs, (rows,), generator=g)), reverse=True)
    need = sum(-(-n // bs) for n in lens) + 4
    kv = torch.randn(2, need + 3, bs, hkv, d, generator=g)
    perm = torch.randperm(need + 3, generator=g).tolist()
    tables, at = [], 0
    for n in lens:
        nb = -(-n // bs)
        tables.append(perm[at : at + nb])
        at += nb
    chunk_specs = []
    slots = [t[(n - 1) // bs] * bs + (n - 1) % bs for t, n in zip(tables, lens)]
    if chunk:
        blocks = perm[at : at + -(-(5 + chunk) // bs)]
        chunk_specs.append((5, chunk, blocks))
        slots += [blocks[p // bs] * bs + p % bs for p in range(5, 5 + chunk)]
    t = rows + chunk
    qk = torch.randn(t, h + hkv, d, generator=g)  # q as the model passes it: a view of the rotated q|k rows
    q, k = qk[:, :h], qk[:, h:]
    v = torch.randn(t, hkv, d, generator=g)
    return lens, tables, chunk_specs, np.asarray(slots, dtype=np.int64), kv, q, k, v


def _attend(backend, case):
    lens, tables, chunk_specs, slots, kv, q, k, v = case
    kv = kv.clone()
    meta = backend.build_metadata(lens, tables, chunk_specs, slots)
    return backend.forward(q, k, v, kv, meta), kv


@pytest.mark.parametrize(
    ("rows", "h", "hkv", "d", "bs"), [(8, 9, 3, 64, 16), (16, 8, 2, 32, 4), (32, 4, 4, 16, 8), (32, 6, 1, 128, 16)]
)
def test_matches_gather_sdpa(rows, h, hkv, d, bs):
    case = _case(rows, h, hkv, d, bs, seed=rows + h)
    lib = load_library()
    got, kv_got = _attend(CpuPagedBackend(lib, h, hkv, d, bs, CPU), case)
    want, kv_want = _attend(GatherSDPABackend(h, hkv, d, bs, CPU), case)
    assert torch.equal(kv_got, kv_want)  # the same K/V written
    torch.testing.assert_close(got, want, atol=2e-6, rtol=1e-5)


def test_decodes_beside_a_prefill_chunk():
    case = _case(8, 9, 3, 64, 4, seed=3, chunk=6)
    got, _ = _attend(CpuPagedBackend(load_library(), 9, 3, 64, 4, CPU), case)
    want, _ = _attend(GatherSDPABackend(9, 3, 64, 4, CPU), case)
    assert got.shape == (14, 9 * 64)
    torch.testing.assert_close(got, want, atol=2e-6, rtol=1e-5)


def test_same_bits_at_any_thread_count():
    case = _case(32, 9, 3, 64, 16, seed=5)
    backend = CpuPagedBackend(load_library(), 9, 3, 64, 16, CPU)
    old = torch.get_num_threads()
    outs = []
    try:
        for threads in (1, 2, 3):
            torch.set_num_threads(threads)
            outs.append(_attend(backend, case)[0])
    finally:
        torch.set_num_threads(old)
    assert all(torch.equal(outs[0], o) for o in outs[1:])


def test_bad_tables_are_refused():
    lens, tables, _chunks, slots, kv, q, k, v = _case(2, 4, 2, 16, 4, seed=7)
    backend = CpuPagedBackend(load_library(), 4, 2, 16, 4, CPU)
    bad = [list(t) for t in tables]
    bad[0][0] = kv.shape[1]  # a block id past the cache
    meta = backend.build_metadata(lens, bad, [], slots)
    with pytest.raises(ValueError, match="block id out of range"):
        backend.forward(q, k, v, kv, meta)
    with pytest.raises(ValueError, match="fp32"):
        CpuPagedBackend(load_library(), 4, 3, 16, 4, CPU)  # H % Hkv != 0
