"""oneDNN-packed CPU weights: the same logits as the plain matmuls (fp32 tolerance), loading-time views intact."""

from __future__ import annotations

import pytest
import torch

from backends.torch import TorchModelRunner
from backends.torch.cpu_packed import PackedWeight, pack_weights, packing_available
from backends.torch.weights import build_model

pytestmark = pytest.mark.skipif(not packing_available(), reason="this torch has no oneDNN linear ops")


def test_packed_matmuls_match_plain_ones():
    g = torch.Generator().manual_seed(0)
    w_t = torch.randn(48, 80, generator=g)
    packed = PackedWeight(w_t)
    for rows in (1, 3, 32, 70):
        x = torch.randn(rows, 48, generator=g)
        h = torch.randn(rows, 80, generator=g)
        torch.testing.assert_close(torch.mm(x, packed), torch.mm(x, w_t), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(torch.addmm(h, x, packed), torch.addmm(h, x, w_t), atol=1e-5, rtol=1e-5)
    assert type(torch.mm(x, packed)) is torch.Tensor
    assert torch.equal(packed.t(), w_t.t())  # every other op sees the plain data
    assert type(packed.t()) is torch.Tensor


def test_packed_model_gives_the_plain_models_logits_and_tokens(tiny, kit):
    config, sd, _model = tiny
    plain = build_model(config, torch.float32, torch.device("cpu"), state_dict=sd, progress=False)
    packed = build_model(config, torch.float32, torch.device("cpu"), state_dict=sd, progress=False)
    assert pack_weights(packed) and pack_weights(packed)  # idempotent
    assert isinstance(packed.layers[0].qkv_proj_t, PackedWeight) and packed.lm_head_t is packed.embed_t
    torch.testing.assert_close(packed.layers[1].gate_up_proj, plain.layers[1].gate_up_proj, atol=0, rtol=0)

    def run(model):
        return kit.chunked_greedy_logits(TorchModelRunner(model, torch.float32, pack_cpu_weights=False), 5, seed=2)

    got, got_tokens = run(packed)
    want, want_tokens = run(plain)
    assert got_tokens == want_tokens
    for g, w in zip(got, want):
        for k in g:
            torch.testing.assert_close(g[k], w[k], atol=1e-4, rtol=1e-4)


def test_runner_packs_cpu_fp32_only(tiny):
    config, sd, _model = tiny
    runner = TorchModelRunner(config, "float32", state_dict=sd)
    assert runner.packed_weights and "onednn-packed" in runner.kernels
    assert not TorchModelRunner(config, "bfloat16", state_dict=sd).packed_weights
    assert not TorchModelRunner(config, "float32", state_dict=sd, pack_cpu_weights=False).packed_weights
