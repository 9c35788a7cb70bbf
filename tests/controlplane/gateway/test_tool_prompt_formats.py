"""Tools written into a template that cannot show them in the tool-call parser's format (backends/
tool_prompt_formats.py): each format's written calls read back as the same calls by its parser; the fold puts the
instructions, the calls and the results where a template reads them; the gateway asks every chat path (chat
completions, responses, Anthropic's messages and count_tokens, /tokenize) for its parser's format."""

from __future__ import annotations

import json
import keyword

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from backends.chat_render import render_chat
from backends.fake.byte_tokenizer import ByteTokenizer
from backends.hermes_tools import template_messages, template_tools
from backends.tool_prompt_formats import FORMATS, TOOL_FORMATS, fold_tools
from controlplane.gateway import GatewayConfig, create_app
from controlplane.gateway.tool_parsers import PARSERS, TOOL_CALL_PARSERS
from engine.prompt import PromptError
from transport.chat_wire import ChatMessage, ChatTemplateOptions, ToolCall, ToolSpec

WEATHER = ToolSpec("get_weather", "The weather now", '{"type":"object","properties":{"city":{"type":"string"}}}')
CONVERSATION = [
    ChatMessage("user", "Weather in Paris?"),
    ChatMessage("assistant", "Let me look.", tool_calls=(ToolCall("call_1", "get_weather", '{"city":"Paris"}'),)),
    ChatMessage("tool", "18 C", tool_call_id="call_1"),
]
CALLS = [
    [("get_weather", {"city": "Paris"})],
    [("get_weather", {"city": "Paris", "days": 3, "metric": True, "note": None}), ("now", {})],
    [("f", {"nested": {"a": [1, 2.5, "x", False]}, "quote": 'it\'s "quoted"; a\nnew line'})],
]
MARKERS = {
    "hermes": "<tool_call>",
    "llama3_json": '"parameters"',
    "mistral": "[TOOL_CALLS]",
    "pythonic": "[func_name1(",
}


def test_every_parser_has_a_format_and_every_format_a_parser():
    assert set(TOOL_FORMATS) == set(TOOL_CALL_PARSERS)


@pytest.mark.parametrize("calls", CALLS)
@pytest.mark.parametrize("fmt", TOOL_FORMATS)
def test_written_calls_read_back_by_the_formats_parser(fmt, calls):
    parsed = PARSERS[fmt].parse(FORMATS[fmt].calls(calls))
    assert parsed is not None
    content, got = parsed
    assert content is None
    assert [(name, json.loads(arguments)) for name, arguments in got] == calls


_TEXT = st.text(st.characters(codec="utf-8", exclude_characters="<[", exclude_categories=("Cs",)), max_size=12)
_SCALAR = st.none() | st.booleans() | st.integers(-(10**12), 10**12) | st.floats(allow_nan=False, allow_infinity=False)
_VALUE = st.recursive(
    _SCALAR | _TEXT, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3)
)
_IDENTIFIER = st.from_regex(r"[a-z_][a-z0-9_]{0,10}", fullmatch=True).filter(lambda k: not keyword.iskeyword(k))
_CALL = st.tuples(st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,20}", fullmatch=True), st.dictionaries(_IDENTIFIER, _VALUE))


@settings(max_examples=150, deadline=None)
@given(fmt=st.sampled_from(TOOL_FORMATS), calls=st.lists(_CALL, min_size=1, max_size=3))
def test_any_calls_round_trip_through_every_format(fmt, calls):
    parsed = PARSERS[fmt].parse(FORMATS[fmt].calls(calls))
    assert parsed is not None, FORMATS[fmt].calls(calls)
    assert [(name, json.loads(arguments)) for name, arguments in parsed[1]] == calls


@pytest.mark.parametrize("fmt", TOOL_FORMATS)
def test_the_fold_writes_instructions_calls_and_results_in_the_format(fmt):
    folded = fold_tools(template_messages(CONVERSATION), template_tools([WEATHER]), fmt)
    system, user, assistant, tool = folded
    assert system["role"] == "system" and MARKERS[fmt] in system["content"] and '"get_weather"' in system["content"]
    assert user == {"role": "user", "content": "Weather in Paris?"}
    assert assistant["content"].startswith("Let me look.\n")
    parsed = PARSERS[fmt].parse(assistant["content"].removeprefix("Let me look.\n"))
    assert parsed is not None
    assert [(name, json.loads(arguments)) for name, arguments in parsed[1]] == [("get_weather", {"city": "Paris"})]
    assert tool["role"] == "tool" and "18 C" in tool["content"]


def test_the_fold_of_a_call_whose_arguments_are_not_an_object_or_not_keywords():
    messages = [{"role": "assistant", "content": "", "tool_calls": [_call("f", "{oops"), _call("g", {"a-b": 1})]}]
    (folded,) = fold_tools(messages, None, "pythonic")
    assert folded["content"] == "[f(arguments='{oops'), g(**{'a-b': 1})]"


def test_a_system_message_keeps_its_text_and_gets_the_instructions_after_it():
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "x"}]
    folded = fold_tools(messages, template_tools([WEATHER]), "llama3_json")
    assert folded[0]["content"].startswith("Be brief.\n\n# Tools") and len(folded) == 2


def test_render_chat_passes_the_format_on_and_refuses_an_unknown_one():
    tokenizer = ByteTokenizer()
    prompt = render_chat(tokenizer, CONVERSATION, [WEATHER], ChatTemplateOptions(tool_format="mistral"))
    assert "[AVAILABLE_TOOLS]" in prompt and '[TOOL_CALLS] [{"name":"get_weather"' in prompt
    assert "<tool_call>" not in prompt
    assert "<tool_call>" in render_chat(tokenizer, CONVERSATION, [WEATHER])  # the default: Hermes
    with pytest.raises(PromptError) as raised:
        render_chat(tokenizer, CONVERSATION, [WEATHER], ChatTemplateOptions(tool_format="granite"))
    assert raised.value.param == "tools"


def _call(name, arguments):
    return {"id": "c", "type": "function", "function": {"name": name, "arguments": arguments}}


TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": json.loads(WEATHER.parameters)}}


@pytest.mark.anyio
async def test_every_chat_path_asks_for_the_gateways_parser_format(make_frontend):
    frontend = make_frontend()
    app = create_app(frontend, config=GatewayConfig(tool_call_parser="pythonic"))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gateway") as client:
        messages = [{"role": "user", "content": "Weather in Paris?"}]
        r = await client.post("/v1/chat/completions", json={"messages": messages, "tools": [TOOL]})
        assert r.status_code == 200, r.text
        flat = {"type": "function", "name": "get_weather", "parameters": TOOL["function"]["parameters"]}
        r = await client.post("/v1/responses", json={"input": "Weather in Paris?", "tools": [flat]})
        assert r.status_code == 200, r.text
        anthropic = {"name": "get_weather", "input_schema": TOOL["function"]["parameters"]}
        body = {"model": "smol", "max_tokens": 8, "messages": messages, "tools": [anthropic]}
        r = await client.post("/v1/messages", json=body)
        assert r.status_code == 200, r.text
        assert [call["chat"].tool_format for call in frontend.calls] == ["pythonic"] * 3
        tokenized = await client.post("/tokenize", json={"messages": messages, "tools": [TOOL]})
        counted = await client.post("/v1/messages/count_tokens", json={"model": "smol", **body})
        expected = render_chat(
            frontend.tokenizer,
            [ChatMessage("user", "Weather in Paris?")],
            [ToolSpec("get_weather", parameters=json.dumps(TOOL["function"]["parameters"]))],
            ChatTemplateOptions(tool_format="pythonic"),
        )
        assert "Python list of calls" in expected
        assert tokenized.json()["count"] == len(frontend.tokenizer.encode(expected))
        assert counted.status_code == 200 and counted.json()["input_tokens"] > 0


@pytest.mark.anyio
async def test_the_default_hermes_parser_sends_no_options(client, frontend):
    body = {"messages": [{"role": "user", "content": "Weather?"}], "tools": [TOOL]}
    assert (await client.post("/v1/chat/completions", json=body)).status_code == 200
    assert frontend.calls[0]["chat"] is None
