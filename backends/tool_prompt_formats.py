"""Tools written into a chat whose template cannot show them, in the format the deployment's tool-call parser reads.

A chat template that reads ``tools`` (Qwen2.5's, Hermes-2-Pro's, Llama 3.1's) renders the tools and the calls
itself. One that does not (SmolLM2's ChatML template) gets them folded into its messages' contents (``fold_tools``):
the functions' signatures and how to call them in the system message, each call an assistant made written as the
model would write it, each result as the model would read it. The format is the one the gateway's tool-call parser
reads back (``zoo controlplane --tool-call-parser``; controlplane/gateway/tool_parsers.py), so a model that follows
the instructions is understood, and the conversation so far shows it the same format:

    format        instructions + signatures            an assistant's calls                       a result
    hermes        <tools>{...}</tools>, <tool_call>     <tool_call>{"name", "arguments"}</tool_call>  <tool_response>
                  (backends/hermes_tools.py)            one pair of tags per call                  ...</tool_response>
    llama3_json   a JSON object per call, "parameters"   {"name": N, "parameters": {...}}; ...      as it came
                  (Llama 3.1's JSON tool calling)
    mistral       [AVAILABLE_TOOLS][...][/AVAILABLE_     [TOOL_CALLS] [{"name", "arguments"}, ...]  [TOOL_RESULTS]
                  TOOLS], then [TOOL_CALLS] + an array  (the pre-v11 array)                        ...[/TOOL_RESULTS]
    pythonic      a Python list of calls                 [f(a=1, b='x'), g()]                       as it came
                  (Llama 3.2's and 4's pythonic calls)

Each format's written calls parse back to the same calls by its parser (tests/controlplane/gateway/
test_tool_prompt_formats.py checks it for every format). The instructions are this project's own wording of each
family's published convention (Meta's Llama 3.1 and 3.2 model cards, Mistral's tokenizer markers, NousResearch's
Hermes-2-Pro), not a copy of any template. Sans-IO.
"""

from __future__ import annotations

import keyword
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec

from backends import hermes_tools

DEFAULT_TOOL_FORMAT = "hermes"


def _json(value: Any) -> str:
    return msgspec.json.encode(value).decode()


def _llama3_preamble(tools: list[dict[str, Any]]) -> str:
    return (
        "# Tools\n\nYou may call the functions below to answer. Their signatures, one JSON object per line:\n"
        f"{hermes_tools.signature_lines(tools)}\n\nTo call a function, answer with nothing but a JSON object holding "
        'its name and its arguments: {"name": <function name>, "parameters": <the arguments as a JSON object>}. '
        "To call several, separate the objects with ';'. Write values, not variables."
    )


def _llama3_calls(calls: list[tuple[str, Any]]) -> str:
    return "; ".join(_json({"name": name, "parameters": arguments}) for name, arguments in calls)


def _mistral_preamble(tools: list[dict[str, Any]]) -> str:
    return (
        "# Tools\n\nYou may call the functions below to answer. Their signatures:\n"
        f"[AVAILABLE_TOOLS]{_json(tools)}[/AVAILABLE_TOOLS]\n\nTo call functions, answer with [TOOL_CALLS] followed by "
        "a JSON array with one object per call, each holding the function's name and its arguments:\n"
        '[TOOL_CALLS] [{"name": <function name>, "arguments": <the arguments as a JSON object>}]'
    )


def _mistral_calls(calls: list[tuple[str, Any]]) -> str:
    return "[TOOL_CALLS] " + _json([{"name": name, "arguments": arguments} for name, arguments in calls])


def _mistral_result(content: str) -> str:
    return f"[TOOL_RESULTS]{_json({'content': content})}[/TOOL_RESULTS]"


def _pythonic_preamble(tools: list[dict[str, Any]]) -> str:
    return (
        "# Tools\n\nYou may call the functions below to answer. Their signatures, one JSON object per line:\n"
        f"{hermes_tools.signature_lines(tools)}\n\nTo call functions, answer with nothing but a Python list of "
        "calls with keyword arguments: [func_name1(param1=value1, param2=value2), func_name2(param=value)]. "
        "Write literal values. If no function fits, or a required argument is missing from the question, say so "
        "instead."
    )


def _python_call(name: str, arguments: Any) -> str:
    if not isinstance(arguments, dict):  # arguments that were not a JSON object: shown as one value
        return f"{name}(arguments={arguments!r})"
    if all(isinstance(k, str) and k.isidentifier() and not keyword.iskeyword(k) for k in arguments):
        return f"{name}({', '.join(f'{k}={v!r}' for k, v in arguments.items())})"
    return f"{name}(**{arguments!r})"  # keys no keyword argument can name (repr: JSON's null, true as None, True)


def _pythonic_calls(calls: list[tuple[str, Any]]) -> str:
    return "[" + ", ".join(_python_call(name, arguments) for name, arguments in calls) + "]"


def _hermes_calls(calls: list[tuple[str, Any]]) -> str:
    return "\n".join(hermes_tools.call_text(name, arguments) for name, arguments in calls)


@dataclass(frozen=True, slots=True)
class ToolPromptFormat:
    """How one family's tools, calls and results read in a prompt."""

    name: str
    preamble: Callable[[list[dict[str, Any]]], str]  # the system message's instructions and signatures
    calls: Callable[[list[tuple[str, Any]]], str]  # an assistant message's calls, as one text after its content
    result: Callable[[str], str]  # a tool message's content


FORMATS = {
    f.name: f
    for f in (
        ToolPromptFormat(
            "hermes", hermes_tools.preamble, _hermes_calls, lambda c: f"<tool_response>\n{c}\n</tool_response>"
        ),
        ToolPromptFormat("llama3_json", _llama3_preamble, _llama3_calls, lambda c: c),
        ToolPromptFormat("mistral", _mistral_preamble, _mistral_calls, _mistral_result),
        ToolPromptFormat("pythonic", _pythonic_preamble, _pythonic_calls, lambda c: c),
    )
}
TOOL_FORMATS = tuple(FORMATS)


def check_tool_format(name: str) -> ToolPromptFormat:
    """The format named ``name``; ValueError naming the known ones."""
    found = FORMATS.get(name)
    if found is None:
        raise ValueError(f"tool_format must be one of {', '.join(TOOL_FORMATS)}, got {name[:64]!r}")
    return found


def fold_tools(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, tool_format: str = DEFAULT_TOOL_FORMAT
) -> list[dict[str, Any]]:
    """``messages`` (backends/hermes_tools.template_messages's shapes) with the tools, calls and results written into
    their contents in ``tool_format``, for a template that reads only roles and contents. Without tools or tool
    messages they come back unchanged; ValueError for an unknown format."""
    fmt = check_tool_format(tool_format)
    out = []
    for message in messages:
        content = message["content"]
        calls = message.get("tool_calls") or ()
        if calls:
            written = fmt.calls([(c["function"]["name"], c["function"]["arguments"]) for c in calls])
            content = "\n".join([content, written] if content else [written])
        if message["role"] == "tool":
            content = fmt.result(content)
        out.append({"role": message["role"], "content": content})
    if tools:
        preamble = fmt.preamble(tools)
        if out and out[0]["role"] == "system":
            out[0] = {"role": "system", "content": f"{out[0]['content']}\n\n{preamble}"}
        else:
            out.insert(0, {"role": "system", "content": preamble})
    return out
