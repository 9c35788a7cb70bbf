"""Prompt logprobs on the real model (SmolLM2, torch, fp32): every prompt token's logprob, rank and top alternatives
against transformers' own forward pass (the independent reference), the prompt chunked and batched beside a plain
request; a request that asks is never served from the prefix cache, and the others still are."""

from __future__ import annotations

import pytest
import torch

from engine.sampling_params import SamplingParams

pytestmark = pytest.mark.slow
TEXT = "The quick brown fox jumps over the lazy dog. Then the dog ran after the cat, which climbed a tree."


@pytest.fixture(scope="module")
def engine(smollm2_chunked_engine):
    return smollm2_chunked_engine


@pytest.fixture
def run(run_batch):
    return lambda engine, requests: run_batch(engine, requests, "prompt_logprobs")


@torch.inference_mode()
def test_prompt_logprobs_match_transformers(engine, smollm2_checkpoint, hf_reference, run):
    ids = smollm2_checkpoint.tokenizer.encode(TEXT)
    greedy = SamplingParams(max_tokens=3, temperature=0)
    plain = smollm2_checkpoint.tokenizer.encode("Paris is the capital of")
    (scores, cached, output), (none, _, plain_output) = run(
        engine, [(ids, SamplingParams(max_tokens=3, temperature=0, prompt_logprobs=3)), (plain, greedy)]
    )
    assert none is None and cached == 0
    reference = hf_reference(torch.tensor([ids])).logits[0].float().log_softmax(-1)  # row p scores token p + 1
    assert len(scores) == len(ids) and scores[0].token_id == ids[0] and scores[0].logprob is None
    rank_misses = 0
    for p in range(1, len(ids)):
        ours, row = scores[p], reference[p - 1]
        assert ours.token_id == ids[p]
        assert abs(ours.logprob - float(row[ids[p]])) <= 1e-3, p
        rank_misses += ours.rank != int((row > row[ids[p]]).sum()) + 1
        top = row.topk(3)
        assert [t for t, _ in ours.top] == top.indices.tolist(), p
        assert max(abs(lp - float(v)) for (_, lp), v in zip(ours.top, top.values)) <= 1e-3
    assert rank_misses <= 1  # (a near tie may order differently in fp32)
    assert output == list(hf_reference.generate(torch.tensor([ids]), max_new_tokens=3, do_sample=False)[0, len(ids) :])
    assert plain_output == list(
        hf_reference.generate(torch.tensor([plain]), max_new_tokens=3, do_sample=False)[0, len(plain) :]
    )


def test_a_scored_request_skips_the_prefix_cache_and_the_others_keep_it(engine, smollm2_checkpoint, run):
    ids = smollm2_checkpoint.tokenizer.encode(TEXT + " It was late.")
    asks = SamplingParams(max_tokens=1, temperature=0, prompt_logprobs=0)
    ((first, cached_first, _),) = run(engine, [(ids, asks)])
    ((again, cached_again, _),) = run(engine, [(ids, asks)])  # its prompt's blocks are cached now
    ((_, cached_plain, _),) = run(engine, [(ids, SamplingParams(max_tokens=1, temperature=0))])
    assert cached_first == cached_again == 0 and cached_plain >= 16
    assert [(e.token_id, e.logprob, e.rank) for e in again] == [(e.token_id, e.logprob, e.rank) for e in first]
    assert all(e.top == [] for e in first)  # prompt_logprobs=0: the token's own score only
