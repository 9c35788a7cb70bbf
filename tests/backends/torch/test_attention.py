"""Attention backend selection and the gather path's padding of decodes of unequal lengths."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from backends.torch.attention import GatherSDPABackend, split_decode_groups
from backends.torch.attention_dispatch import select_attention_backend


def test_cpu_selects_gather_sdpa_and_rejects_unknown_names():
    backend = select_attention_backend(torch.device("cpu"), 6, 2, 8, 4)
    assert isinstance(backend, GatherSDPABackend)
    with pytest.raises(ValueError, match="unknown attention backend"):
        select_attention_backend(torch.device("cpu"), 6, 2, 8, 4, name="nope")


def test_split_decode_groups_bounds_padding():
    assert split_decode_groups([]) == [0]
    assert split_decode_groups([3]) == [0]
    assert split_decode_groups([5, 5, 4, 4]) == [0]  # too little padding to pay for a second call
    assert split_decode_groups([20, 19, 3, 2, 2, 1], min_saved_blocks=16) == [0, 2]
    assert split_decode_groups([30, 3, 3, 3, 3, 3, 3], min_saved_blocks=16) == [0, 1]


@pytest.mark.parametrize(
    "seq_lens",
    [
        [3, 9, 5],  # unsorted: one padded group
        [80, 9, 5, 3],  # a lone long row (unmasked group of one) then a padded group
        [76, 73, 12, 8, 4, 1],  # sorted, split into two padded groups
    ],
)
def test_decodes_of_unequal_length_match_per_sequence_attention(seq_lens):
    h, hkv, d, bs = 6, 2, 8, 4
    backend = GatherSDPABackend(h, hkv, d, bs, torch.device("cpu"))
    g = torch.Generator().manual_seed(0)
    num_blocks = 64
    k_cache = torch.randn(num_blocks, bs, hkv, d, generator=g)
    v_cache = torch.randn(num_blocks, bs, hkv, d, generator=g)
    perm = torch.randperm(num_blocks, generator=g).tolist()
    tables = []
    for n in seq_lens:
        tables.append(perm[: -(-n // bs)])
        perm = perm[-(-n // bs) :]
    b = len(seq_lens)
    slots = np.array([t[(n - 1) // bs] * bs + (n - 1) % bs for n, t in zip(seq_lens, tables)])
    meta = backend.build_metadata(seq_lens, tables, [], slots)
    assert sum(grp.num_rows for grp in meta.decode_groups) == b
    q = torch.randn(b, h, d, generator=g)
    k = torch.randn(b, hkv, d, generator=g)
    v = torch.randn(b, hkv, d, generator=g)
    kv_cache = torch.stack((k_cache, v_cache))  # [2, N, bs, Hkv, D]
    out = backend.forward(q, k, v, kv_cache, meta)  # [3, H * D]
    k_cache, v_cache = kv_cache
    for i, (n, table) in enumerate(zip(seq_lens, tables)):
        ks = k_cache[table].reshape(-1, hkv, d)[:n].repeat_interleave(h // hkv, 1)  # [n, H, D]
        vs = v_cache[table].reshape(-1, hkv, d)[:n].repeat_interleave(h // hkv, 1)
        assert torch.equal(ks[-1, ::3], k[i])  # the new key was written to its slot
        ref = F.scaled_dot_product_attention(q[i][:, None], ks.transpose(0, 1), vs.transpose(0, 1))
        torch.testing.assert_close(out[i], ref.reshape(-1), atol=1e-5, rtol=0)
