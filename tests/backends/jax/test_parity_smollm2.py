"""SmolLM2-135M-Instruct, fp32: the JAX runner against the torch runner on the same checkpoint."""

from __future__ import annotations

import json

import numpy as np
import pytest

from backends.grammar import LLGuidanceCompiler
from backends.torch import TorchModelRunner
from engine.config import CacheConfig, SchedulerConfig
from engine.llm_engine import LLMEngine
from engine.model_runner import KVCacheSpec
from engine.sampling_params import SamplingParams
from engine.structured_output import StructuredOutput

PROMPTS = [
    "The quick brown fox jumps over the lazy dog. Then the dog",
    "def fibonacci(n):\n    if n < 2:\n        return n\n",
    "Paris is the capital of",
]


def _chat(checkpoint, text: str) -> list[int]:
    tok = checkpoint.tokenizer
    return tok.encode(tok.apply_chat_template([{"role": "user", "content": text}]))


def test_logits_match_torch(kit, smollm2_checkpoint, smollm2_model, smollm2_jax):
    """Prefill of four prompts in one batch (chunked by 24 tokens), then batched decode steps."""
    spec = KVCacheSpec(num_device_blocks=64, num_host_blocks=0, block_size=16)
    smollm2_jax.initialize_kv_cache(spec)
    torch_runner = TorchModelRunner(smollm2_model, progress=False)
    torch_runner.initialize_kv_cache(spec)
    alloc = kit.BlockAllocator(64, seed=17)
    tok = smollm2_checkpoint.tokenizer
    seqs = [kit.Seq(f"p{i}", tok.encode(p), kit.GREEDY) for i, p in enumerate(PROMPTS)]
    seqs.append(kit.Seq("chat", _chat(smollm2_checkpoint, "What is the capital of France?"), kit.GREEDY))
    max_diff = 0.0
    for step in range(5):
        sched = [s.schedule(alloc, 16, max_tokens=24) for s in seqs]
        batch = kit.make_step(step, sched)
        ours = smollm2_jax.compute_logits(batch)
        ref = {k: v.numpy() for k, v in torch_runner.compute_logits(batch).items()}
        assert ours.keys() == ref.keys()
        for s, r in zip(seqs, sched):
            if not r.sample:
                s.advance(r, None)
                continue
            max_diff = max(max_diff, float(np.abs(ours[s.req_id] - ref[s.req_id]).max()))
            assert int(ours[s.req_id].argmax()) == int(ref[s.req_id].argmax())
            s.advance(r, [int(ref[s.req_id][0].argmax())])
    print(f"max |logit diff| jax vs torch over {len(seqs)} prompts x steps: {max_diff:.2e}")
    assert max_diff <= 1e-3, max_diff
    assert all(s.num_output >= 2 for s in seqs)


def _engine(runner, checkpoint, num_device_blocks: int = 256, block_size: int = 16) -> LLMEngine:
    return LLMEngine(
        runner,
        checkpoint.tokenizer,
        SchedulerConfig(max_num_batched_tokens=128, max_num_seqs=8, max_model_len=1024),
        CacheConfig(block_size=block_size, num_device_blocks=num_device_blocks, num_host_blocks=64),
        grammars=LLGuidanceCompiler(checkpoint.tokenizer, checkpoint.config.vocab_size),
    )


def _chunked_engine(runner, checkpoint) -> LLMEngine:
    """A 16-token step budget: a prompt runs in chunks."""
    return LLMEngine(
        runner,
        checkpoint.tokenizer,
        SchedulerConfig(max_num_batched_tokens=16, max_num_seqs=4, max_model_len=512),
        CacheConfig(block_size=16, num_device_blocks=64, num_host_blocks=0),
    )


def _scored(engine: LLMEngine, prompt: list[int], params: SamplingParams) -> tuple[list, list[int]]:
    """One request's prompt logprobs and the tokens sampled beside the scored rows."""
    engine.add_request(prompt, params)
    outputs = []
    while engine.has_unfinished_requests():
        outputs += engine.step()
    (scores,) = [out.prompt_logprobs for out in outputs if out.prompt_logprobs is not None]
    return scores, [t for out in outputs for t in out.new_token_ids]


def _stream_tokens(engine: LLMEngine, prompt: list[int], params: SamplingParams) -> list[int]:
    req_id = engine.add_request(prompt, params)
    tokens: list[int] = []
    while engine.has_unfinished_requests():
        for out in engine.step():
            assert out.req_id == req_id
            tokens += out.new_token_ids
    return tokens


@pytest.mark.slow
def test_greedy_64_tokens_identical_to_torch(smollm2_checkpoint, smollm2_model, smollm2_jax):
    params = SamplingParams(temperature=0, max_tokens=64, ignore_eos=True)
    prompt = _chat(smollm2_checkpoint, "Write a short story about a robot who learns to paint.")
    ours = _stream_tokens(_engine(smollm2_jax, smollm2_checkpoint), prompt, params)
    torch_runner = TorchModelRunner(smollm2_model, progress=False)
    ref = _stream_tokens(_engine(torch_runner, smollm2_checkpoint), prompt, params)
    assert len(ours) == 64
    assert ours == ref


def test_chat_answer_through_the_engine(smollm2_checkpoint, smollm2_jax):
    engine = _engine(smollm2_jax, smollm2_checkpoint)
    prompt = engine.encode_chat([{"role": "user", "content": "What is the capital of France?"}])
    (out,) = engine.generate([prompt], SamplingParams(temperature=0, max_tokens=16))
    assert "Paris" in out.text, out.text


def test_swapped_request_continues_identically(smollm2_checkpoint, smollm2_jax):
    """A tiny device cache makes the scheduler preempt by swapping; output equals an uninterrupted run."""
    tok = smollm2_checkpoint.tokenizer
    prompts = [
        tok.encode("The three primary colors are"),
        tok.encode("def fibonacci(n):\n    "),
        tok.encode("In 1969, the first humans to walk on the Moon were"),
    ]
    params = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)

    def run(num_device_blocks: int):
        engine = _engine(smollm2_jax, smollm2_checkpoint, num_device_blocks=num_device_blocks, block_size=4)
        return [o.text for o in engine.generate(prompts, params)], engine.make_stats()

    reference, _ = run(256)
    # ~6-12 prompt tokens + 12 outputs each: ~17 blocks of 4 in all; 10 force swapping
    swapped, stats = run(10)
    assert stats.num_preemptions_total > 0
    assert stats.num_swapped_out_blocks_total > 0
    assert stats.num_swapped_in_blocks_total > 0
    assert swapped == reference


@pytest.mark.slow
def test_penalised_greedy_identical_to_torch(smollm2_checkpoint, smollm2_model, smollm2_jax):
    """Penalties, a bias and min_tokens through each runner's sampler: the same greedy tokens as torch's."""
    tok = smollm2_checkpoint.tokenizer
    params = SamplingParams(
        temperature=0,
        max_tokens=8,
        min_tokens=4,
        frequency_penalty=1.5,
        presence_penalty=0.5,
        repetition_penalty=1.2,
        logit_bias={tok.eos_token_id: 30.0, tok.encode(" one")[0]: 3.0},
    )
    prompt = tok.encode("one one one one one one")
    ours = _stream_tokens(_engine(smollm2_jax, smollm2_checkpoint), prompt, params)
    torch_runner = TorchModelRunner(smollm2_model, progress=False)
    ref = _stream_tokens(_engine(torch_runner, smollm2_checkpoint), prompt, params)
    assert ours == ref
    assert len(ours) == 5 and ours[-1] == tok.eos_token_id  # EOS (biased) held back for min_tokens, then at once


@pytest.mark.slow
def test_structured_greedy_identical_to_torch(smollm2_checkpoint, smollm2_model, smollm2_jax):
    """A JSON schema through each runner's sampler (the grammar's ban on an otherwise plain row): the same greedy
    tokens as torch's, and a JSON object that follows the schema."""
    schema = {
        "type": "object",
        "properties": {
            "capital": {"enum": ["Paris", "London", "Rome"]},
            "country": {"type": "string", "maxLength": 12},
        },
        "required": ["capital", "country"],
        "additionalProperties": False,
    }
    params = SamplingParams(temperature=0, max_tokens=40, structured_outputs=StructuredOutput(json=json.dumps(schema)))
    prompt = _chat(smollm2_checkpoint, "What is the capital of France? Answer in JSON.")
    ours = _stream_tokens(_engine(smollm2_jax, smollm2_checkpoint), prompt, params)
    torch_runner = TorchModelRunner(smollm2_model, progress=False)
    ref = _stream_tokens(_engine(torch_runner, smollm2_checkpoint), prompt, params)
    assert ours == ref
    tok = smollm2_checkpoint.tokenizer
    assert ours[-1] == tok.eos_token_id
    answer = json.loads(tok.decode(ours))
    assert set(answer) == {"capital", "country"} and answer["capital"] in schema["properties"]["capital"]["enum"]


def test_prompt_logprobs_match_torch(smollm2_checkpoint, smollm2_model, smollm2_jax):
    """Every prompt token's score, rank and top alternatives, the prompt chunked (a 16-token step budget) and
    scored in the JAX chunk program as in the torch runner."""
    ids = smollm2_checkpoint.tokenizer.encode(PROMPTS[0] + " ran after the cat, which climbed a tree.")
    params = SamplingParams(max_tokens=4, temperature=0, prompt_logprobs=2)
    runners = (TorchModelRunner(smollm2_model, progress=False), smollm2_jax)
    scores, tokens = zip(*(_scored(_chunked_engine(r, smollm2_checkpoint), ids, params) for r in runners))
    torch_scores, jax_scores = scores
    assert tokens[0] == tokens[1] and len(tokens[0]) == 4
    assert len(jax_scores) == len(ids) and jax_scores[0].logprob is None
    for t, j in zip(torch_scores[1:], jax_scores[1:]):
        assert t.token_id == j.token_id and abs(t.logprob - j.logprob) <= 1e-3
        assert [i for i, _ in t.top] == [i for i, _ in j.top] and abs(t.rank - j.rank) <= 1


@pytest.mark.slow
def test_embeddings_match_torch(smollm2_checkpoint, smollm2_model, smollm2_jax):
    """A prompt's embedding (the normalised final hidden state at its last token, engine/embeddings.py), the prompt
    chunked (a 16-token step budget) and pooled in the JAX chunk program as in the torch runner."""
    ids = smollm2_checkpoint.tokenizer.encode(PROMPTS[0] + " ran after the cat, which climbed a tree.")
    vectors = []
    for runner in (TorchModelRunner(smollm2_model, progress=False), smollm2_jax):
        engine = _chunked_engine(runner, smollm2_checkpoint)
        engine.add_request(ids, SamplingParams(max_tokens=1, temperature=0, embed=True))
        outputs = []
        while engine.has_unfinished_requests():
            outputs += engine.step()
        (vector,) = [out.embedding for out in outputs if out.embedding is not None]
        vectors.append(vector)
    torch_vector, jax_vector = vectors
    assert len(jax_vector) == smollm2_checkpoint.config.hidden_size
    assert max(abs(t - j) for t, j in zip(torch_vector, jax_vector)) < 1e-3
    assert sum(t * j for t, j in zip(torch_vector, jax_vector)) > 0.9999


def test_a_long_prompt_in_one_chunk_steps_matches_torch(smollm2_checkpoint, smollm2_model, smollm2_jax, monkeypatch):
    """A 600-token prompt under a 200-token step budget: three steps of one chunk each (padded to 256 rows), so the
    JAX runner takes its one-chunk path (solo_attention.py), the later two with context that ends inside a block.
    Every prompt token's score matches torch's, and the sampled tokens are torch's."""
    from backends.jax import runner as jax_runner

    built = []
    build = jax_runner.build_solo_meta
    monkeypatch.setattr(jax_runner, "build_solo_meta", lambda *a: built.append(a[1]) or build(*a))
    story = " ".join(f"On day {i} the dog ran after the cat, which climbed a tree and sat there." for i in range(50))
    ids = smollm2_checkpoint.tokenizer.encode(story)[:600]
    params = SamplingParams(max_tokens=3, temperature=0, prompt_logprobs=0)
    scores, tokens = [], []
    for runner in (TorchModelRunner(smollm2_model, progress=False), smollm2_jax):
        engine = LLMEngine(
            runner,
            smollm2_checkpoint.tokenizer,
            SchedulerConfig(max_num_batched_tokens=200, max_num_seqs=4, max_model_len=1024),
            CacheConfig(block_size=16, num_device_blocks=64, num_host_blocks=0),
        )
        one, sampled = _scored(engine, ids, params)
        scores.append(one)
        tokens.append(sampled)
    assert built == [0, 200, 400]  # the JAX runner's three prefill steps took the one-chunk path
    assert tokens[0] == tokens[1] and len(tokens[0]) == 3
    worst = max(abs(t.logprob - j.logprob) for t, j in zip(scores[0][1:], scores[1][1:]))
    assert worst <= 1e-3, worst
