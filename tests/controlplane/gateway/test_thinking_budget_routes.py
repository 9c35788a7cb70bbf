"""A thinking budget through the gateway (engine/thinking_budget.py): vLLM's ``thinking_token_budget`` on chat and
completions reaches the engine's SamplingParams when the gateway has a reasoning parser and is a 400 naming it when
not; Anthropic's ``thinking.budget_tokens`` becomes it under Anthropic's bounds. Read with the openai and anthropic
SDKs over real HTTP."""

from __future__ import annotations

import anthropic
import openai
import pytest

from controlplane.gateway import create_app
from controlplane.gateway.gateway_config import GatewayConfig

MODEL = "smol"
QUESTION = [{"role": "user", "content": "2+2?"}]


def _app(frontend, parser: str | None = "deepseek_r1"):
    return create_app(frontend, config=GatewayConfig(reasoning_parser=parser))


def _sdk(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0)


def test_chat_and_completions_pass_the_budget_to_the_engine(make_frontend, script, serve):
    frontend = make_frontend(chunks=script("4"))
    with serve(_app(frontend)) as url:
        sdk = _sdk(url)
        sdk.chat.completions.create(model=MODEL, messages=QUESTION, extra_body={"thinking_token_budget": 64})
        assert frontend.calls[-1]["sampling"].thinking_token_budget == 64
        sdk.completions.create(model=MODEL, prompt="<think>", extra_body={"thinking_token_budget": 0})
        assert frontend.calls[-1]["sampling"].thinking_token_budget == 0
        sdk.chat.completions.create(model=MODEL, messages=QUESTION)
        assert frontend.calls[-1]["sampling"].thinking_token_budget is None
        num_calls = len(frontend.calls)
        for bad in (-1, 2**31, "many"):
            with pytest.raises(openai.BadRequestError) as refused:
                sdk.chat.completions.create(model=MODEL, messages=QUESTION, extra_body={"thinking_token_budget": bad})
            assert refused.value.body["param"] == "thinking_token_budget"
        schema = {"type": "json_schema", "json_schema": {"name": "a", "schema": {"type": "object"}}}
        with pytest.raises(openai.BadRequestError) as refused:
            extra = {"thinking_token_budget": 8}
            sdk.chat.completions.create(model=MODEL, messages=QUESTION, response_format=schema, extra_body=extra)
        assert refused.value.body["param"] == "thinking_token_budget"
        assert "structured outputs" in refused.value.body["message"]
        assert len(frontend.calls) == num_calls  # nothing refused reached the engine


def test_without_a_reasoning_parser_a_budget_is_refused_naming_it(make_frontend, script, serve):
    frontend = make_frontend(chunks=script("4"))
    with serve(_app(frontend, parser=None)) as url:
        sdk = _sdk(url)
        for route in ("chat", "completions"):
            with pytest.raises(openai.BadRequestError) as refused:
                extra = {"thinking_token_budget": 64}
                if route == "chat":
                    sdk.chat.completions.create(model=MODEL, messages=QUESTION, extra_body=extra)
                else:
                    sdk.completions.create(model=MODEL, prompt="x", extra_body=extra)
            assert refused.value.body["param"] == "thinking_token_budget"
            assert "--reasoning-parser" in refused.value.body["message"]
        assert not frontend.calls


@pytest.mark.parametrize("parser", ["qwen3", None])
def test_anthropics_budget_tokens_under_anthropics_bounds(make_frontend, script, serve, parser):
    frontend = make_frontend(chunks=script("4"))
    with serve(_app(frontend, parser=parser)) as url, anthropic.Anthropic(base_url=url, api_key="x") as sdk:
        ask = {"model": MODEL, "max_tokens": 4096, "messages": QUESTION}
        sdk.messages.create(**ask, thinking={"type": "enabled", "budget_tokens": 2048})
        # enforced where the gateway splits the thinking; without a parser taken and not enforced, as before
        assert frontend.calls[-1]["sampling"].thinking_token_budget == (2048 if parser else None)
        sdk.messages.create(**ask, thinking={"type": "adaptive"})
        assert frontend.calls[-1]["sampling"].thinking_token_budget is None
        num_calls = len(frontend.calls)
        for thinking, extra, param in (
            ({"type": "enabled", "budget_tokens": 1000}, {}, "thinking.budget_tokens"),  # Anthropic's least: 1024
            ({"type": "enabled", "budget_tokens": 4096}, {}, "max_tokens"),  # max_tokens must be above it
            ({"type": "enabled", "budget_tokens": 2048}, {"tool_choice": {"type": "any"}}, "tool_choice"),
        ):
            if extra:
                extra["tools"] = [{"name": "add", "input_schema": {"type": "object"}}]
            with pytest.raises(anthropic.BadRequestError) as refused:
                sdk.messages.create(**ask, thinking=thinking, **extra)
            assert param in refused.value.message
        assert len(frontend.calls) == num_calls
