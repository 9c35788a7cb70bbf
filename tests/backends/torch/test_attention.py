"""Attention backend selection and the gather path's padding of decodes of unequal lengths."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from backends.torch.attention import GatherSDPABackend, select_attention_backend


def test_cpu_selects_gather_sdpa_and_rejects_unknown_names():
    backend = select_attention_backend(torch.device("cpu"), 6, 2, 8, 4)
    assert isinstance(backend, GatherSDPABackend)
    with pytest.raises(ValueError, match="unknown attention backend"):
        select_attention_backend(torch.device("cpu"), 6, 2, 8, 4, name="nope")


def test_decodes_of_unequal_length_match_per_sequence_attention():
    h, hkv, d, bs = 6, 2, 8, 4
    backend = GatherSDPABackend(h, hkv, d, bs, torch.device("cpu"))
    g = torch.Generator().manual_seed(0)
    k_cache = torch.randn(10, bs, hkv, d, generator=g)
    v_cache = torch.randn(10, bs, hkv, d, generator=g)
    seq_lens, tables = [3, 9, 5], [[7], [2, 9, 4], [0, 5]]
    slots = np.array([t[(n - 1) // bs] * bs + (n - 1) % bs for n, t in zip(seq_lens, tables)])
    meta = backend.build_metadata(seq_lens, tables, [], slots)
    q = torch.randn(3, h, d, generator=g)
    k = torch.randn(3, hkv, d, generator=g)
    v = torch.randn(3, hkv, d, generator=g)
    out = backend.forward(q, k, v, k_cache, v_cache, meta)  # [3, H * D]
    for i, (n, table) in enumerate(zip(seq_lens, tables)):
        ks = k_cache[table].reshape(-1, hkv, d)[:n].repeat_interleave(h // hkv, 1)  # [n, H, D]
        vs = v_cache[table].reshape(-1, hkv, d)[:n].repeat_interleave(h // hkv, 1)
        assert torch.equal(ks[-1, ::3], k[i])  # the new key was written to its slot
        ref = F.scaled_dot_product_attention(q[i][:, None], ks.transpose(0, 1), vs.transpose(0, 1))
        torch.testing.assert_close(out[i], ref.reshape(-1), atol=1e-5, rtol=0)
