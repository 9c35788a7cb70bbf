"""LLMEngine on the real model (torch runner, fp32): KV pressure and the prefix cache do not change
greedy output. Few tokens: the real model decodes ~15 tok/s here."""

from __future__ import annotations

import pytest

from backends.torch import TorchModelRunner
from engine.config import CacheConfig, PreemptionMode, SchedulerConfig
from engine.llm_engine import LLMEngine
from engine.sampling_params import SamplingParams

pytestmark = pytest.mark.slow

PROMPTS = [
    "The three primary colors are",
    "def fibonacci(n):\n    ",
    "In 1969, the first humans to walk on the Moon were",
]
GREEDY = SamplingParams(temperature=0, max_tokens=10, ignore_eos=True)


def _engine(model, tokenizer, num_device_blocks: int, mode=PreemptionMode.SWAP) -> LLMEngine:
    return LLMEngine(
        TorchModelRunner(model, progress=False),
        tokenizer,
        SchedulerConfig(max_num_batched_tokens=64, max_num_seqs=8, max_model_len=512, preemption_mode=mode),
        CacheConfig(block_size=4, num_device_blocks=num_device_blocks, num_host_blocks=64),
    )


def _run(engine: LLMEngine, prompts) -> list[list[int]]:
    """Every request's full output token ids, accumulated from the streamed deltas."""
    ids = [engine.add_request(p, GREEDY) for p in prompts]
    tokens: dict[str, list[int]] = {i: [] for i in ids}
    while engine.has_unfinished_requests():
        for out in engine.step():
            tokens[out.req_id] += out.new_token_ids
    return [tokens[i] for i in ids]


@pytest.fixture(scope="module")
def reference(smollm2_model, smollm2_checkpoint):
    return _run(_engine(smollm2_model, smollm2_checkpoint.tokenizer, num_device_blocks=256), PROMPTS)


@pytest.mark.parametrize("mode", [PreemptionMode.SWAP, PreemptionMode.RECOMPUTE])
def test_preemption_under_kv_pressure_keeps_greedy_output(smollm2_model, smollm2_checkpoint, reference, mode):
    # 3 prompts of ~6-12 tokens + 10 outputs need ~15 blocks of 4 tokens; 9 blocks force preemption
    engine = _engine(smollm2_model, smollm2_checkpoint.tokenizer, num_device_blocks=9, mode=mode)
    got = _run(engine, PROMPTS)
    stats = engine.make_stats()
    assert stats.num_preemptions_total > 0
    if mode is PreemptionMode.SWAP:
        assert stats.num_swapped_out_blocks_total > 0
        assert stats.num_swapped_in_blocks_total > 0
    assert got == reference
    assert all(len(t) == GREEDY.max_tokens for t in got)


def test_prefix_cache_hit_skips_prefill_and_keeps_output(smollm2_model, smollm2_checkpoint):
    tok = smollm2_checkpoint.tokenizer
    engine = _engine(smollm2_model, tok, num_device_blocks=128)
    shared = tok.encode("You are a careful assistant. Answer briefly and precisely. " * 3)
    (first,) = engine.generate([shared + tok.encode(" Q: 2+2?")], GREEDY)
    before = engine.make_stats().prefix_cache_hits_total
    engine.take_step_records()
    (second,) = engine.generate([shared + tok.encode(" Q: 2+2?")], GREEDY)
    hits = engine.make_stats().prefix_cache_hits_total - before
    prefilled = sum(r.num_prefill_tokens for r in engine.take_step_records())
    prompt_len = len(shared) + len(tok.encode(" Q: 2+2?"))
    # every full block but the one holding the last prompt token is a hit (block_size 4)
    assert hits == (prompt_len - 1) // 4 * 4
    assert prefilled == prompt_len - hits
    assert second.text == first.text


def _tokens(engine: LLMEngine, prompt, params: SamplingParams, **kw):
    """One request's output token ids (from the streamed deltas) and its finish reason."""
    req_id = engine.add_request(prompt, params, **kw)
    tokens, reason = [], None
    while engine.has_unfinished_requests():
        for out in engine.step():
            if out.req_id == req_id:
                tokens += out.new_token_ids
                reason = out.finish_reason
    return tokens, reason


def test_logits_processing_on_the_real_model(smollm2_model, smollm2_checkpoint):
    """A bias of 100 makes greedy pick its token every step; min_tokens holds EOS back (biased to the top) until
    reached, then EOS ends it at once; a frequency penalty breaks greedy's loop of repeats."""
    tok = smollm2_checkpoint.tokenizer
    engine = _engine(smollm2_model, tok, num_device_blocks=128)
    (banana,) = tok.encode(" banana")
    forced, _ = _tokens(engine, PROMPTS[0], SamplingParams(temperature=0, max_tokens=4, logit_bias={banana: 100.0}))
    assert forced == [banana] * 4
    (apple,) = tok.encode(" apple")
    labels, _ = _tokens(
        engine, PROMPTS[0], SamplingParams(temperature=0, max_tokens=3, allowed_token_ids=[banana, apple])
    )
    assert set(labels) <= {banana, apple} and len(labels) == 3
    eos_first = {tok.eos_token_id: 100.0}
    held, reason = _tokens(
        engine, PROMPTS[0], SamplingParams(temperature=0, max_tokens=6, min_tokens=3, logit_bias=eos_first)
    )
    assert len(held) == 4 and tok.eos_token_id not in held[:3]
    assert held[3] == tok.eos_token_id and reason.value == "stop"
    loop = "one one one one one one one one one one"
    plain, _ = _tokens(engine, loop, SamplingParams(temperature=0, max_tokens=6, ignore_eos=True))
    penalised, _ = _tokens(
        engine, loop, SamplingParams(temperature=0, max_tokens=6, ignore_eos=True, frequency_penalty=2)
    )
    assert max(plain.count(t) for t in plain) >= 3  # greedy repeats itself here
    assert max(penalised.count(t) for t in penalised) < 3


def test_a_resumed_penalised_request_continues_as_it_would_have(smollm2_model, smollm2_checkpoint):
    """Resumed elsewhere after k tokens (the prompt extended by them, GenerateRequest.num_resumed_tokens = k), a
    penalised greedy request goes on with the tokens it would have produced: its penalties count the k as output."""
    tok = smollm2_checkpoint.tokenizer
    prompt = tok.encode("one one one one one one")
    params = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True, frequency_penalty=1.5, presence_penalty=0.5)
    whole, _ = _tokens(_engine(smollm2_model, tok, num_device_blocks=128), prompt, params)
    k = 3
    engine = _engine(smollm2_model, tok, num_device_blocks=128)
    rest = SamplingParams(temperature=0, max_tokens=6 - k, ignore_eos=True, frequency_penalty=1.5, presence_penalty=0.5)
    resumed, _ = _tokens(engine, [*prompt, *whole[:k]], rest, num_resumed_tokens=k)
    assert whole[:k] + resumed == whole
    told_nothing, _ = _tokens(engine, [*prompt, *whole[:k]], rest)  # the k taken for prompt: another continuation
    assert told_nothing != resumed  # (so the test can fail: the count is what keeps it exact)
    with pytest.raises(ValueError, match="num_resumed_tokens"):
        engine.add_request(prompt, rest, num_resumed_tokens=len(prompt))
