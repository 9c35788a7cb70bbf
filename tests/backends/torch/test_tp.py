"""Tensor parallelism across local processes (gloo): token-identical greedy output vs TP=1, and every
all-reduce agreeing with the exact sum. Each test starts one group (a few seconds of process start-up)."""

from __future__ import annotations

import pytest
import torch

from backends.runner_driver import drive_embed, drive_greedy, tiny_config
from backends.torch import TorchModelRunner, random_state_dict
from backends.torch.allreduce import COMPRESSIONS, compression_tolerance
from backends.torch.tp_group import TPConfig
from backends.torch.tp_launch import allreduce_variants, run_ranks, run_sequence, tp_embed, tp_generate
from backends.torch.weights import hf_state_dict

PROMPTS = [[5, 6, 7, 8, 9, 10, 11], [12, 13, 14], [3] * 9]


def _reference(config, sd, prompts, num_new):
    return drive_greedy(TorchModelRunner(config, state_dict=sd, progress=False), prompts, num_new)[0]


def test_tp2_flat_is_token_identical_to_tp1(tiny):
    """Rank 0 first idles longer than a collective may wait: an idle engine must not end its followers."""
    config, sd, _ = tiny
    ref = _reference(config, sd, PROMPTS, 12)
    args = (config, PROMPTS, 12, sd, "float32", 4, 6.0)
    rank0, follower_steps = run_ranks(tp_generate, TPConfig(size=2), args, collective_timeout_s=4.0)
    ids, times = rank0
    assert ids == ref
    assert len(times) == 12 and follower_steps == 12  # the follower ran every step the leader ran


def test_tp2_embeddings_equal_tp1(tiny):
    """The leader's final hidden states are the whole model's (the residual stream is all-reduced, the final norm
    replicated), so a TP node embeds as a TP=1 one does."""
    config, sd, _ = tiny
    ref = drive_embed(TorchModelRunner(config, state_dict=sd, progress=False), PROMPTS)
    got, _ = run_ranks(tp_embed, TPConfig(size=2), (config, PROMPTS, sd))
    assert len(got) == len(PROMPTS) and all(len(v) == config.hidden_size for v in got)
    assert max(abs(a - b) for u, v in zip(got, ref) for a, b in zip(u, v)) < 1e-4


def test_tp4_hierarchical_is_token_identical_and_allreduces_agree():
    """4 ranks in 2 fast domains of 2: generation over the hierarchical all-reduce, then every all-reduce
    variant (flat, leader-based, sharded; uncompressed, bf16, int8) on the same inputs against the exact
    (float64) sum."""
    config = tiny_config(num_attention_heads=8, num_key_value_heads=4)
    sd = random_state_dict(config, seed=2, std=0.2)
    ref = _reference(config, sd, PROMPTS, 8)
    numel = 3 * 256 + 17  # a partial int8 block and uneven ring chunks
    cfg = TPConfig(size=4, allreduce="hierarchical", domain_size=2)
    results = run_ranks(
        run_sequence, cfg, ([(tp_generate, (config, PROMPTS, 8, sd)), (allreduce_variants, (numel, 2, 7))],)
    )
    assert results[0][0][0] == ref
    variants = [r[1] for r in results]
    inputs = [v["input"] for v in variants]
    exact = sum(x.double() for x in inputs)
    partials = [inputs[0] + inputs[1], inputs[2] + inputs[3]]  # what the two leaders send
    names = ["library", "ring"] + [f"{kind}_{c}" for kind in ("hierarchical", "sharded") for c in COMPRESSIONS]
    for name in names:
        outs = [v[name] for v in variants]
        for o in outs[1:]:
            assert torch.equal(o, outs[0]), f"{name}: ranks disagree"
        tol = 1e-5
        if "_" in name:
            kind, compression = name.split("_")
            shards = 2 if kind == "sharded" else 1  # each rank of a domain sends its half
            tol = tol + compression_tolerance(partials, compression, shards).double()
        err = (outs[0].double() - exact).abs()
        assert bool((err <= tol).all()), f"{name}: max error {err.max():.3g}"
    # compression really happened: int8 is not exact, and its error is within, not far under, its bound
    int8_err = (variants[0]["hierarchical_int8"].double() - exact).abs().max()
    assert 1e-4 < int8_err <= compression_tolerance(partials, "int8").max()
    assert not torch.equal(variants[0]["sharded_int8"], variants[0]["sharded_none"])


@pytest.mark.slow
def test_smollm2_tp3_is_token_identical(smollm2_checkpoint, smollm2_model, tmp_path):
    """The real model splits over 3 ranks (9 heads, 3 KV heads); greedy, a few tokens. The ranks map the
    fp32 weights this session already dequantized (hf_state_dict, saved once) instead of each decoding the
    GGUF again; tests/backends/checkpoint/test_tp_engine.py covers ranks loading a checkpoint file."""
    tok = smollm2_checkpoint.tokenizer
    prompts = [
        tok.encode(tok.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}])),
        tok.encode("The quick brown fox"),
    ]
    ref = drive_greedy(TorchModelRunner(smollm2_model, progress=False), prompts, 5, block_size=16)[0]
    weights = tmp_path / "smollm2.pt"
    torch.save({k: v.contiguous() for k, v in hf_state_dict(smollm2_model).items()}, weights)
    args = (smollm2_model.config, prompts, 5, str(weights), "float32", 16)
    (ids, _), *_ = run_ranks(tp_generate, TPConfig(size=3), args)
    assert ids == ref
