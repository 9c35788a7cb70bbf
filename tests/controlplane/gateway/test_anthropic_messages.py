"""Anthropic's Messages API (``POST /v1/messages``, gateway/anthropic_messages.py): the official ``anthropic`` package
against the gateway on loopback, over a scripted frontend: text whole and streamed, stop reasons, tools (forced,
``any``, ``auto``, streamed), a conversation with tool_use and tool_result blocks, errors in Anthropic's shape, and
the key in ``x-api-key``."""

from __future__ import annotations

from collections.abc import Iterator

import anthropic
import httpx
import msgspec
import pytest

from controlplane.gateway import create_app
from controlplane.gateway.api_keys import ApiKeyConfig
from transport.chat_wire import ChatMessage, ChatTemplateOptions, ToolCall

MODEL = "smol"
WEATHER = {
    "name": "get_weather",
    "description": "The weather now in a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
ASK = [{"role": "user", "content": "Weather in Paris?"}]


@pytest.fixture
def client(served: str) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=served, api_key="x", max_retries=0, timeout=30) as c:
        yield c


def test_a_message_whole_and_what_reaches_the_frontend(client, frontend):
    sampling = {"temperature": 0.2, "top_k": 5}  # (this SDK version sends them only as extra fields)
    reply = client.messages.create(
        model=MODEL, max_tokens=7, system="Be brief.", messages=ASK, stop_sequences=["END"], extra_body=sampling
    )
    assert reply.id.startswith("msg_") and reply.role == "assistant" and reply.model == MODEL
    assert reply._request_id == reply.id  # Anthropic's request-id header, which the SDK reads
    assert [(b.type, b.text) for b in reply.content] == [("text", "Hello, world")]
    assert (reply.stop_reason, reply.stop_sequence) == ("end_turn", None)
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (5, 3)
    (call,) = frontend.calls
    assert call["messages"] == [ChatMessage("system", "Be brief."), ChatMessage("user", "Weather in Paris?")]
    sampling = call["sampling"]
    assert (sampling.max_tokens, sampling.temperature, sampling.top_k, sampling.stop) == (7, 0.2, 5, ("END",))


def test_stop_reasons(client, frontend, script):
    chunks = script("a", "b")
    frontend.chunks = [*chunks[:-1], msgspec.structs.replace(chunks[-1], stop_reason="END")]
    reply = client.messages.create(model=MODEL, max_tokens=9, messages=ASK, stop_sequences=["END"])
    assert (reply.stop_reason, reply.stop_sequence) == ("stop_sequence", "END")
    frontend.chunks = script("a", "b", finish_reason="length")
    assert client.messages.create(model=MODEL, max_tokens=2, messages=ASK).stop_reason == "max_tokens"


def test_a_streamed_message(client, frontend):
    with client.messages.stream(model=MODEL, max_tokens=7, messages=ASK) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "Hello, world" and final.stop_reason == "end_turn"
    assert final.usage.output_tokens == 3 and final.usage.input_tokens == 5


def test_a_forced_tool_comes_back_as_a_tool_use_block(client, frontend, script):
    frontend.chunks = script('{"city": ', '"Paris"}')
    reply = client.messages.create(
        model=MODEL, max_tokens=20, messages=ASK, tools=[WEATHER], tool_choice={"type": "tool", "name": "get_weather"}
    )
    (block,) = reply.content
    assert (block.type, block.name, block.input) == ("tool_use", "get_weather", {"city": "Paris"})
    assert block.id.startswith("toolu_") and reply.stop_reason == "tool_use"
    call = frontend.calls[0]
    assert call["tools"][0].name == "get_weather" and call["sampling"].structured_outputs is not None


def test_any_tool_and_auto(client, frontend, script):
    frontend.chunks = script('[{"name": "get_weather", "parameters": {"city": "Rome"}}]')
    reply = client.messages.create(
        model=MODEL, max_tokens=40, messages=ASK, tools=[WEATHER], tool_choice={"type": "any"}
    )
    assert [(b.type, b.input) for b in reply.content] == [("tool_use", {"city": "Rome"})]
    frontend.chunks = script(
        'Looking. <tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'
    )
    reply = client.messages.create(model=MODEL, max_tokens=40, messages=ASK, tools=[WEATHER])
    assert [b.type for b in reply.content] == ["text", "tool_use"] and reply.content[1].input == {"city": "Oslo"}
    assert reply.stop_reason == "tool_use" and frontend.calls[-1]["sampling"].structured_outputs is None


def test_a_streamed_tool_use(client, frontend, script):
    frontend.chunks = script('{"city"', ': "Pa', 'ris"}')
    with client.messages.stream(
        model=MODEL, max_tokens=20, messages=ASK, tools=[WEATHER], tool_choice={"type": "tool", "name": "get_weather"}
    ) as stream:
        final = stream.get_final_message()
    (block,) = final.content
    assert (block.type, block.input) == ("tool_use", {"city": "Paris"}) and final.stop_reason == "tool_use"


def test_a_conversation_with_tool_use_and_tool_result_blocks(client, frontend):
    use = {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}
    result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "18 C"}
    messages = [
        *ASK,
        {"role": "assistant", "content": [use]},
        {"role": "user", "content": [result, {"type": "text", "text": "Thanks"}]},
    ]
    client.messages.create(model=MODEL, max_tokens=5, messages=messages, tools=[WEATHER])
    assert frontend.calls[0]["messages"] == [
        ChatMessage("user", "Weather in Paris?"),
        ChatMessage("assistant", "", tool_calls=(ToolCall("toolu_1", "get_weather", '{"city":"Paris"}'),)),
        ChatMessage("tool", "18 C", tool_call_id="toolu_1"),
        ChatMessage("user", "Thanks"),
    ]


def _body(**fields) -> dict:
    return {"model": MODEL, "max_tokens": 5, "messages": ASK, **fields}


BAD = "invalid_request_error"


@pytest.mark.parametrize(
    ("body", "status", "kind"),
    [
        ({"model": MODEL, "messages": ASK}, 400, BAD),  # max_tokens is required
        (_body(max_tokens=0), 400, BAD),
        (_body(messages=[]), 400, BAD),
        (_body(messages=[{"role": "system", "content": "x"}]), 400, BAD),
        (_body(messages=[{"role": "user", "content": [{"type": "image", "source": {}}]}]), 400, BAD),
        (_body(tool_choice={"type": "any"}), 400, BAD),  # no tools
        (_body(tools=[WEATHER], tool_choice={"type": "tool", "name": "x"}), 400, BAD),
        (_body(tools=[{**WEATHER, "name": "bad name"}]), 400, BAD),
        (_body(system=[{"type": "image"}]), 400, BAD),
        (_body(model="claude-9"), 404, "not_found_error"),
    ],
)
def test_errors_are_in_anthropics_shape(served, frontend, body, status, kind):
    r = httpx.post(f"{served}/v1/messages", json=body, timeout=30)
    assert r.status_code == status, r.text
    error = r.json()
    assert error["type"] == "error" and error["error"]["type"] == kind and error["error"]["message"]
    assert (
        httpx.post(f"{served}/v1/messages", json={"model": MODEL, "max_tokens": 3, "messages": ASK}).status_code == 200
    )


def test_the_sdk_raises_on_a_refusal(client):
    with pytest.raises(anthropic.BadRequestError):
        client.messages.create(model=MODEL, max_tokens=5, messages=ASK, extra_body={"top_p": 2.0})
    with pytest.raises(anthropic.NotFoundError):
        client.messages.create(model="claude-9", max_tokens=5, messages=ASK)


@pytest.mark.anyio
async def test_the_key_may_come_in_x_api_key(frontend):
    app = create_app(frontend, api_keys=ApiKeyConfig(frozenset({"sk-zoo"})))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gateway") as c:
        body = {"model": MODEL, "max_tokens": 3, "messages": ASK}
        assert (await c.post("/v1/messages", json=body, headers={"x-api-key": "sk-zoo"})).status_code == 200
        assert (await c.post("/v1/messages", json=body, headers={"x-api-key": "wrong"})).status_code == 401
        assert (await c.post("/v1/messages", json=body)).status_code == 401


def test_count_tokens_counts_the_prompt_a_message_request_renders(served, client):
    counted = client.messages.count_tokens(model=MODEL, system="Be brief.", messages=ASK, tools=[WEATHER])
    openai_tool = {"type": "function", "function": {"name": WEATHER["name"], "description": WEATHER["description"],
                                                    "parameters": WEATHER["input_schema"]}}  # fmt: skip
    chat = [{"role": "system", "content": "Be brief."}, *ASK]
    tokenized = httpx.post(f"{served}/tokenize", json={"messages": chat, "tools": [openai_tool]}, timeout=30).json()
    assert counted.input_tokens == tokenized["count"] > 0
    without_tools = client.messages.count_tokens(model=MODEL, system="Be brief.", messages=ASK)
    none_chosen = client.messages.count_tokens(
        model=MODEL, system="Be brief.", messages=ASK, tools=[WEATHER], tool_choice={"type": "none"}
    )
    assert without_tools.input_tokens == none_chosen.input_tokens < counted.input_tokens  # "none" shows no tools
    with pytest.raises(anthropic.BadRequestError):
        client.messages.count_tokens(model=MODEL, messages=[])
    with pytest.raises(anthropic.NotFoundError):
        client.messages.count_tokens(model="claude-9", messages=ASK)


def test_a_final_assistant_message_is_a_prefill_the_model_continues(served, client, frontend):
    prefilled = [*ASK, {"role": "assistant", "content": "It is"}]
    reply = client.messages.create(model=MODEL, max_tokens=7, messages=prefilled)
    assert [b.text for b in reply.content] == ["Hello, world"]  # only what follows the prefill, as Anthropic's
    (call,) = frontend.calls
    assert call["messages"][-1] == ChatMessage("assistant", "It is")
    assert call["chat"] == ChatTemplateOptions(add_generation_prompt=False, continue_final_message=True)
    counted = client.messages.count_tokens(model=MODEL, messages=prefilled)
    body = {"messages": prefilled, "continue_final_message": True, "add_generation_prompt": False}
    assert counted.input_tokens == httpx.post(f"{served}/tokenize", json=body, timeout=30).json()["count"]
    assert counted.input_tokens < client.messages.count_tokens(model=MODEL, messages=[*prefilled, *ASK]).input_tokens


def test_a_prefill_ending_in_whitespace_is_refused_as_anthropic_refuses_it(client, frontend):
    with pytest.raises(anthropic.BadRequestError, match="trailing whitespace"):
        client.messages.create(model=MODEL, max_tokens=7, messages=[*ASK, {"role": "assistant", "content": "It is "}])
    assert not frontend.calls
    client.messages.create(model=MODEL, max_tokens=7, messages=[*ASK, {"role": "assistant", "content": ""}])
    assert frontend.calls[0]["messages"][-1] == ChatMessage("assistant", "")  # rendered as a new reply (chat_render)
    assert frontend.calls[0]["chat"] == ChatTemplateOptions(add_generation_prompt=False, continue_final_message=True)
