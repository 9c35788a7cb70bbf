"""lm-evaluation-harness's loglikelihood request through the whole path with the real model: the official ``openai``
package → the gateway → the intake → a real agent (SmolLM2 on the torch runner) → back. ``echo`` with ``logprobs``
and one token to generate returns every prompt token's log-probability; the continuation a model should prefer
scores higher; a batch of prompts (lm-eval with batch_size > 1) scores each as alone; vLLM's ``prompt_logprobs`` on
the chat endpoint."""

from __future__ import annotations

import math

import httpx
import openai
import pytest

from tests.controlplane.fleet.one_agent_gateway import check_over_http, smollm2_engine

pytestmark = [pytest.mark.anyio, pytest.mark.slow]
CONTEXT = "The capital of France is"


def _loglikelihood(client: openai.OpenAI, base_url: str, model: str, continuation: str) -> tuple[float, bool, int]:
    """As lm-eval's ``local-completions`` asks it: (the continuation's summed logprob, whether it is the greedy
    one, the prompt's token count)."""
    completion = client.completions.create(
        model=model, prompt=CONTEXT + continuation, max_tokens=1, logprobs=1, echo=True, temperature=0, seed=1234
    )
    lp = completion.choices[0].logprobs
    assert completion.choices[0].text.startswith(CONTEXT + continuation)
    num_prompt = completion.usage.prompt_tokens
    assert len(lp.tokens) == len(lp.token_logprobs) == num_prompt + 1 and lp.token_logprobs[0] is None
    assert "".join(lp.tokens[:num_prompt]) == CONTEXT + continuation
    context_len = httpx.post(f"{base_url}/tokenize", json={"prompt": CONTEXT}, timeout=30).json()["count"]
    scores = lp.token_logprobs[context_len:num_prompt]
    greedy = all(
        max(top.values()) <= lp.token_logprobs[context_len + i] + 1e-6
        for i, top in enumerate(lp.top_logprobs[context_len:num_prompt])
    )
    return sum(scores), greedy, num_prompt


def _check(base_url: str, model: str) -> None:
    with openai.OpenAI(base_url=f"{base_url}/v1", api_key="x", max_retries=0, timeout=120) as client:
        paris, paris_greedy, _ = _loglikelihood(client, base_url, model, " Paris.")
        banana, banana_greedy, _ = _loglikelihood(client, base_url, model, " banana.")
        assert math.isfinite(paris) and math.isfinite(banana) and paris > banana + 2  # Paris is far likelier
        assert paris_greedy and not banana_greedy
        batch = client.completions.create(
            model=model, prompt=[CONTEXT + " Paris.", CONTEXT + " banana."], max_tokens=1, logprobs=1, echo=True
        )
        assert [c.index for c in batch.choices] == [0, 1]
        first, second = (c.logprobs.token_logprobs for c in batch.choices)
        alone = client.completions.create(model=model, prompt=CONTEXT + " banana.", max_tokens=1, logprobs=1, echo=True)
        prompt_len = len(alone.choices[0].logprobs.tokens) - 1
        assert second[1:prompt_len] == pytest.approx(alone.choices[0].logprobs.token_logprobs[1:prompt_len], abs=1e-3)
        assert batch.choices[1].text.startswith(CONTEXT + " banana.") and first[0] is None
        chat = client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "Hi"}], max_tokens=1, extra_body={"prompt_logprobs": 0}
        )
        scores = chat.model_extra["prompt_logprobs"]
        assert scores[0] is None and len(scores) == chat.usage.prompt_tokens
        assert all(len(s) == 1 and next(iter(s.values()))["logprob"] <= 0 for s in scores[1:])


async def test_loglikelihood_through_the_fleet(controlplane, smollm2_model, smollm2_checkpoint):
    engine = smollm2_engine(smollm2_model, smollm2_checkpoint.tokenizer)
    await check_over_http(controlplane, smollm2_checkpoint.tokenizer, engine, _check)
