"""Prompt embeddings on the real model (SmolLM2, torch, fp32): vLLM's LAST pooling, normalised, against
transformers' own final hidden state (the independent reference); the prompt chunked and batched beside a plain
request; served from the prefix cache but for its last token, with the same vector; refused by a runner that
cannot compute one."""

from __future__ import annotations

import math

import pytest
import torch

from backends.fake import build_trivial_engine
from engine.sampling_params import SamplingParams

pytestmark = pytest.mark.slow
TEXT = "The quick brown fox jumps over the lazy dog. Then the dog ran after the cat, which climbed a tree."
EMBED = SamplingParams(max_tokens=1, temperature=0, embed=True)


@pytest.fixture(scope="module")
def engine(smollm2_chunked_engine):
    return smollm2_chunked_engine


@pytest.fixture
def run(run_batch):
    return lambda engine, requests: run_batch(engine, requests, "embedding")


def _reference(hf_reference, ids: list[int]) -> torch.Tensor:
    hidden = hf_reference.model(torch.tensor([ids])).last_hidden_state[0, -1].float()  # after the final norm
    return torch.nn.functional.normalize(hidden, dim=0)


@torch.inference_mode()
def test_an_embedding_is_the_normalised_last_hidden_state(engine, smollm2_checkpoint, hf_reference, run):
    tokenizer = smollm2_checkpoint.tokenizer
    ids, plain = tokenizer.encode(TEXT), tokenizer.encode("Paris is the capital of")
    greedy = SamplingParams(max_tokens=3, temperature=0)
    (vector, _, _), (none, _, plain_output) = run(engine, [(ids, EMBED), (plain, greedy)])
    assert none is None and len(vector) == smollm2_checkpoint.config.hidden_size
    assert math.isclose(sum(v * v for v in vector), 1.0, rel_tol=1e-5)
    ours, reference = torch.tensor(vector), _reference(hf_reference, ids)
    assert float(ours @ reference) > 0.9999 and float((ours - reference).abs().max()) < 1e-3
    assert (
        plain_output
        == list(  # the plain request beside it is untouched
            hf_reference.generate(torch.tensor([plain]), max_new_tokens=3, do_sample=False)[0, len(plain) :]
        )
    )
    (short, _, _), (other, _, _) = run(engine, [(tokenizer.encode("Hello"), EMBED), (plain, EMBED)])
    assert float(torch.tensor(short) @ _reference(hf_reference, tokenizer.encode("Hello"))) > 0.9999
    assert float(torch.tensor(other) @ _reference(hf_reference, plain)) > 0.9999


def test_the_prefix_cache_serves_all_but_the_pooled_token(engine, smollm2_checkpoint, run):
    # two whole blocks and one token: the blocks cached the second time, so only the last token runs, a one-token
    # chunk on a cached context (which must not take the decode path, where no hidden state comes back)
    ids = smollm2_checkpoint.tokenizer.encode("Rivers run north in winter, where the snow never melts. " * 4)[:33]
    ((first, cached_first, _),) = run(engine, [(ids, EMBED)])
    ((again, cached_again, _),) = run(engine, [(ids, EMBED)])  # its prompt's blocks are cached now
    assert (cached_first, cached_again) == (0, 32)
    assert max(abs(a - b) for a, b in zip(first, again)) < 1e-4


def test_a_runner_that_cannot_embed_refuses_by_name():
    engine = build_trivial_engine()
    with pytest.raises(ValueError, match=r"^embed:"):
        engine.add_request([1, 2, 3], EMBED)
    assert not engine.has_unfinished_requests()
