"""A checkpoint's Jinja chat template, rendered the way Hugging Face's `apply_chat_template` renders it."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import jinja2
from jinja2 import meta, nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

from backends.tool_prompt_formats import fold_tools

_SET_HERE = frozenset({"messages", "tools", "add_generation_prompt"})  # never a caller's variable


class ChatTemplate:
    """A compiled chat template.

    The environment mirrors transformers': sandboxed and immutable, trim_blocks/lstrip_blocks, `loopcontrols`,
    a `tojson` filter that keeps non-ASCII text, the globals `raise_exception` and `strftime_now`, and the
    `{% generation %}` block tag (rendered as its body). Template or message errors raise ValueError.
    A template that reads `tools` gets the tools and the messages' calls as Hugging Face passes them; for one that
    does not, they are written into the messages in the Hermes format (backends/hermes_tools.py).
    """

    def __init__(self, source: str) -> None:
        if not isinstance(source, str) or not source:
            raise ValueError("a chat template must be a non-empty string")
        self.source = source
        try:
            environment = _environment()
            self._template = environment.from_string(source)
            self.variables = frozenset(meta.find_undeclared_variables(environment.parse(source)))
            self.takes_tools = "tools" in self.variables
        except jinja2.TemplateSyntaxError as error:
            raise ValueError(f"the chat template does not parse: {error}") from error

    def render(
        self,
        messages: list[dict[str, Any]],
        *,
        add_generation_prompt: bool = True,
        special_tokens: dict[str, str | None] | None = None,
        tools: list[dict[str, Any]] | None = None,
        variables: dict[str, Any] | None = None,
        tool_format: str = "hermes",
    ) -> str:
        """Render `messages`; `special_tokens` supplies template variables such as bos_token and eos_token;
        `tools` (backends/hermes_tools.template_tools) the functions the reply may call; `variables` more of the
        template's variables (vLLM's chat_template_kwargs): those it does not read are dropped, as vLLM drops them,
        and none replaces the messages, tools, flag or special tokens. A template that does not read ``tools`` gets them
        written into its messages in ``tool_format`` (backends/tool_prompt_formats.py)."""
        validate_messages(messages)
        extra = {k: v for k, v in (variables or {}).items() if k in self.variables and k not in _SET_HERE}
        variables = {**extra, **(special_tokens or {})}
        if self.takes_tools:
            variables["tools"] = tools
        else:
            messages = fold_tools(messages, tools, tool_format)
        try:
            return self._template.render(**variables, messages=messages, add_generation_prompt=add_generation_prompt)
        except jinja2.TemplateError as error:
            raise ValueError(f"the chat template rejected the messages: {error}") from error
        except Exception as error:  # a caller's variable of a type the template does not expect, say
            raise ValueError(f"the chat template failed on this input: {type(error).__name__}: {error}") from error


def read_chat_template(value: str) -> str:
    """A ``--chat-template`` value's template, by vLLM's rule (vllm/entrypoints/chat_utils.py ``load_chat_template``):
    a file's contents when it names a file that opens, else the value itself when it holds a Jinja character ("{",
    "}" or a newline), else ValueError (a file path that did not open). The template is compiled here, so one that
    does not parse is refused at start, not at the first chat."""
    if not value:
        raise ValueError("--chat-template: empty (a file path or a template)")
    try:
        with open(value, encoding="utf-8") as f:
            source = f.read()
    except (OSError, ValueError) as error:  # ValueError: a NUL in the value, or a file that is not UTF-8
        if not any(c in value for c in "{}\n"):
            message = f"--chat-template {value!r} looks like a file path, but it did not open: {error}"
            raise ValueError(message) from None
        source = value
    try:
        ChatTemplate(source)
    except ValueError as error:
        raise ValueError(f"--chat-template: {error}") from None
    return source


def validate_messages(messages: Any) -> None:
    """Raise ValueError unless `messages` is a non-empty list of dicts with string "role" and "content"."""
    if not isinstance(messages, list):
        raise ValueError(f"messages must be a list of dicts, got {type(messages).__name__}")
    if not messages:
        raise ValueError("messages is empty; a chat needs at least one message")
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            raise ValueError(f"messages[{index}] must be a dict, got {type(message).__name__}")
        for key in ("role", "content"):
            if key not in message:
                raise ValueError(f"messages[{index}] has no {key!r}")
            if not isinstance(message[key], str):
                raise ValueError(f"messages[{index}][{key!r}] must be a str, got {type(message[key]).__name__}")
        if not message["role"]:
            raise ValueError(f"messages[{index}]['role'] is empty")


class _GenerationBlock(Extension):
    """`{% generation %}...{% endgeneration %}` (marks assistant text for training masks): renders the body."""

    tags = frozenset({"generation"})

    def parse(self, parser: jinja2.parser.Parser) -> nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.Scope(body, lineno=lineno)


def _raise_exception(message: str) -> None:
    raise jinja2.TemplateError(message)


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None, separators=None, sort_keys=False):
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(format_string: str) -> str:
    return datetime.now().strftime(format_string)


def _environment() -> ImmutableSandboxedEnvironment:
    environment = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[_GenerationBlock, loopcontrols]
    )
    environment.filters["tojson"] = _tojson
    environment.globals["raise_exception"] = _raise_exception
    environment.globals["strftime_now"] = _strftime_now
    return environment
