"""OpenAI tool calling on /v1/chat/completions: ``tools``, ``tool_choice`` and ``parallel_tool_calls`` read into a
ToolPlan, and the reply's ``tool_calls`` read back out of the model's text.

    tool_choice                 how                                             the reply
    "none"                      the tools are left out of the prompt            content, as without tools
    "auto" (the default         the model decides; its text is read by the      the calls it wrote as tool_calls
     with tools)                tool-call parser (tool_parsers.py)               (finish_reason "tool_calls"),
                                                                                the text before them as content
    "required"                  structured outputs: a JSON array of one or      tool_calls, finish_reason
                                more {"name", "parameters"} (nothing else),     "tool_calls"
                                one schema per tool (at most one item with
                                parallel_tool_calls=false)
    {"type": "function",        structured outputs: that function's             one call of it, finish_reason
     "function": {"name": N}}   parameters schema                               "stop" (as OpenAI answers a forced
                                                                                function)

Both constraints keep the JSON compact (``disable_any_whitespace``: a small model may otherwise pad an empty
object with whitespace until max_tokens). This is what vLLM's OpenAI server does (vllm/entrypoints/openai/
protocol.py ``_get_json_schema_from_tool`` and tool_parsers/utils.py, docs/features/tool_calling.md): a forced call
always parses, whatever the model; "auto" needs a parser for the model's own format (a format whose marker is a
special token, mistral's, keeps special tokens in the reply unless the request says otherwise, as vLLM does).
Differences: vLLM refuses
"auto" unless started with ``--enable-auto-tool-choice --tool-call-parser``; here the gateway's ``tool_call_parser``
(GatewayConfig, ``zoo controlplane --tool-call-parser``: hermes, llama3_json, mistral or pythonic, gateway/
tool_parsers.py; default "hermes", the format backends/hermes_tools.py writes into prompts whose chat template has no
tools, so a model without tools in its template needs it) is on unless set to None; vLLM's "required" items allow
properties beside name and parameters, these do not.
With parallel_tool_calls=false "auto" keeps the first call. The tools reach the prompt through the intake, which
renders them with the model's chat template.

Streaming: a named call streams its arguments as they are generated; "required" sends its calls when the output is
complete; "auto" streams content until the parser sees a call begin (holding back a tail that might begin one: for the
JSON and pythonic formats, which are calls only when the reply opens with them, the reply's blank beginning), then
sends the calls at the end: the same content and calls as the whole reply.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import msgspec

from backends.hermes_tools import MAX_TOOLS, check_tools
from backends.tool_prompt_formats import DEFAULT_TOOL_FORMAT
from controlplane.frontend import invalid_param
from controlplane.gateway.tool_parsers import PARSERS, SPECIAL_TOKEN_PARSERS
from engine.sampling_params import show_value
from engine.structured_output import StructuredOutput
from transport.chat_wire import DEFAULT_CHAT_OPTIONS, ChatTemplateOptions
from transport.messages import ToolSpec

NOT_GIVEN = msgspec.Raw()
_NO_PARAMETERS = b'{"type":"object","properties":{},"additionalProperties":false}'  # a function of no arguments


class FunctionIn(msgspec.Struct, kw_only=True):
    name: str
    description: str | None = None
    parameters: msgspec.Raw = NOT_GIVEN  # the client's JSON schema text, never decoded here
    strict: bool | None = None  # accepted: a forced call follows the schema either way


class ToolIn(msgspec.Struct, kw_only=True):
    type: str
    function: FunctionIn


class ChoiceFunction(msgspec.Struct, kw_only=True):
    name: str


class NamedToolChoice(msgspec.Struct, kw_only=True):
    type: str
    function: ChoiceFunction


class _RequiredCall(msgspec.Struct):
    name: str
    parameters: msgspec.Raw


_REQUIRED_DECODER = msgspec.json.Decoder(list[_RequiredCall])
Call = tuple[str, str]  # (function name, arguments as JSON text)


@dataclass(frozen=True, slots=True)
class ToolPlan:
    """choice: "none", "auto", "required" or "named" (then ``named`` is the function); parser: how "auto" reads the
    model's calls (gateway/tool_parsers.py)."""

    choice: str
    specs: tuple[ToolSpec, ...]
    named: str | None = None
    parallel: bool = True
    parser: str = "hermes"

    @property
    def prompt_tools(self) -> list[ToolSpec] | None:
        """The tools the prompt shows (none for "none")."""
        return None if self.choice == "none" else list(self.specs)

    @property
    def parses(self) -> bool:
        """Whether the reply is read for calls."""
        return self.choice != "none"

    def constraint(self) -> StructuredOutput | None:
        """The structured output a forced call needs (None for "none" and "auto")."""
        if self.choice == "named":
            spec = next(s for s in self.specs if s.name == self.named)
            return StructuredOutput(json=spec.parameters or _NO_PARAMETERS.decode(), disable_any_whitespace=True)
        if self.choice != "required":
            return None
        items = [
            {
                "properties": {
                    "name": {"type": "string", "enum": [s.name]},
                    "parameters": msgspec.Raw((s.parameters or _NO_PARAMETERS.decode()).encode()),
                },
                "required": ["name", "parameters"],
                "additionalProperties": False,
            }
            for s in self.specs
        ]
        schema = {"type": "array", "minItems": 1, "items": {"type": "object", "anyOf": items}}
        if not self.parallel:
            schema["maxItems"] = 1
        return StructuredOutput(json=msgspec.json.encode(schema).decode(), disable_any_whitespace=True)

    def extract(self, text: str) -> tuple[str | None, list[Call]]:
        """(content, calls) of a whole reply; text that holds no call is all content."""
        if self.choice == "named":
            return None, [(self.named, text)]
        if self.choice == "required":
            try:
                calls = [(c.name, bytes(c.parameters).decode()) for c in _REQUIRED_DECODER.decode(text)]
            except (msgspec.DecodeError, RecursionError):  # cut short by max_tokens
                return text, []
            return None, calls
        if self.choice == "auto":
            parsed = PARSERS[self.parser].parse(text)
            if parsed is not None:
                content, calls = parsed
                return content, calls if self.parallel else calls[:1]
        return text, []

    def skip_special_tokens(self, asked: bool | None) -> bool:
        """SamplingParams.skip_special_tokens for a request that asked ``asked`` (None: said nothing): False where
        "auto" reads a format whose marker is a special token (mistral's [TOOL_CALLS]), as vLLM's parser adjusts
        the request, unless the client asked; else as asked (True when it said nothing)."""
        if asked is None and self.choice == "auto" and self.parser in SPECIAL_TOKEN_PARSERS:
            return False
        return asked is not False

    def finish_reason(self, reason: str, called: bool) -> str:
        """OpenAI's: "tool_calls" when the model stopped to call (a forced named call stays "stop")."""
        return "tool_calls" if called and reason == "stop" and self.choice != "named" else reason


def tool_plan_of(req, *, parser: str | None) -> ToolPlan | None:
    """The plan of a request with ``tools``, ``tool_choice`` and ``parallel_tool_calls`` (ChatCompletionRequest's,
    typed by the classes here), or None without tools; FrontendError naming the field at fault."""
    choice = req.tool_choice
    if not req.tools:
        if choice is not None and choice != "none":
            raise invalid_param("tool_choice", "is only allowed when tools are given")
        return None
    named = (choice.type, choice.function.name) if isinstance(choice, NamedToolChoice) else None
    parallel = req.parallel_tool_calls is not False
    return plan_for(tool_specs(req.tools), choice, named, parallel=parallel, parser=parser)


def in_parser_format(chat: ChatTemplateOptions | None, parser: str | None) -> ChatTemplateOptions | None:
    """``chat`` (the request's template options; None: the defaults) asking a template that cannot show tools to have
    them written in the format ``parser`` reads (backends/tool_prompt_formats.py; None, no parser: Hermes), so the
    model is told to write calls the way the gateway reads them."""
    tool_format = parser or DEFAULT_TOOL_FORMAT
    if tool_format == (chat or DEFAULT_CHAT_OPTIONS).tool_format:
        return chat
    return msgspec.structs.replace(chat or DEFAULT_CHAT_OPTIONS, tool_format=tool_format)


def plan_for(
    specs: tuple[ToolSpec, ...], choice, named: tuple[str, str | None] | None, *, parallel: bool, parser: str | None
) -> ToolPlan:
    """The plan of a ``tool_choice``: a named function (``named``: its type and name, OpenAI's two shapes of it), else
    "none", "auto" (also for None) or "required"; FrontendError naming ``tool_choice`` when it is none of these."""
    if named is not None:
        kind, name = named
        if kind != "function":
            raise invalid_param("tool_choice", f"type must be 'function', got {show_value(kind)}")
        if all(s.name != name for s in specs):
            raise invalid_param("tool_choice", f"names no tool given: {show_value(name)}")
        return ToolPlan("named", specs, named=name, parallel=parallel)
    choice = "auto" if choice is None else choice
    if choice not in ("none", "auto", "required"):
        message = f"must be 'none', 'auto', 'required' or a named function, got {show_value(choice)}"
        raise invalid_param("tool_choice", message)
    if choice == "auto" and parser is None:
        raise invalid_param("tool_choice", '"auto" needs a tool-call parser, and this gateway has none configured')
    return ToolPlan(choice, specs, parallel=parallel, parser=parser or "hermes")


def tool_specs(tools: list[ToolIn]) -> tuple[ToolSpec, ...]:
    """The tools as the wire carries them; FrontendError naming what is wrong (backends/hermes_tools.check_tools)."""
    if len(tools) > MAX_TOOLS:
        raise invalid_param("tools", f"at most {MAX_TOOLS} tools may be given, got {len(tools)}")
    specs = tuple(_spec(i, t) for i, t in enumerate(tools))
    try:
        check_tools(list(specs))
    except ValueError as error:
        raise invalid_param("tools", str(error)) from None
    return specs


def call_objects(calls: list[Call], *, streamed: bool = False) -> list[dict]:
    """OpenAI's ``tool_calls`` entries, each with a new id (and its ``index``, streamed)."""
    out = []
    for i, (name, arguments) in enumerate(calls):
        entry = {"id": new_call_id(), "type": "function", "function": {"name": name, "arguments": arguments}}
        out.append({"index": i, **entry} if streamed else entry)
    return out


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


@dataclass(slots=True)
class ToolStream:
    """One streamed choice's deltas under a plan: ``feed`` each chunk's text, ``finish`` at its end."""

    plan: ToolPlan
    pending: str = ""  # text not yet sent
    in_call: bool = False  # "auto": a call has begun
    called: bool = False
    sent: bool = False  # "auto": content has gone out (the reply's beginning is behind)

    def feed(self, text: str) -> list[dict]:
        if not text:
            return []
        if self.plan.choice == "named":
            if not self.called:
                self.called = True
                function = {"name": self.plan.named, "arguments": text}
                return [{"tool_calls": [{"index": 0, "id": new_call_id(), "type": "function", "function": function}]}]
            return [{"tool_calls": [{"index": 0, "function": {"arguments": text}}]}]
        self.pending += text
        if self.plan.choice != "auto" or self.in_call:
            return []
        parser = PARSERS[self.plan.parser]
        start = parser.start(self.pending, not self.sent)
        if start >= 0:
            self.in_call = True
            sent, self.pending = self.pending[:start], self.pending[start:]
            if not self.sent and not sent.strip():
                sent = ""  # blank before calls that open the reply: the whole reply has no content either
        else:
            keep = parser.held_back(self.pending, not self.sent)
            sent, self.pending = self.pending[: len(self.pending) - keep], self.pending[len(self.pending) - keep :]
        self.sent = self.sent or bool(sent)
        return [{"content": sent}] if sent else []

    def finish(self) -> list[dict]:
        if self.plan.choice == "named":
            if self.called:
                return []
            self.called = True  # nothing was generated: the call with empty arguments
            return [{"tool_calls": call_objects([(self.plan.named, "")], streamed=True)}]
        text, self.pending = self.pending, ""
        content, calls = self.plan.extract(text) if (self.in_call or self.plan.choice == "required") else (text, [])
        deltas = [{"content": content}] if content else []
        if calls:
            self.called = True
            deltas.append({"tool_calls": call_objects(calls, streamed=True)})
        return deltas


def _spec(index: int, tool: ToolIn) -> ToolSpec:
    if tool.type != "function":
        raise invalid_param(f"tools[{index}].type", f"must be 'function', got {show_value(tool.type)}")
    parameters = ""
    if tool.function.parameters and bytes(tool.function.parameters) != b"null":
        data = bytes(tool.function.parameters)
        if data.lstrip()[:1] != b"{":
            raise invalid_param(f"tools[{index}].function.parameters", "must be a JSON schema object")
        parameters = data.decode("utf-8", errors="replace")
    return ToolSpec(name=tool.function.name, description=tool.function.description or "", parameters=parameters)
