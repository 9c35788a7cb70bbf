"""Structured outputs through the whole path with the real model: the official ``openai`` package → the gateway →
the control plane's intake → a real agent (SmolLM2 on the torch runner, llguidance compiling for its tokenizer) →
back. The answer follows its JSON schema or is one of its choices; a schema that does not compile is a 400 naming
the field before anything is routed."""

from __future__ import annotations

import json

import anthropic
import openai
import pytest

from backends.grammar import LLGuidanceCompiler
from tests.controlplane.fleet.one_agent_gateway import check_over_http, smollm2_engine
from zoo.demo import WEATHER_TOOL as WEATHER  # the tool make demo calls

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

SCHEMA = {
    "type": "object",
    "properties": {"capital": {"enum": ["Paris", "London", "Rome"]}, "country": {"type": "string", "maxLength": 12}},
    "required": ["capital", "country"],
    "additionalProperties": False,
}


def _check(base_url: str, model: str) -> None:
    """The client side (blocking: run in a worker thread while the control plane serves)."""
    question = [{"role": "user", "content": "What is the capital of France? Answer in JSON."}]
    with openai.OpenAI(base_url=f"{base_url}/v1", api_key="x", max_retries=0, timeout=120) as client:
        chat = client.chat.completions.create(
            model=model,
            messages=question,
            max_tokens=40,
            temperature=0,
            response_format={"type": "json_schema", "json_schema": {"name": "capital", "schema": SCHEMA}},
        )
        answer = json.loads(chat.choices[0].message.content)
        assert set(answer) == {"capital", "country"} and answer["capital"] in SCHEMA["properties"]["capital"]["enum"]
        assert chat.choices[0].finish_reason == "stop"
        stream = client.completions.create(
            model=model,
            prompt="Is the sky blue? Answer:",
            max_tokens=8,
            temperature=1.0,
            stream=True,
            extra_body={"guided_choice": [" yes", " no"]},
        )
        assert "".join(chunk.choices[0].text for chunk in stream) in (" yes", " no")
        with pytest.raises(openai.BadRequestError) as refused:
            client.chat.completions.create(model=model, messages=question, extra_body={"guided_regex": "[a-"})
        assert refused.value.body["param"] == "guided_regex"
        _check_tool_calls(client, model)


CLOCK = {"type": "function", "function": {"name": "get_time", "description": "The time now"}}


def _check_tool_calls(client: openai.OpenAI, model: str) -> None:
    """A named function and "required" come back as calls whose arguments follow the schema (the model sees the tools
    in its prompt in the Hermes format: SmolLM2's template has none); "auto" answers whatever the model chose."""
    question = [{"role": "user", "content": "What is the weather in Paris?"}]
    named = {"type": "function", "function": {"name": "get_weather"}}
    chat = client.chat.completions.create(
        model=model, messages=question, tools=[WEATHER, CLOCK], tool_choice=named, max_tokens=24, temperature=0
    )
    (call,) = chat.choices[0].message.tool_calls
    assert call.function.name == "get_weather" and set(json.loads(call.function.arguments)) == {"city"}
    chat = client.chat.completions.create(
        model=model, messages=question, tools=[WEATHER, CLOCK], tool_choice="required", max_tokens=40, temperature=0
    )
    assert chat.choices[0].finish_reason == "tool_calls"
    for call in chat.choices[0].message.tool_calls:
        assert call.function.name in ("get_weather", "get_time") and isinstance(
            json.loads(call.function.arguments), dict
        )
    reply = [*question, chat.choices[0].message.model_dump(exclude_none=True)]
    reply += [
        {"role": "tool", "tool_call_id": c.id, "content": "18 C, sunny"} for c in chat.choices[0].message.tool_calls
    ]
    chat = client.chat.completions.create(
        model=model, messages=reply, tools=[WEATHER, CLOCK], max_tokens=8, temperature=0
    )
    assert chat.choices[0].finish_reason in ("stop", "length", "tool_calls")  # the conversation goes on
    base_url = str(client.base_url).removesuffix("/").removesuffix("/v1")
    with anthropic.Anthropic(base_url=base_url, api_key="x", max_retries=0, timeout=120) as claude:  # /v1/messages
        function = WEATHER["function"]
        tool = {
            "name": function["name"],
            "description": function["description"],
            "input_schema": function["parameters"],
        }
        message = claude.messages.create(
            model=model,
            max_tokens=24,
            messages=question,
            tools=[tool],
            tool_choice={"type": "tool", "name": "get_weather"},
        )
        (block,) = message.content
        assert block.type == "tool_use" and set(block.input) == {"city"} and message.stop_reason == "tool_use"
    _check_responses(client, model)


def _check_responses(client: openai.OpenAI, model: str) -> None:
    """OpenAI's Responses API: a forced call, then its result given back through ``previous_response_id`` (the
    gateway's stored conversation); the model answers in text."""
    function = WEATHER["function"]
    tool = {"type": "function", "name": "get_weather", "description": function["description"],
            "parameters": function["parameters"]}  # fmt: skip
    first = client.responses.create(
        model=model,
        input="What is the weather in Paris?",
        tools=[tool],
        tool_choice={"type": "function", "name": "get_weather"},
        max_output_tokens=24,
        temperature=0,
    )
    (call,) = first.output
    assert call.type == "function_call" and set(json.loads(call.arguments)) == {"city"}
    result = [{"type": "function_call_output", "call_id": call.call_id, "output": "18 C and sunny"}]
    answer = client.responses.create(
        model=model, previous_response_id=first.id, input=result, max_output_tokens=12, temperature=0
    )
    alone = client.responses.create(model=model, input=result, max_output_tokens=1, store=False)
    # the question and the call came before the result: the prompt is more than the result's alone
    assert answer.output_text and answer.usage.input_tokens > alone.usage.input_tokens + 10


async def test_structured_outputs_through_the_fleet(controlplane, smollm2_model, smollm2_checkpoint):
    tokenizer = smollm2_checkpoint.tokenizer
    grammars = LLGuidanceCompiler(tokenizer, smollm2_checkpoint.config.vocab_size)
    engine = smollm2_engine(smollm2_model, tokenizer, grammars=grammars)
    await check_over_http(controlplane, tokenizer, engine, _check)
    stats = engine.structured_stats  # the JSON keys and the choices' forced tokens went in as drafts, and were taken
    # the regex that does not compile never reached the node; four forced tool calls did (one through /v1/messages,
    # one through /v1/responses), the "auto" one and the Responses API's others are free
    assert stats.num_requests_total == 3 - 1 + 4
    assert stats.num_forced_accepted_tokens_total == stats.num_forced_draft_tokens_total > 0
