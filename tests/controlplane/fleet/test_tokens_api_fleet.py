"""vLLM's tokens-in, tokens-out API (``POST /inference/v1/generate``) with the real model behind a real agent: an RL
rollout's round trip. The ids it answers are the ones a completion of the same token prompt samples, their
logprobs the same, and they detokenize to that completion's text: nothing re-tokenized on the way. A chat rendered
(``/v1/chat/completions/render``) has the prompt ids the chat itself runs with, and generates its tokens."""

from __future__ import annotations

import httpx
import pytest

from tests.controlplane.fleet.one_agent_gateway import check_over_http, smollm2_engine

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


def _check(base_url: str, model: str) -> None:
    with httpx.Client(base_url=base_url, timeout=120) as http:
        prompt = http.post("/tokenize", json={"prompt": "The capital of France is"}).json()["tokens"]
        sampling = {"temperature": 0, "max_tokens": 6, "logprobs": 1, "ignore_eos": True}
        tokens = http.post("/inference/v1/generate", json={"token_ids": prompt, "sampling_params": sampling}).json()
        completion = http.post("/v1/completions", json={
            "model": model, "prompt": prompt, "return_token_ids": True, **sampling,
        }).json()  # fmt: skip
    (choice,) = tokens["choices"]
    assert choice["token_ids"] == completion["choices"][0]["token_ids"] and len(choice["token_ids"]) == 6
    logprobs = [entry["logprob"] for entry in choice["logprobs"]["content"]]
    assert logprobs == pytest.approx(completion["choices"][0]["logprobs"]["token_logprobs"], abs=1e-4)
    assert [entry["token"] for entry in choice["logprobs"]["content"]] == [f"token_id:{t}" for t in choice["token_ids"]]
    with httpx.Client(base_url=base_url, timeout=60) as http:
        text = http.post("/detokenize", json={"tokens": choice["token_ids"]}).json()["prompt"]
    assert text == completion["choices"][0]["text"]
    assert tokens["usage"]["prompt_tokens"] == len(prompt)
    chat = {"model": model, "messages": [{"role": "user", "content": "Name a colour."}], "temperature": 0,
            "max_tokens": 5, "return_token_ids": True}  # fmt: skip
    with httpx.Client(base_url=base_url, timeout=120) as http:
        rendered = http.post("/v1/chat/completions/render", json=chat).json()  # the template applied once, here
        generated = http.post("/inference/v1/generate", json=rendered).json()
        answered = http.post("/v1/chat/completions", json=chat).json()
    assert rendered["token_ids"] == answered["prompt_token_ids"]  # the intake's own rendering
    assert generated["choices"][0]["token_ids"] == answered["choices"][0]["token_ids"]


async def test_a_rollouts_tokens_are_the_completions_tokens(controlplane, smollm2_model, smollm2_checkpoint):
    engine = smollm2_engine(smollm2_model, smollm2_checkpoint.tokenizer)
    await check_over_http(controlplane, smollm2_checkpoint.tokenizer, engine, _check)
