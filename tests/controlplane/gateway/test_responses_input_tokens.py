"""OpenAI's ``POST /v1/responses/input_tokens`` (gateway/responses_routes.py), with the official ``openai`` package's
``client.responses.input_tokens.count`` against the gateway on loopback: the count is the prompt a response of the
same body renders (instructions, tools, a previous response's or a conversation's items, ``truncation: auto``), it
runs, stores and adds nothing, and bad bodies are 400s naming their field."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import openai
import pytest

from controlplane.gateway import create_app

MODEL = "smol"
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather now in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


@pytest.fixture
def client(served: str) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{served}/v1", api_key="x", max_retries=0, timeout=30) as c:
        yield c


def _tokenized(served: str, messages: list[dict], tools: list[dict] | None = None) -> int:
    body = {"messages": messages, **({"tools": tools} if tools else {})}
    return httpx.post(f"{served}/tokenize", json=body, timeout=30).json()["count"]


def _chat_tool(tool: dict) -> dict:
    return {"type": "function", "function": {k: tool[k] for k in ("name", "description", "parameters")}}


def test_the_count_is_the_prompt_a_response_renders_and_nothing_runs(client, frontend, served):
    counted = client.responses.input_tokens.count(model=MODEL, input="Hi?", instructions="Be brief.", tools=[WEATHER])
    assert counted.object == "response.input_tokens"
    chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi?"}]
    assert counted.input_tokens == _tokenized(served, chat, [_chat_tool(WEATHER)]) > 0
    plain = client.responses.input_tokens.count(model=MODEL, input="Hi?", instructions="Be brief.")
    none_chosen = client.responses.input_tokens.count(
        model=MODEL, input="Hi?", instructions="Be brief.", tools=[WEATHER], tool_choice="none"
    )
    assert plain.input_tokens == none_chosen.input_tokens == _tokenized(served, chat) < counted.input_tokens
    assert client.responses.input_tokens.count(input="Hi?").input_tokens > 0  # model left out: the fleet's own
    assert frontend.calls == []  # nothing generated


def test_a_previous_response_and_a_conversation_count_their_items(client, frontend, served):
    first = client.responses.create(model=MODEL, input="I am Ada.")
    assert len(frontend.calls) == 1
    said = [
        {"role": "user", "content": "I am Ada."},
        {"role": "assistant", "content": "Hello, world"},
        {"role": "user", "content": "Who am I?"},
    ]
    went_on = client.responses.input_tokens.count(model=MODEL, previous_response_id=first.id, input="Who am I?")
    assert went_on.input_tokens == _tokenized(served, said)
    conversation = client.conversations.create(items=said[:2])
    counted = client.responses.input_tokens.count(model=MODEL, conversation=conversation.id, input="Who am I?")
    assert counted.input_tokens == went_on.input_tokens
    assert len(client.conversations.items.list(conversation.id).data) == 2  # nothing added to it
    assert len(frontend.calls) == 1  # and nothing generated
    with pytest.raises(openai.BadRequestError, match="previous_response_id"):
        client.responses.input_tokens.count(model=MODEL, previous_response_id="resp_nope", input="?")
    with pytest.raises(openai.BadRequestError, match="conversation"):
        client.responses.input_tokens.count(model=MODEL, conversation="conv_nope", input="?")


def test_truncation_auto_counts_what_the_prompt_keeps(client, frontend):
    long_input = "word " * 100
    whole = client.responses.input_tokens.count(model=MODEL, input=long_input).input_tokens
    frontend.model_max_len = lambda model: 100  # the longest context a node serving it takes
    # the SDK's count takes no max_output_tokens; the body's (a response's field) is read as a response reads it
    more = {"max_output_tokens": 30}
    kept = client.responses.input_tokens.count(model=MODEL, input=long_input, truncation="auto", extra_body=more)
    assert whole > 70 and kept.input_tokens == 70
    assert client.responses.input_tokens.count(model=MODEL, input=long_input).input_tokens == whole  # "disabled"


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        ({"model": MODEL}, 400, "input"),
        ({"model": MODEL, "input": []}, 400, "input"),
        ({"model": MODEL, "input": "?", "truncation": "sometimes"}, 400, "truncation"),
        ({"model": MODEL, "input": 5}, 400, "input"),
        ({"model": "gpt-9", "input": "?"}, 404, "model"),
    ],
)
def test_bad_bodies_are_errors_naming_their_field(served, body, status, param):
    r = httpx.post(f"{served}/v1/responses/input_tokens", json=body, timeout=30)
    assert r.status_code == status and r.json()["error"]["param"] == param


@pytest.mark.anyio
async def test_without_a_tokenizer_it_is_a_501(make_frontend):
    app = create_app(make_frontend(tokenizer=None))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gateway") as c:
        r = await c.post("/v1/responses/input_tokens", json={"model": MODEL, "input": "?"})
    assert r.status_code == 501 and r.json()["error"]["code"] == "not_implemented"
