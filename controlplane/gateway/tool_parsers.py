"""Tool-call parsers: how ``tool_choice: "auto"`` reads the calls a model wrote in its own format back out of its
text (gateway/tool_calls.py), one per model family, chosen by the gateway's ``tool_call_parser`` (``zoo
controlplane --tool-call-parser NAME``, vLLM's flag and names). Sans-IO.

    name          the model writes                                              as vLLM's (vllm/tool_parsers/, main)
    hermes        text, then <tool_call>{"name": N, "arguments": {...}}</tool_call>   hermes_tool_parser.py
                  (one pair of tags per call; Qwen, Hermes, SmolLM2 with the
                  preamble backends/hermes_tools.py writes)
    llama3_json   [<|python_tag|>]{"name": N, "parameters": {...}} (or           llama_tool_parser.py
                  "arguments"), several separated by ";" (Llama 3.1-3.3, 4 JSON)
    mistral       text[TOOL_CALLS] [{"name": N, "arguments": {...}}, ...]         mistral_tool_parser.py
                  (tokenizers before v11) or text[TOOL_CALLS]N{...}[TOOL_CALLS]...
                  (v11 and later)
    pythonic      [f(a=1, b="x"), g()] (Llama 3.2, Llama 4 pythonic, ToolACE),    pythonic_tool_parser.py,
                  optionally inside <|python_start|> ... <|python_end|>           llama4_pythonic_tool_parser.py

Each parser answers three questions of a reply's text: where its calls begin (``start``: -1 when they have not, or
cannot any more), how much of a streamed tail to hold back because it may be the start of a call (``held_back``),
and the (content, calls) of the whole text (``parse``; None: no call, or one that does not parse, and then it is all
content, as vLLM answers). ``at_start`` says whether the text is the reply's beginning (nothing sent yet): the JSON
and pythonic formats are calls only when the reply opens with them. So a streamed reply sends exactly the content and
calls the whole reply would (tests/controlplane/gateway/test_tool_parsers.py checks it for every split).

Deliberate differences from vLLM: llama3_json reads objects only where the reply opens with them (or after
``<|python_tag|>``), where vLLM's whole-reply path also takes JSON objects in the middle of prose (its streamed
path does not); pythonic takes any Python literal as a value (a negative number, a tuple as a list) and refuses
positional arguments, where vLLM takes only constants, lists and dicts and drops positional arguments silently; a
mistral (pre-v11) reply whose array does not parse is all content, where vLLM answers the text after [TOOL_CALLS].
"""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass

from backends.hermes_tools import TOOL_CALL_START, parse_tool_calls

Call = tuple[str, str]  # (function name, arguments as JSON text)
Parsed = tuple[str | None, list[Call]]

PYTHON_TAG = "<|python_tag|>"
MISTRAL_CALLS = "[TOOL_CALLS]"
PYTHON_START, PYTHON_END = "<|python_start|>", "<|python_end|>"
_JSON = json.JSONDecoder()


def tag_tail(text: str, tag: str) -> int:
    """The length of ``text``'s longest tail that could be the start of ``tag``."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if tag.startswith(text[-n:]):
            return n
    return 0


def _blank_or_prefix(text: str, *openers: str) -> bool:
    """``text`` (a reply's beginning) is blank or could still grow into one of ``openers``."""
    stripped = text.lstrip()
    return not stripped or any(opener.startswith(stripped) for opener in openers)


def _arguments(value: object) -> str | None:
    """A call's arguments as JSON text (an object), or None when they are not an object."""
    if not isinstance(value, dict):
        return None
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError):
        return None


def _json_call(obj: object, argument_keys: tuple[str, ...]) -> Call | None:
    """A decoded ``{"name", <arguments>}`` object as a call (its arguments under the first of ``argument_keys`` it has,
    else none), or None when it is not one."""
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    key = next((k for k in argument_keys if k in obj), None)
    arguments = _arguments({} if key is None else obj[key])
    return None if arguments is None else (obj["name"], arguments)


@dataclass(frozen=True, slots=True)
class Hermes:
    name: str = "hermes"

    def start(self, text: str, at_start: bool) -> int:
        return text.find(TOOL_CALL_START)

    def held_back(self, text: str, at_start: bool) -> int:
        return tag_tail(text, TOOL_CALL_START)

    def parse(self, text: str) -> Parsed | None:
        return parse_tool_calls(text)


@dataclass(frozen=True, slots=True)
class Llama3Json:
    name: str = "llama3_json"

    def start(self, text: str, at_start: bool) -> int:
        tag = text.find(PYTHON_TAG)
        if tag >= 0:
            return tag
        stripped = text.lstrip()
        return len(text) - len(stripped) if at_start and stripped.startswith("{") else -1

    def held_back(self, text: str, at_start: bool) -> int:
        if at_start and _blank_or_prefix(text, PYTHON_TAG, "{"):
            return len(text)  # the reply may still open with a call
        return tag_tail(text, PYTHON_TAG)

    def parse(self, text: str) -> Parsed | None:
        tag = text.find(PYTHON_TAG)
        if tag >= 0:
            content, body = text[:tag].strip() or None, text[tag + len(PYTHON_TAG) :]
        elif text.lstrip().startswith("{"):
            content, body = None, text
        else:
            return None
        calls = []
        at = 0
        while True:
            while at < len(body) and (body[at].isspace() or body[at] == ";"):
                at += 1
            if at == len(body):
                break
            try:
                obj, at = _JSON.raw_decode(body, at)
            except (ValueError, RecursionError):
                return None
            call = _json_call(obj, ("arguments", "parameters"))
            if call is None:
                return None
            calls.append(call)
        return (content, calls) if calls else None


@dataclass(frozen=True, slots=True)
class Mistral:
    name: str = "mistral"

    def start(self, text: str, at_start: bool) -> int:
        return text.find(MISTRAL_CALLS)

    def held_back(self, text: str, at_start: bool) -> int:
        return tag_tail(text, MISTRAL_CALLS)

    def parse(self, text: str) -> Parsed | None:
        start = text.find(MISTRAL_CALLS)
        if start < 0:
            return None
        content = text[:start].strip() or None
        parts = text[start:].split(MISTRAL_CALLS)[1:]
        first = parts[0].lstrip()
        if first.startswith("["):  # tokenizers before v11: one array of {"name", "arguments"}
            if len(parts) != 1:
                return None
            try:
                items = json.loads(first)
            except (ValueError, RecursionError):
                return None
            if not isinstance(items, list) or not items:
                return None
            calls = [_json_call(item, ("arguments",)) for item in items]
            return None if None in calls else (content, calls)
        calls = []  # v11 and later: [TOOL_CALLS]name{arguments}, once per call
        for part in parts:
            brace = part.find("{")
            name = part[:brace].strip() if brace >= 0 else ""
            if not name:
                return None
            try:
                arguments, end = _JSON.raw_decode(part, brace)
            except (ValueError, RecursionError):
                return None
            arguments = _arguments(arguments)
            if arguments is None or part[end:].strip():
                return None
            calls.append((name, arguments))
        return content, calls


@dataclass(frozen=True, slots=True)
class Pythonic:
    name: str = "pythonic"

    def start(self, text: str, at_start: bool) -> int:
        stripped = text.lstrip()
        opens = stripped.startswith("[") or stripped.startswith(PYTHON_START)
        return len(text) - len(stripped) if at_start and opens else -1

    def held_back(self, text: str, at_start: bool) -> int:
        return len(text) if at_start and _blank_or_prefix(text, "[", PYTHON_START) else 0

    def parse(self, text: str) -> Parsed | None:
        body = text.strip()
        if body.startswith(PYTHON_START):
            body = body[len(PYTHON_START) :]
            body = body[: -len(PYTHON_END)] if body.endswith(PYTHON_END) else body
            body = body.strip()
        if not body.startswith("["):
            return None
        try:
            tree = ast.parse(body, mode="eval")
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return None
        if not isinstance(tree.body, ast.List) or not tree.body.elts:
            return None
        calls = []
        for node in tree.body.elts:
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name) or node.args:
                return None
            try:
                values = {k.arg: ast.literal_eval(k.value) for k in node.keywords}
            except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
                return None
            if None in values:
                return None  # **kwargs
            arguments = _arguments(values)
            if arguments is None:
                return None
            calls.append((node.func.id, arguments))
        return None, calls


PARSERS = {p.name: p for p in (Hermes(), Llama3Json(), Mistral(), Pythonic())}
TOOL_CALL_PARSERS = tuple(PARSERS)
SPECIAL_TOKEN_PARSERS = frozenset({"mistral"})  # their marker is a special token: the reply must keep it
