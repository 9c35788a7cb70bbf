"""The tool-call parsers (gateway/tool_parsers.py): each format's calls and content read out of hand-made replies as
vLLM's parser of that name reads them (and the deliberate differences); malformed calls are all content; a streamed
reply (gateway/tool_calls.py ToolStream), cut anywhere, sends the content and calls the whole reply has; the gateway
serves a configured parser, and keeps mistral's special token in the reply."""

from __future__ import annotations

import json

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controlplane.gateway import GatewayConfig, create_app
from controlplane.gateway.tool_calls import ToolPlan, ToolStream
from controlplane.gateway.tool_parsers import PARSERS, TOOL_CALL_PARSERS
from transport.messages import ToolSpec

SPECS = (ToolSpec(name="get_weather", description="", parameters='{"type": "object"}'),)
WEATHER = {"city": "Paris", "days": 2}


def _parse(parser: str, text: str):
    parsed = PARSERS[parser].parse(text)
    return None if parsed is None else (parsed[0], [(name, json.loads(args)) for name, args in parsed[1]])


@pytest.mark.parametrize(
    ("parser", "text", "expected"),
    [
        ("hermes", 'Let me look.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}\n'
         "</tool_call>", ("Let me look.", [("get_weather", WEATHER)])),
        ("llama3_json", '{"name": "get_weather", "parameters": {"city": "Paris", "days": 2}}',
         (None, [("get_weather", WEATHER)])),
        ("llama3_json", '<|python_tag|>{"name": "a", "arguments": {}}; {"name": "b", "parameters": {"x": [1]}}',
         (None, [("a", {}), ("b", {"x": [1]})])),
        ("llama3_json", 'Sure.<|python_tag|>{"name": "a", "arguments": {"k": "v"}}', ("Sure.", [("a", {"k": "v"})])),
        ("llama3_json", '  {"name": "a"}', (None, [("a", {})])),
        ("mistral", 'Checking.[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}, '
         '{"name": "b", "arguments": {}}]', ("Checking.", [("get_weather", WEATHER), ("b", {})])),
        ("mistral", '[TOOL_CALLS]get_weather{"city": "Paris", "days": 2}[TOOL_CALLS]b{}',
         (None, [("get_weather", WEATHER), ("b", {})])),
        ("pythonic", '[get_weather(city="Paris", days=2), b()]', (None, [("get_weather", WEATHER), ("b", {})])),
        ("pythonic", "[f(x=-1.5, y=(1, 2), z={'k': [True, None]})]",  # vLLM refuses -1.5 and the tuple
         (None, [("f", {"x": -1.5, "y": [1, 2], "z": {"k": [True, None]}})])),
        ("pythonic", '<|python_start|>[f(a="b")]<|python_end|>', (None, [("f", {"a": "b"})])),
    ],
)  # fmt: skip
def test_each_format_is_read_as_its_models_write_it(parser, text, expected):
    assert _parse(parser, text) == expected


@pytest.mark.parametrize(
    ("parser", "text"),
    [
        ("hermes", "no calls here"),
        ("hermes", "<tool_call>{not json}</tool_call>"),
        ("llama3_json", 'The answer is {"name": "a", "arguments": {}} in prose'),  # vLLM's whole path takes it
        ("llama3_json", '{"name": "a", "arguments": {}} and then words'),
        ("llama3_json", '{"arguments": {}}'),  # no name
        ("llama3_json", '{"name": "a", "arguments": [1]}'),  # arguments not an object
        ("llama3_json", '{"name": "a", "arguments": {"x": NaN}}'),  # not JSON once written
        ("llama3_json", "[" * 5000 + "]" * 5000),
        ("llama3_json", '{"a":' * 3000 + "1" + "}" * 3000),
        ("mistral", "[TOOL_CALLS] [{bad"),
        ("mistral", '[TOOL_CALLS] [{"name": "a", "arguments": {}}][TOOL_CALLS] []'),
        ("mistral", "[TOOL_CALLS]{}"),  # v11 without a name
        ("mistral", '[TOOL_CALLS]a{"x": 1} trailing'),
        ("mistral", "[TOOL_CALLS] []"),
        ("pythonic", "plain words"),
        ("pythonic", "[1, 2]"),
        ("pythonic", "[f(1)]"),  # a positional argument: vLLM drops it silently
        ("pythonic", "[f(x=g())]"),  # not a literal
        ("pythonic", "[f(**k)]"),
        ("pythonic", "[f(x={1, 2})]"),  # a set is not JSON
        ("pythonic", "[f(x=b'1')]"),
        ("pythonic", "[f(x=" + "(" * 300 + "1" + ")" * 300 + ")]"),
        ("pythonic", "[f(x=" + "9" * 5000 + ")]"),
        ("pythonic", "[os.system(x='rm')]"),  # a call must name a function, not an attribute
        ("pythonic", "[]"),
    ],
)
def test_what_does_not_parse_is_no_call(parser, text):
    assert PARSERS[parser].parse(text) is None


def _stream(plan: ToolPlan, pieces: list[str]) -> tuple[str | None, list]:
    stream, content, calls = ToolStream(plan), [], []
    deltas = [d for piece in pieces for d in stream.feed(piece)] + stream.finish()
    for delta in deltas:
        content.append(delta.get("content", ""))
        calls += [(c["function"]["name"], c["function"]["arguments"]) for c in delta.get("tool_calls", [])]
    return "".join(content).strip() or None, calls


REPLY_PARTS = {
    "hermes": ["", "Let me look. ", "<tool_call>", '\n{"name": "a", "arguments": {"k": 1}}\n', "</tool_call>", "<tool"],
    "llama3_json": ["", "  ", "Sure.", "<|python_tag|>", '{"name": "a", "parameters": {"k": 1}}', "; ", "{", "<|py"],
    "mistral": ["", "Checking.", "[TOOL_CALLS]", ' [{"name": "a", "arguments": {"k": 1}}]', 'a{"k": 1}', "[TOOL"],
    "pythonic": ["", " ", "[a(k=1)", ", b()", "]", "<|python_start|>", "<|python_end|>", "words", "["],
}


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_a_streamed_reply_cut_anywhere_sends_what_the_whole_reply_has(data):
    parser = data.draw(st.sampled_from(TOOL_CALL_PARSERS))
    text = "".join(data.draw(st.lists(st.sampled_from(REPLY_PARTS[parser]), max_size=6)))
    cuts = sorted(data.draw(st.sets(st.integers(0, len(text)), max_size=8)))
    pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
    plan = ToolPlan("auto", SPECS, parser=parser)
    content, calls = plan.extract(text)
    assert _stream(plan, pieces) == ((content or "").strip() or None, calls)


CANONICAL = {
    "hermes": ['  <tool_call>{"name": "a", "arguments": {}}</tool_call>',
               'Hi <tool_call>{"name": "a", "arguments": {}}', "Hi <tool", "<tool_call>{bad}</tool_call>"],
    "llama3_json": ['  {"name": "a", "parameters": {"k": 1}}', 'Hi<|python_tag|>{"name": "a", "arguments": {}}',
                    '<|python_tag|>{"name": "a", "arguments": {}}; {"name": "b"}', "  Hi {", "  <|py", "{bad"],
    "mistral": [' [TOOL_CALLS] [{"name": "a", "arguments": {}}]', 'Hi[TOOL_CALLS]a{"k": 1}', "Hi [TOOL",
                "[TOOL_CALLS]"],
    "pythonic": ["  [a(k=1), b()]", "<|python_start|>[a()]<|python_end|>", " words [a()]", "[1]", " <|py"],
}  # fmt: skip


@pytest.mark.parametrize(("parser", "text"), [(p, t) for p, texts in CANONICAL.items() for t in texts])
def test_a_streamed_reply_cut_at_any_one_place_or_at_every_character_sends_what_the_whole_reply_has(parser, text):
    plan = ToolPlan("auto", SPECS, parser=parser)
    content, calls = plan.extract(text)
    whole = ((content or "").strip() or None, calls)
    for cut in range(len(text) + 1):
        assert _stream(plan, [text[:cut], text[cut:]]) == whole, cut
    assert _stream(plan, list(text)) == whole


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("parser", "reply", "skip_special_tokens"),
    [
        ("llama3_json", ['{"name": "get_weather", ', '"parameters": {"city": "Paris"}}'], True),
        ("mistral", ["[TOOL_CALLS]", 'get_weather{"city": "Paris"}'], False),
        ("pythonic", ["[get_weather(", 'city="Paris")]'], True),
    ],
)
async def test_the_gateway_serves_its_configured_parser(make_frontend, script, parser, reply, skip_special_tokens):
    frontend = make_frontend(chunks=script(*reply))
    app = create_app(frontend, config=GatewayConfig(tool_call_parser=parser))
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    body = {"messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": tools}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gateway") as c:
        whole = (await c.post("/v1/chat/completions", json=body)).json()["choices"][0]
        streamed = await c.post("/v1/chat/completions", json={**body, "stream": True})
    assert whole["finish_reason"] == "tool_calls" and whole["message"]["content"] is None
    (call,) = whole["message"]["tool_calls"]
    assert call["function"]["name"] == "get_weather" and json.loads(call["function"]["arguments"]) == {"city": "Paris"}
    assert frontend.calls[0]["sampling"].skip_special_tokens is skip_special_tokens  # mistral's marker kept
    events = [json.loads(line[6:]) for line in streamed.text.splitlines() if line.startswith("data: {")]
    streamed_calls = [c for e in events for c in e["choices"][0]["delta"].get("tool_calls", [])]
    assert [c["function"]["name"] for c in streamed_calls] == ["get_weather"]
    assert events[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_an_unknown_parser_is_refused_at_start():
    with pytest.raises(ValueError, match="llama3_json"):
        GatewayConfig(tool_call_parser="llama2")


def test_zoo_controlplane_takes_the_parser_by_vllms_flag():
    import argparse

    from zoo.serve import add_controlplane_args, gateway_config_from_args

    parser = argparse.ArgumentParser()
    add_controlplane_args(parser)
    assert gateway_config_from_args(parser.parse_args([])).tool_call_parser == "hermes"
    for name in TOOL_CALL_PARSERS:
        assert gateway_config_from_args(parser.parse_args(["--tool-call-parser", name])).tool_call_parser == name
    assert gateway_config_from_args(parser.parse_args(["--tool-call-parser", "none"])).tool_call_parser is None
    with pytest.raises(SystemExit):
        parser.parse_args(["--tool-call-parser", "llama2"])


PIECES = ["{", "}", "[", "]", "(", ")", '"', "'", ":", ",", ";", "=", "name", "arguments", "parameters", "f", "1",
          "-", "e9", "NaN", "\\", "\n", " ", "<tool_call>", "</tool_call>", "<|python_tag|>", "[TOOL_CALLS]",
          "<|python_start|>", "<|python_end|>", "**", "b'", "\x00", "é"]  # fmt: skip


@settings(max_examples=500, deadline=None)
@given(parser=st.sampled_from(TOOL_CALL_PARSERS), pieces=st.lists(st.sampled_from(PIECES), max_size=40))
def test_no_reply_makes_a_parser_raise_and_every_call_it_reads_is_a_json_object(parser, pieces):
    text = "".join(pieces)
    p = PARSERS[parser]
    assert p.start(text, True) < len(text) + 1 and 0 <= p.held_back(text, True) <= len(text)
    parsed = p.parse(text)
    if parsed is not None:
        content, calls = parsed
        assert content is None or isinstance(content, str)
        for name, arguments in calls:
            assert isinstance(name, str) and isinstance(json.loads(arguments), dict)
