"""Tools in a chat prompt (backends/hermes_tools.py): the shapes a tools-aware template gets, the Hermes format
written into a template that has none (SmolLM2's), the calls read back out of a reply, and refusals."""

from __future__ import annotations

import json

import pytest

from backends.checkpoint import Tokenizer
from backends.checkpoint.chat_template import ChatTemplate
from backends.hermes_tools import MAX_TOOLS, parse_tool_calls, template_messages, template_tools
from backends.tool_prompt_formats import fold_tools
from transport.chat_wire import ChatMessage, ToolCall, ToolSpec

WEATHER = ToolSpec("get_weather", "The weather now", '{"type":"object","properties":{"city":{"type":"string"}}}')
CONVERSATION = [
    ChatMessage("user", "Weather in Paris?"),
    ChatMessage("assistant", "", tool_calls=(ToolCall("call_1", "get_weather", '{"city":"Paris"}'),)),
    ChatMessage("tool", "18 C", tool_call_id="call_1"),
]
AWARE = (
    "{% if tools %}TOOLS {{ tools | tojson }}{{ '\\n' }}{% endif %}"
    "{% for m in messages %}{{ m.role }}: {{ m.content }}"
    "{% if m.tool_calls %} CALLS {{ m.tool_calls | tojson }}{% endif %}"
    "{% if m.tool_call_id %} FOR {{ m.tool_call_id }}{% endif %}{{ '\\n' }}{% endfor %}"
)


def test_template_shapes_are_hugging_faces():
    (tool,) = template_tools([WEATHER])
    assert tool == {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather now",
            "parameters": json.loads(WEATHER.parameters),
        },
    }
    assert template_tools([ToolSpec("f")])[0]["function"]["parameters"] == {"type": "object", "properties": {}}
    assert template_tools(None) is None and template_tools([]) is None
    messages = template_messages(CONVERSATION)
    assert messages[1]["tool_calls"] == [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
    ]
    assert messages[2] == {"role": "tool", "content": "18 C", "tool_call_id": "call_1"}
    bad_json = ChatMessage("assistant", "", tool_calls=(ToolCall("c", "f", "{oops"),))
    assert template_messages([bad_json])[0]["tool_calls"][0]["function"]["arguments"] == "{oops"  # kept as text


def test_a_template_that_reads_tools_gets_them_and_the_calls_unfolded():
    rendered = ChatTemplate(AWARE).render(template_messages(CONVERSATION), tools=template_tools([WEATHER]))
    lines = rendered.splitlines()
    assert lines[0].startswith("TOOLS ") and json.loads(lines[0][6:])[0]["function"]["name"] == "get_weather"
    assert lines[2].startswith("assistant:  CALLS ") and "<tool_call>" not in rendered
    assert lines[3] == "tool: 18 C FOR call_1"


def test_fold_writes_the_hermes_format_into_the_messages():
    folded = fold_tools(template_messages(CONVERSATION), template_tools([WEATHER]))
    system = folded[0]
    assert system["role"] == "system" and "<tools>" in system["content"] and "</tools>" in system["content"]
    signature = system["content"].split("<tools>\n")[1].split("\n</tools>")[0]
    assert json.loads(signature)["function"]["name"] == "get_weather"
    assert folded[2]["content"] == '<tool_call>\n{"name":"get_weather","arguments":{"city":"Paris"}}\n</tool_call>'
    assert folded[3] == {"role": "tool", "content": "<tool_response>\n18 C\n</tool_response>"}
    with_system = fold_tools([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "x"}], [{"t": 1}])
    assert with_system[0]["content"].startswith("Be brief.\n\n# Tools") and len(with_system) == 2
    plain = [{"role": "user", "content": "hi"}]
    assert fold_tools(plain, None) == plain


def test_smollm2s_template_gets_the_tools_folded_in(smollm_tokenizer: Tokenizer):
    prompt = smollm_tokenizer.apply_chat_template(template_messages(CONVERSATION), tools=template_tools([WEATHER]))
    assert prompt.startswith("<|im_start|>system\n# Tools") and "SmolLM" not in prompt  # our system message, not its
    assert '<|im_start|>assistant\n<tool_call>\n{"name":"get_weather"' in prompt
    assert "<|im_start|>tool\n<tool_response>\n18 C\n</tool_response><|im_end|>" in prompt
    assert prompt.endswith("<|im_start|>assistant\n")


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("no call here", None),
        ('<tool_call>{"name": "f", "arguments": {"a": [1, 2]}}</tool_call>', (None, [("f", '{"a": [1, 2]}')])),
        (
            'Hm.\n<tool_call>\n{"name": "f"}\n</tool_call>\n<tool_call>{"name": "g", "arguments": {}}',
            ("Hm.", [("f", "{}"), ("g", "{}")]),
        ),
        ('<tool_call>{"name": "f", "arguments": {"a": 1}', None),  # cut short: not JSON
        ('<tool_call>{"arguments": {}}</tool_call>', None),  # no name
        ('<tool_call>{"name": 3}</tool_call>', None),
        ("<tool_call>" + "[" * 5000 + "]" * 5000 + "</tool_call>", None),
    ],
)
def test_parse_tool_calls(text, parsed):
    assert parse_tool_calls(text) == parsed


@pytest.mark.parametrize(
    ("tools", "message"),
    [
        ([ToolSpec("bad name")], "letters, digits"),
        ([ToolSpec("x" * 65)], "letters, digits"),
        ([ToolSpec("f"), ToolSpec("f")], "given twice"),
        ([ToolSpec(f"f{i}") for i in range(MAX_TOOLS + 1)], "at most"),
        ([ToolSpec("f", "d" * 9000)], "description"),
        ([ToolSpec("f", parameters="[1]")], "schema object"),
        ([ToolSpec("f", parameters="{oops")], "not JSON"),
        ([ToolSpec("f", parameters='{"a":' * 3000 + "1" + "}" * 3000)], "not JSON"),
    ],
)
def test_bad_tools_are_refused_naming_what_is_wrong(tools, message):
    with pytest.raises(ValueError, match=message):
        template_tools(tools)


@pytest.mark.parametrize(
    ("tool_format", "call"), [("pythonic", "[get_weather(city='Paris')]"), ("mistral", "[TOOL_CALLS] [")]
)
def test_smollm2s_template_gets_the_tools_in_the_format_asked(smollm_tokenizer: Tokenizer, tool_format, call):
    prompt = smollm_tokenizer.apply_chat_template(
        template_messages(CONVERSATION), tools=template_tools([WEATHER]), tool_format=tool_format
    )
    assert prompt.startswith("<|im_start|>system\n# Tools") and "<tool_call>" not in prompt
    assert f"<|im_start|>assistant\n{call}" in prompt and prompt.endswith("<|im_start|>assistant\n")
