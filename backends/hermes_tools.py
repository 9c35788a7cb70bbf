"""Tools in a chat prompt, and tool calls in a model's text: the shapes chat templates take, and the Hermes format.

A chat template that knows tools (it reads the ``tools`` variable, as Qwen2.5's and Hermes-2-Pro's do) gets them in
Hugging Face's ``apply_chat_template`` shapes (``template_tools``, ``template_messages``). For one that does not
(SmolLM2's ChatML template), backends/tool_prompt_formats.py writes them into the messages themselves, by default
in the Hermes format written here (NousResearch Hermes-2-Pro; vLLM's ``hermes`` tool parser, vllm/entrypoints/openai/
tool_parsers/hermes_tool_parser.py, reads the same tags): the functions' JSON signatures inside ``<tools></tools>``
in the system message (``preamble``), each call the assistant made as ``<tool_call>{"name": ..., "arguments":
{...}}</tool_call>`` (``call_text``), each result inside ``<tool_response></tool_response>``. ``parse_tool_calls``
reads a reply written that way back into calls.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

from transport.chat_wire import ChatMessage, ToolSpec

MAX_TOOLS = 128  # OpenAI's limit on tools per request
MAX_TOOL_DESCRIPTION_CHARS = 8192
TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")  # OpenAI's rule for a function name
TOOL_CALL_START = "<tool_call>"
TOOL_CALL_END = "</tool_call>"
_CALL = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)
_NO_PARAMETERS = {"type": "object", "properties": {}}


class _HermesCall(msgspec.Struct):
    name: str
    arguments: msgspec.Raw = msgspec.Raw(b"{}")


_CALL_DECODER = msgspec.json.Decoder(_HermesCall)


def template_tools(tools: list[ToolSpec] | None) -> list[dict[str, Any]] | None:
    """The tools as ``apply_chat_template(tools=...)`` takes them; ValueError naming what is wrong: more than
    MAX_TOOLS, a name not of TOOL_NAME's form or given twice, parameters that are not a JSON object."""
    if not tools:
        return None
    check_tools(tools)
    out = []
    for index, tool in enumerate(tools):
        parameters = _NO_PARAMETERS
        if tool.parameters:
            try:
                parameters = msgspec.json.decode(tool.parameters)
            except (msgspec.DecodeError, RecursionError):
                raise ValueError(f"tools[{index}].parameters is not JSON (or is nested too deeply)") from None
            if not isinstance(parameters, dict):
                raise ValueError(f"tools[{index}].parameters must be a JSON schema object")
        function = {"name": tool.name, "description": tool.description, "parameters": parameters}
        out.append({"type": "function", "function": function})
    return out


def check_tools(tools: list[ToolSpec]) -> None:
    """ValueError unless there are at most MAX_TOOLS tools, each named by TOOL_NAME's form, no name twice, each
    description at most MAX_TOOL_DESCRIPTION_CHARS (their parameters are checked where they are decoded)."""
    if len(tools) > MAX_TOOLS:
        raise ValueError(f"at most {MAX_TOOLS} tools may be given, got {len(tools)}")
    seen = set()
    for index, tool in enumerate(tools):
        if not TOOL_NAME.fullmatch(tool.name):
            raise ValueError(f"tools[{index}].function.name must be 1 to 64 letters, digits, '_' or '-'")
        if tool.name in seen:
            raise ValueError(f"tools[{index}].function.name {tool.name!r} is given twice")
        if len(tool.description) > MAX_TOOL_DESCRIPTION_CHARS:
            raise ValueError(f"tools[{index}].function.description is longer than {MAX_TOOL_DESCRIPTION_CHARS}")
        seen.add(tool.name)


def template_messages(messages: list[ChatMessage]) -> list[dict[str, Any]]:
    """The messages as ``apply_chat_template`` takes them: an assistant's calls under ``tool_calls`` (arguments
    decoded, as templates ``tojson`` them; kept as text when they are not JSON), a result's ``tool_call_id``."""
    out: list[dict[str, Any]] = []
    for m in messages:
        message: dict[str, Any] = {"role": m.role, "content": m.content}
        if m.tool_calls:
            message["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": _arguments_value(c)}}
                for c in m.tool_calls
            ]
        if m.tool_call_id is not None:
            message["tool_call_id"] = m.tool_call_id
        out.append(message)
    return out


def parse_tool_calls(text: str) -> tuple[str | None, list[tuple[str, str]]] | None:
    """The content before the first call (None when blank) and each call's (name, arguments as JSON text), or None
    when ``text`` holds no call or one that does not parse (then all of it is content, as vLLM's parser does)."""
    start = text.find(TOOL_CALL_START)
    if start < 0:
        return None
    calls = []
    for body in _CALL.findall(text, start):
        try:
            call = _CALL_DECODER.decode(body.strip())
        except (msgspec.DecodeError, RecursionError):
            return None
        calls.append((call.name, bytes(call.arguments).decode()))
    content = text[:start].strip()
    return (content or None), calls


def signature_lines(tools: list[dict[str, Any]]) -> str:
    """The tools' JSON signatures, one per line (every tool prompt format shows them so)."""
    return "\n".join(msgspec.json.encode(t).decode() for t in tools)


def preamble(tools: list[dict[str, Any]]) -> str:
    signatures = signature_lines(tools)
    return (
        "# Tools\n\nYou may call one or more of the functions below to answer. Their signatures are JSON inside "
        f"<tools></tools> tags:\n<tools>\n{signatures}\n</tools>\n\nTo call a function, answer with a JSON object "
        "holding its name and arguments inside <tool_call></tool_call> tags, one pair of tags per call:\n"
        '<tool_call>\n{"name": <function name>, "arguments": <the arguments as a JSON object>}\n</tool_call>'
    )


def call_text(name: str, arguments: Any) -> str:
    body = msgspec.json.encode({"name": name, "arguments": arguments}).decode()  # text arguments: a JSON string
    return f"{TOOL_CALL_START}\n{body}\n{TOOL_CALL_END}"


def _arguments_value(call) -> Any:
    try:
        return msgspec.json.decode(call.arguments)
    except (msgspec.DecodeError, RecursionError):
        return call.arguments
