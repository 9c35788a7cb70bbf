"""The OpenAI details with the real tokenizer (SmolLM2's, from its GGUF) on both sides, through the official
``openai`` package: logprobs name real tokens (text and bytes that join into the answer), the prefix cache of the
chat template's prompt shows in ``cached_tokens``, and /tokenize counts a chat exactly as its completion's usage.

The agent runs in-process on the trivial runner (it always samples " Paris", with logprobs of its point-mass
distribution) over the real tokenizer and a real engine (scheduler, prefix cache, detokenizer): what is tested
here is what happens to tokens after sampling, without loading the weights."""

from __future__ import annotations

import httpx
import openai
import pytest

from backends.fake.trivial_runner import TrivialRunner
from engine.config import CacheConfig, SchedulerConfig
from engine.llm_engine import LLMEngine
from tests.controlplane.fleet.one_agent_gateway import check_over_http

pytestmark = pytest.mark.anyio

MESSAGES = [{"role": "user", "content": "What is the capital of France?"}]


def _check(base_url: str, model: str) -> None:
    """The client side (blocking: run in a worker thread while the control plane serves)."""
    with openai.OpenAI(base_url=f"{base_url}/v1", api_key="x", max_retries=0, timeout=120) as client:
        chat = client.chat.completions.create(
            model=model, messages=MESSAGES, max_tokens=3, temperature=0, logprobs=True, top_logprobs=2
        )
        again = client.chat.completions.create(model=model, messages=MESSAGES, max_tokens=1, temperature=0)
        completion = client.completions.create(model=model, prompt="The capital of France is", max_tokens=2, logprobs=1)
    content = chat.choices[0].logprobs.content
    answer = chat.choices[0].message.content
    assert "".join(e.token for e in content) == answer and not any(e.token.startswith("token_id:") for e in content)
    assert bytes(b for e in content for b in e.bytes).decode() == answer
    assert all(
        e.top_logprobs[0].token == e.token and e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob for e in content
    )  # fmt: skip  (greedy: the chosen token is the most likely)
    assert chat.usage.prompt_tokens_details.cached_tokens == 0
    # the chat template's system prompt and the question: every full block but the last token's is a hit
    assert again.usage.prompt_tokens_details.cached_tokens == (chat.usage.prompt_tokens - 1) // 16 * 16 > 0
    logprobs = completion.choices[0].logprobs
    assert "".join(logprobs.tokens) == completion.choices[0].text
    assert logprobs.text_offset == [0, len(logprobs.tokens[0])]

    tokenized = httpx.post(f"{base_url}/tokenize", json={"model": model, "messages": MESSAGES}).json()
    assert tokenized["count"] == chat.usage.prompt_tokens and tokenized["max_model_len"] > 0
    prompt = httpx.post(f"{base_url}/detokenize", json={"model": model, "tokens": tokenized["tokens"]}).json()
    assert prompt["prompt"].startswith("<|im_start|>system") and MESSAGES[0]["content"] in prompt["prompt"]
    strs = httpx.post(f"{base_url}/tokenize", json={"prompt": "Paris, café", "return_token_strs": True}).json()
    assert "".join(strs["token_strs"]) == "Paris, café"


async def test_logprobs_cached_tokens_and_tokenize_with_the_real_tokenizer(controlplane, smollm2_checkpoint):
    tokenizer = smollm2_checkpoint.tokenizer
    (paris,) = tokenizer.encode(" Paris")
    runner = TrivialRunner(token_id=paris)
    engine = LLMEngine(
        runner,
        tokenizer,
        SchedulerConfig(max_num_batched_tokens=2048, max_num_seqs=8, max_model_len=runner.max_model_len),
        CacheConfig(block_size=16, num_device_blocks=256, num_host_blocks=0),
    )
    await check_over_http(controlplane, tokenizer, engine, _check)
