"""Tool calling on /v1/chat/completions (gateway/tool_calls.py): what reaches the frontend for each tool_choice, the
reply's tool_calls from the model's text (whole and streamed), and every refusal naming its field."""

from __future__ import annotations

import json

import httpx
import msgspec
import openai
import pytest

from controlplane.gateway import GatewayConfig, create_app
from controlplane.gateway.tool_calls import ToolPlan, ToolStream
from transport.chat_wire import ChatMessage, ToolCall, ToolSpec

MODEL = "smol"
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather now in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
TIME = {"type": "function", "function": {"name": "get_time"}}  # no parameters
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": [WEATHER, TIME]}
NAMED = {"type": "function", "function": {"name": "get_weather"}}
pytestmark = pytest.mark.anyio
HERMES_CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


def _events(response: httpx.Response) -> list[dict]:
    lines = [line.removeprefix("data: ") for line in response.text.splitlines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    return [json.loads(line) for line in lines[:-1]]


def _deltas(events: list[dict]) -> tuple[str, list[dict], str]:
    """(the streamed content, the tool-call deltas, the finish reason)."""
    content, calls, finish = "", [], None
    for event in events:
        (choice,) = event["choices"]
        content += choice["delta"].get("content") or ""
        calls += choice["delta"].get("tool_calls") or []
        finish = choice["finish_reason"] or finish
    return content, calls, finish


async def test_named_tool_choice_forces_the_function_parameters_schema(client, frontend, make_frontend, script):
    frontend.chunks = script('{"city": ', '"Paris"}')
    r = await client.post("/v1/chat/completions", json={**CHAT, "tool_choice": NAMED})
    assert r.status_code == 200, r.text
    call = frontend.calls[0]
    assert json.loads(call["sampling"].structured_outputs.json) == WEATHER["function"]["parameters"]
    assert [t.name for t in call["tools"]] == ["get_weather", "get_time"]
    assert (
        json.loads(call["tools"][0].parameters) == WEATHER["function"]["parameters"]
        and call["tools"][1].parameters == ""
    )
    (choice,) = r.json()["choices"]
    assert choice["finish_reason"] == "stop"  # OpenAI's answer to a forced function
    message = choice["message"]
    assert message["content"] is None
    (tool_call,) = message["tool_calls"]
    assert tool_call["id"].startswith("call_") and tool_call["type"] == "function"
    assert tool_call["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}


async def test_a_named_function_without_parameters_gets_an_empty_object_schema(client, frontend):
    r = await client.post(
        "/v1/chat/completions", json={**CHAT, "tool_choice": {**NAMED, "function": {"name": "get_time"}}}
    )
    assert r.status_code == 200, r.text
    schema = {"type": "object", "properties": {}, "additionalProperties": False}  # no arguments at all
    assert json.loads(frontend.calls[0]["sampling"].structured_outputs.json) == schema


async def test_required_forces_an_array_of_calls_and_answers_tool_calls(client, frontend, script):
    frontend.chunks = script(
        '[{"name": "get_weather", "parameters": {"city": "Paris"}}, ', '{"name": "get_time", "parameters": {}}]'
    )
    r = await client.post("/v1/chat/completions", json={**CHAT, "tool_choice": "required"})
    assert r.status_code == 200, r.text
    schema = json.loads(frontend.calls[0]["sampling"].structured_outputs.json)
    assert schema["type"] == "array" and schema["minItems"] == 1 and "maxItems" not in schema
    items = schema["items"]["anyOf"]
    assert [i["properties"]["name"]["enum"] for i in items] == [["get_weather"], ["get_time"]]
    assert items[0]["properties"]["parameters"] == WEATHER["function"]["parameters"]
    assert all(i["required"] == ["name", "parameters"] and i["additionalProperties"] is False for i in items)
    (choice,) = r.json()["choices"]
    assert choice["finish_reason"] == "tool_calls"
    calls = [c["function"] for c in choice["message"]["tool_calls"]]
    assert calls == [{"name": "get_weather", "arguments": '{"city": "Paris"}'}, {"name": "get_time", "arguments": "{}"}]
    assert len({c["id"] for c in choice["message"]["tool_calls"]}) == 2


async def test_required_without_parallel_calls_allows_one_item(client, frontend):
    await client.post("/v1/chat/completions", json={**CHAT, "tool_choice": "required", "parallel_tool_calls": False})
    assert json.loads(frontend.calls[0]["sampling"].structured_outputs.json)["maxItems"] == 1


async def test_required_cut_short_by_max_tokens_is_content(client, frontend, script):
    frontend.chunks = script('[{"name": "get_wea', finish_reason="length")
    r = await client.post("/v1/chat/completions", json={**CHAT, "tool_choice": "required"})
    (choice,) = r.json()["choices"]
    assert choice["finish_reason"] == "length" and "tool_calls" not in choice["message"]
    assert choice["message"]["content"] == '[{"name": "get_wea'


async def test_auto_reads_hermes_calls_and_keeps_the_text_before_them(client, frontend, script):
    frontend.chunks = script("Let me look. ", HERMES_CALL)
    r = await client.post("/v1/chat/completions", json=CHAT)  # tool_choice defaults to "auto" with tools
    assert r.status_code == 200, r.text
    assert frontend.calls[0]["sampling"].structured_outputs is None  # "auto" is not constrained
    assert frontend.calls[0]["tools"] is not None
    (choice,) = r.json()["choices"]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] == "Let me look."
    (call,) = choice["message"]["tool_calls"]
    assert call["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}


async def test_auto_without_a_call_is_plain_content(client, frontend, script):
    frontend.chunks = script("It is ", "sunny.")
    r = await client.post("/v1/chat/completions", json={**CHAT, "tool_choice": "auto"})
    (choice,) = r.json()["choices"]
    assert choice["message"] == {"role": "assistant", "content": "It is sunny."}
    assert choice["finish_reason"] == "stop"


async def test_auto_with_a_call_that_does_not_parse_is_content(client, frontend, script):
    frontend.chunks = script("<tool_call>\n{not json}\n</tool_call>")
    r = await client.post("/v1/chat/completions", json=CHAT)
    (choice,) = r.json()["choices"]
    assert choice["message"]["content"] == "<tool_call>\n{not json}\n</tool_call>"
    assert "tool_calls" not in choice["message"] and choice["finish_reason"] == "stop"


async def test_auto_without_parallel_calls_keeps_the_first(client, frontend, script):
    frontend.chunks = script(HERMES_CALL, HERMES_CALL.replace("Paris", "Rome"))
    r = await client.post("/v1/chat/completions", json={**CHAT, "parallel_tool_calls": False})
    (call,) = r.json()["choices"][0]["message"]["tool_calls"]
    assert "Paris" in call["function"]["arguments"]
    r = await client.post("/v1/chat/completions", json=CHAT)
    assert len(r.json()["choices"][0]["message"]["tool_calls"]) == 2


async def test_tool_choice_none_leaves_the_tools_out_and_reads_no_calls(client, frontend, script):
    frontend.chunks = script(HERMES_CALL)
    r = await client.post("/v1/chat/completions", json={**CHAT, "tool_choice": "none"})
    assert frontend.calls[0]["tools"] is None and frontend.calls[0]["sampling"].structured_outputs is None
    assert r.json()["choices"][0]["message"] == {"role": "assistant", "content": HERMES_CALL}


async def test_streamed_auto_sends_content_then_the_calls_and_never_a_partial_tag(client, frontend, script):
    frontend.chunks = script(
        "Sure", ". <tool", '_call>\n{"name": "get_weather", ', '"arguments": {"city": "Paris"}}\n</tool_call>'
    )
    r = await client.post("/v1/chat/completions", json={**CHAT, "stream": True})
    content, calls, finish = _deltas(_events(r))
    assert content == "Sure. " and finish == "tool_calls"
    (call,) = calls
    assert call["index"] == 0 and call["id"].startswith("call_") and call["type"] == "function"
    assert call["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}


async def test_streamed_auto_text_that_only_looked_like_a_tag_is_sent_in_the_end(client, frontend, script):
    frontend.chunks = script("a <to", "y> b <tool")
    content, calls, finish = _deltas(_events(await client.post("/v1/chat/completions", json={**CHAT, "stream": True})))
    assert (content, calls, finish) == ("a <toy> b <tool", [], "stop")


async def test_streamed_named_call_streams_its_arguments(client, frontend, script):
    frontend.chunks = script('{"city"', ': "Par', 'is"}')
    r = await client.post("/v1/chat/completions", json={**CHAT, "stream": True, "tool_choice": NAMED})
    content, calls, finish = _deltas(_events(r))
    assert content == "" and finish == "stop"
    assert calls[0]["id"].startswith("call_") and calls[0]["function"]["name"] == "get_weather"
    assert all(c["index"] == 0 and "id" not in c for c in calls[1:])
    assert "".join(c["function"]["arguments"] for c in calls) == '{"city": "Paris"}'


async def test_streamed_required_sends_the_calls_at_the_end_with_logprobs_on_every_chunk(client, frontend, script):
    chunks = script('[{"name": "get_time", ', '"parameters": {}}]')
    frontend.chunks = [msgspec.structs.replace(c, logprobs=[(c.token_ids[0], -0.5, [])]) for c in chunks]
    body = {**CHAT, "stream": True, "tool_choice": "required", "logprobs": True}
    events = _events(await client.post("/v1/chat/completions", json=body))
    content, calls, finish = _deltas(events)
    assert content == "" and finish == "tool_calls"
    assert [c["function"] for c in calls] == [{"name": "get_time", "arguments": "{}"}]
    with_logprobs = [e for e in events if e["choices"][0]["logprobs"]]
    assert len(with_logprobs) == 2  # one per token, though the first chunk had nothing to send yet


async def test_a_conversation_with_calls_and_results_reaches_the_frontend(client, frontend):
    messages = [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "18 C"},
    ]
    r = await client.post("/v1/chat/completions", json={**CHAT, "messages": messages})
    assert r.status_code == 200, r.text
    assert frontend.calls[0]["messages"] == [
        ChatMessage("user", "Weather in Paris?"),
        ChatMessage("assistant", "", tool_calls=(ToolCall("call_1", "get_weather", '{"city":"Paris"}'),)),
        ChatMessage("tool", "18 C", tool_call_id="call_1"),
    ]


REFUSALS = [
    ({**CHAT, "tools": None, "tool_choice": "auto"}, "tool_choice"),
    ({**CHAT, "tool_choice": "sometimes"}, "tool_choice"),
    ({**CHAT, "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
    ({**CHAT, "tool_choice": {"type": "retrieval", "function": {"name": "get_time"}}}, "tool_choice"),
    ({**CHAT, "tool_choice": 3}, "tool_choice"),
    ({**CHAT, "tool_choice": NAMED, "response_format": {"type": "json_object"}}, "tool_choice"),
    ({**CHAT, "tool_choice": "required", "guided_regex": "a+"}, "tool_choice"),
    ({**CHAT, "tools": [{**WEATHER, "type": "code_interpreter"}]}, "tools[0].type"),
    ({**CHAT, "tools": [{"type": "function", "function": {"name": "bad name!"}}]}, "tools"),
    ({**CHAT, "tools": [TIME, TIME]}, "tools"),
    ({**CHAT, "tools": [{"type": "function", "function": {"name": f"f{i}"}} for i in range(129)]}, "tools"),
    (
        {**CHAT, "tools": [{"type": "function", "function": {"name": "f", "parameters": [1]}}]},
        "tools[0].function.parameters",
    ),
    (
        {
            **CHAT,
            "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "nonsense"}}}],
            "tool_choice": "required",
        },
        "tools",
    ),
    (
        {
            **CHAT,
            "messages": [
                {"role": "user", "content": "x", "tool_calls": []},
                {
                    "role": "user",
                    "content": "y",
                    "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "{}"}}],
                },
            ],
        },
        "messages[1].tool_calls",
    ),
    (
        {
            **CHAT,
            "messages": [
                {
                    "role": "assistant",
                    "tool_calls": [{"id": "c", "type": "x", "function": {"name": "f", "arguments": "{}"}}],
                }
            ],
        },
        "messages[0].tool_calls[0].type",
    ),
]


@pytest.mark.parametrize(("body", "param"), REFUSALS)
async def test_bad_tool_fields_are_a_400_naming_the_field(client, frontend, body, param):
    r = await client.post("/v1/chat/completions", json=body)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param
    assert frontend.calls == []
    assert (await client.post("/v1/chat/completions", json=CHAT)).status_code == 200  # and it serves on


async def test_auto_is_refused_without_a_parser_while_forced_calls_still_work(frontend):
    app = create_app(frontend, config=GatewayConfig(tool_call_parser=None))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gateway") as c:
        r = await c.post("/v1/chat/completions", json=CHAT)
        assert r.status_code == 400 and r.json()["error"]["param"] == "tool_choice"
        assert (await c.post("/v1/chat/completions", json={**CHAT, "tool_choice": NAMED})).status_code == 200
    with pytest.raises(ValueError, match="tool_call_parser"):
        GatewayConfig(tool_call_parser="granite")  # a parser this gateway does not have


def test_the_openai_sdk_gets_tool_calls_whole_and_streamed(served, frontend, script):
    frontend.chunks = script("On it. ", HERMES_CALL)
    with openai.OpenAI(base_url=f"{served}/v1", api_key="x", max_retries=0, timeout=30) as client:
        completion = client.chat.completions.create(model=MODEL, messages=CHAT["messages"], tools=[WEATHER, TIME])
        (choice,) = completion.choices
        assert choice.finish_reason == "tool_calls" and choice.message.content == "On it."
        (call,) = choice.message.tool_calls
        assert (call.function.name, json.loads(call.function.arguments)) == ("get_weather", {"city": "Paris"})
        stream = client.chat.completions.create(model=MODEL, messages=CHAT["messages"], tools=[WEATHER], stream=True)
        deltas = [c.choices[0].delta for c in stream if c.choices]
        assert "".join(d.content or "" for d in deltas) == "On it. "
        (streamed,) = [t for d in deltas for t in d.tool_calls or ()]
        assert streamed.function.name == "get_weather" and json.loads(streamed.function.arguments) == {"city": "Paris"}
    assert frontend.calls[0]["tools"] == [
        ToolSpec(
            "get_weather",
            "The weather now in a city",
            json.dumps(WEATHER["function"]["parameters"], separators=(",", ":")),
        ),
        ToolSpec("get_time"),
    ]


@pytest.mark.parametrize(
    ("text", "held"),
    [("a <tool_cal", "<tool_cal"), ("a <", "<"), ("a <b", ""), ("x", ""), ("<tool_call", "<tool_call")],
)
def test_a_stream_holds_back_only_what_could_begin_a_tag(text, held):
    stream = ToolStream(ToolPlan("auto", (ToolSpec("f"),)))
    sent = "".join(d["content"] for d in stream.feed(text))
    assert (sent, stream.pending) == (text[: len(text) - len(held)], held)
