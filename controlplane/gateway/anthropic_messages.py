"""Anthropic's Messages API (``POST /v1/messages``) over the same engine requests as a chat completion.

What clients built on Anthropic's SDK send (SGLang serves the same route: python/sglang/srt/entrypoints/anthropic/
serving_messages.py):

    request   model, max_tokens (required), messages (user/assistant; content a string or blocks: text, tool_use,
              tool_result), system (a string or text blocks), stop_sequences, temperature, top_p, top_k (older
              clients send them; the SDK of late 2026 only as extra fields), stream,
              tools ({name, description, input_schema}), tool_choice ({type: auto | any | tool | none, name,
              disable_parallel_tool_use}); metadata and other fields are ignored, image and document blocks refused
    reply     {id: msg_…, type: message, role: assistant, model, content: [text and tool_use blocks], stop_reason:
              end_turn | max_tokens | stop_sequence | tool_use, stop_sequence, usage: {input_tokens, output_tokens,
              cache_read_input_tokens}}
    stream    event: message_start, content_block_start, content_block_delta (text_delta, input_json_delta),
              content_block_stop, message_delta (stop_reason, usage), message_stop; an error as event: error
    errors    {"type": "error", "error": {"type": "invalid_request_error" | …, "message": …}}
    count     POST /v1/messages/count_tokens: model, messages, system, tools, tool_choice → {input_tokens}, the
              prompt's tokens as a message request with them renders it (``parse_count_tokens``)
    prefill   a final assistant message is the start of the reply, which the model continues (Anthropic's
              "prefill"; vLLM's continue_final_message, backends/chat_render.py); the reply holds only what follows.
              Anthropic's rule: its text may not end in whitespace (400)

Tools map onto OpenAI's tool calling (gateway/tool_calls.py): ``auto`` → "auto" (the Hermes parser), ``any`` →
"required", ``tool`` → a named function, ``none`` → "none"; a tool_use block is an assistant's ToolCall, a
tool_result a "tool" message answering it. The intake renders them with the model's chat template.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping

import msgspec

from controlplane.cells import RequestPriority
from controlplane.frontend import FrontendError, invalid_param
from controlplane.gateway.errors import ERROR_KINDS
from controlplane.gateway.openai_schema import GenerateArgs, decode_body
from controlplane.gateway.reasoning_parsers import ReasoningSplit, split_reasoning
from controlplane.gateway.sampling_defaults import with_sampling_defaults
from controlplane.gateway.tool_calls import (
    NOT_GIVEN,
    FunctionIn,
    ToolPlan,
    ToolStream,
    in_parser_format,
    new_call_id,
    tool_specs,
)
from controlplane.gateway.tool_calls import ToolIn as OpenAIToolIn
from engine.sampling_params import SamplingParams, SamplingParamsError, show_value
from transport.chat_wire import DEFAULT_CHAT_OPTIONS, ChatMessage, ChatTemplateOptions, ToolCall, ToolSpec
from transport.messages import ErrorCode, TokenChunk

_STOP_REASONS = {"length": "max_tokens"}
PREFILL = ChatTemplateOptions(add_generation_prompt=False, continue_final_message=True)
PREFILL_WHITESPACE = "final assistant content cannot end with trailing whitespace"  # Anthropic's message
_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error"}  # fmt: skip


class ContentBlock(msgspec.Struct, kw_only=True):
    type: str
    text: str | None = None
    id: str | None = None  # tool_use
    name: str | None = None  # tool_use
    input: msgspec.Raw = NOT_GIVEN  # tool_use: the call's arguments, a JSON object
    tool_use_id: str | None = None  # tool_result
    content: str | list[ContentBlock] | None = None  # tool_result
    is_error: bool | None = None  # tool_result


class MessageIn(msgspec.Struct, kw_only=True):
    role: str
    content: str | list[ContentBlock]


class ToolIn(msgspec.Struct, kw_only=True):
    name: str
    description: str | None = None
    input_schema: msgspec.Raw = NOT_GIVEN


class ToolChoiceIn(msgspec.Struct, kw_only=True):
    type: str
    name: str | None = None
    disable_parallel_tool_use: bool | None = None


class CountTokensRequest(msgspec.Struct, kw_only=True):
    """``POST /v1/messages/count_tokens``: the prompt's fields of a message request."""

    model: str | None = None
    messages: list[MessageIn]
    system: str | list[ContentBlock] | None = None
    tools: list[ToolIn] | None = None
    tool_choice: ToolChoiceIn | None = None


class ThinkingIn(msgspec.Struct, kw_only=True):
    type: str  # "enabled" | "adaptive" | "disabled" (Anthropic's extended thinking)
    # "enabled": the thinking's budget (>= 1024 and < max_tokens, Anthropic's bounds), forced there by the engine when
    # the gateway has a reasoning parser (vLLM's thinking_token_budget, engine/thinking_budget.py); else not enforced
    budget_tokens: int | None = None


class MessagesRequest(msgspec.Struct, kw_only=True):
    model: str | None = None
    max_tokens: int
    messages: list[MessageIn]
    system: str | list[ContentBlock] | None = None
    stop_sequences: list[str] | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    stream: bool | None = None
    tools: list[ToolIn] | None = None
    tool_choice: ToolChoiceIn | None = None
    thinking: ThinkingIn | None = None  # reaches the chat template as ``enable_thinking`` (a model that can switch)
    # vLLM's extension, as the OpenAI routes take it: lower runs earlier within the traffic class (a message batch's
    # requests get the batch priority: they run after live ones, gateway/batch_runner.py)
    priority: RequestPriority | None = None


MIN_THINKING_BUDGET = 1024  # Anthropic's least budget_tokens
_DECODER = msgspec.json.Decoder(MessagesRequest)
_COUNT_DECODER = msgspec.json.Decoder(CountTokensRequest)


def parse_messages(
    body: bytes, tool_call_parser: str | None = "hermes", defaults: Mapping | None = None, reasoning: bool = False
) -> GenerateArgs:
    """The request as the gateway's GenerateArgs; FrontendError naming the field at fault. ``tool_call_parser``
    reads an ``auto`` reply's calls (gateway/tool_parsers.py; None: the Hermes one, as before it could be set);
    ``defaults`` the server's sampling defaults for the fields it leaves out (gateway/sampling_defaults.py);
    ``reasoning``: the gateway splits thinking from the answer, so an enabled thinking's ``budget_tokens`` becomes the
    engine's ``thinking_token_budget`` (else it is checked and not enforced)."""
    req = with_sampling_defaults(decode_body(_DECODER, body), defaults)
    messages = _conversation(req)
    chat = in_parser_format(prefill_options(messages, len(req.messages) - 1), tool_call_parser)
    if req.thinking is not None:  # Anthropic's switch as the template's (Qwen3's enable_thinking)
        if req.thinking.type not in ("enabled", "adaptive", "disabled"):
            message = f"must be 'enabled', 'adaptive' or 'disabled', got {show_value(req.thinking.type)}"
            raise invalid_param("thinking.type", message)
        kwargs = {"enable_thinking": req.thinking.type != "disabled"}
        chat = msgspec.structs.replace(chat or DEFAULT_CHAT_OPTIONS, template_kwargs=kwargs)
    budget = _thinking_budget(req)
    plan = _tool_plan(req, tool_call_parser or "hermes")
    forced = plan.constraint() if plan is not None else None
    if forced is not None and budget is not None:  # Anthropic's rule too: a forced tool use leaves no room to think
        raise invalid_param("tool_choice", "a forced tool use cannot be combined with thinking")
    try:
        sampling = SamplingParams(
            temperature=1.0 if req.temperature is None else req.temperature,
            top_p=1.0 if req.top_p is None else req.top_p,
            top_k=req.top_k or 0,
            max_tokens=req.max_tokens,
            stop=tuple(req.stop_sequences or ()),
            structured_outputs=forced,
            skip_special_tokens=True if plan is None else plan.skip_special_tokens(None),
            thinking_token_budget=budget if reasoning else None,
        )
    except SamplingParamsError as exc:
        param = {"stop": "stop_sequences", "structured_outputs": "tools"}.get(exc.field, exc.field)
        raise invalid_param(param, str(exc).removeprefix(f"{exc.field}: ")) from None
    return GenerateArgs(
        model=req.model,
        sampling=sampling,
        messages=messages,
        stream=bool(req.stream),
        tool_plan=plan,
        structured_param="tools" if forced is not None else None,
        chat=chat,
        priority=req.priority or 0,
    )


def _thinking_budget(req: MessagesRequest) -> int | None:
    """An enabled thinking's ``budget_tokens`` (Anthropic's bounds: at least 1024, under ``max_tokens``), else None."""
    thinking = req.thinking
    if thinking is None or thinking.type != "enabled" or thinking.budget_tokens is None:
        return None
    budget = thinking.budget_tokens
    if budget < MIN_THINKING_BUDGET:
        raise invalid_param("thinking.budget_tokens", f"must be at least {MIN_THINKING_BUDGET}, got {budget}")
    if req.max_tokens <= budget:
        message = f"must be greater than thinking.budget_tokens ({budget}), got {req.max_tokens}"
        raise invalid_param("max_tokens", message)
    return budget


def parse_count_tokens(
    body: bytes, tool_call_parser: str | None = "hermes"
) -> tuple[str | None, list[ChatMessage], list[ToolSpec] | None, ChatTemplateOptions | None]:
    """A count_tokens request's model, chat messages, the tools its prompt shows and how it is rendered (a prefill;
    tools in ``tool_call_parser``'s format, as a message request's); FrontendError naming the field at fault."""
    req = decode_body(_COUNT_DECODER, body)
    messages = _conversation(req)
    plan = _tool_plan(req)
    return (
        req.model,
        messages,
        plan.prompt_tools if plan is not None else None,
        in_parser_format(prefill_options(messages, len(req.messages) - 1), tool_call_parser),
    )


def prefill_options(messages: list[ChatMessage], last: int) -> ChatTemplateOptions | None:
    """A conversation ending in an assistant's text is a prefilled reply: the model continues that text (None: a
    new reply; an empty one is a new reply too, backends/chat_render.py). Its text may not end in whitespace,
    Anthropic's rule (a tokenizer would split the continuation there badly); ``last``: the request's index of that
    message, for the error."""
    final = messages[-1]
    if final.role != "assistant" or final.tool_calls:
        return None
    if final.content[-1:].isspace():
        raise invalid_param(f"messages[{last}].content", PREFILL_WHITESPACE)
    return PREFILL


def _conversation(req: MessagesRequest | CountTokensRequest) -> list[ChatMessage]:
    if not req.messages:
        raise invalid_param("messages", "must be a non-empty list of messages")
    messages = [ChatMessage("system", _text(req.system, "system"))] if req.system else []
    for i, m in enumerate(req.messages):
        messages += _messages_of(i, m)
    return messages


def _text(content: str | list[ContentBlock] | None, where: str) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    texts = []
    for j, block in enumerate(content):
        if block.type != "text" or block.text is None:
            raise invalid_param(f"{where}[{j}]", f"only text blocks are supported here, got {show_value(block.type)}")
        texts.append(block.text)
    return "\n".join(texts)


def _messages_of(index: int, m: MessageIn) -> list[ChatMessage]:
    """One Anthropic message as chat messages: its text and tool calls, then a "tool" message per tool_result."""
    where = f"messages[{index}]"
    if m.role not in ("user", "assistant"):
        raise invalid_param(f"{where}.role", f"must be 'user' or 'assistant', got {show_value(m.role)}")
    if isinstance(m.content, str):
        return [ChatMessage(m.role, m.content)]
    texts, calls, results = [], [], []
    for j, block in enumerate(m.content):
        at = f"{where}.content[{j}]"
        if block.type == "text" and block.text is not None:
            texts.append(block.text)
        elif block.type == "tool_use" and m.role == "assistant" and block.id and block.name:
            arguments = bytes(block.input).decode() if block.input and bytes(block.input) != b"null" else "{}"
            calls.append(ToolCall(block.id, block.name, arguments))
        elif block.type in ("thinking", "redacted_thinking") and m.role == "assistant":
            continue  # an earlier turn's thinking, sent back as Anthropic asks: the prompt shows the answers alone
        elif block.type == "tool_result" and m.role == "user" and block.tool_use_id:
            result = _text(block.content, f"{at}.content")
            results.append(ChatMessage("tool", result, tool_call_id=block.tool_use_id))
        else:
            message = f"a {show_value(block.type)} block is not supported in a {m.role} message (or misses fields)"
            raise invalid_param(at, message)
    own = [ChatMessage(m.role, "\n".join(texts), tool_calls=tuple(calls))] if texts or calls else []
    return results + own


def _tool_plan(req: MessagesRequest | CountTokensRequest, parser: str = "hermes") -> ToolPlan | None:
    choice = req.tool_choice
    if not req.tools:
        if choice is not None and choice.type != "none":
            raise invalid_param("tool_choice", "is only allowed when tools are given")
        return None
    functions = [FunctionIn(name=t.name, description=t.description, parameters=t.input_schema) for t in req.tools]
    specs = tool_specs([OpenAIToolIn(type="function", function=f) for f in functions])
    kind = "auto" if choice is None else choice.type
    parallel = not (choice is not None and choice.disable_parallel_tool_use)
    if kind == "tool":
        if choice.name is None or all(s.name != choice.name for s in specs):
            raise invalid_param("tool_choice", f"names no tool given: {show_value(choice.name)}")
        return ToolPlan("named", specs, named=choice.name, parallel=parallel)
    plans = {"auto": "auto", "any": "required", "none": "none"}
    if kind not in plans:
        raise invalid_param("tool_choice", f"type must be 'auto', 'any', 'tool' or 'none', got {show_value(kind)}")
    return ToolPlan(plans[kind], specs, parallel=parallel, parser=parser)


def error_body(err: FrontendError) -> dict:
    """Anthropic's error shape for a refusal or a failure."""
    return {"type": "error", "error": {"type": error_type(ERROR_KINDS[err.code].status), "message": err.message}}


def error_type(status: int) -> str:
    """Anthropic's error ``type`` for an HTTP status."""
    return _ERROR_TYPES.get(status, "overloaded_error" if status == 503 else "api_error")


class MessagesReply:
    """One request's reply, built from its TokenChunks: ``add`` each, then ``full_object()``; or, streamed,
    ``start_events(first)``, ``chunk_events(c)`` for each, ``failure_events(err)`` on a failure (SSE bytes)."""

    def __init__(self, model: str, plan: ToolPlan | None, reasoning: bool = False) -> None:
        """reasoning: the reply is split into thinking and text (gateway/reasoning_parsers.py): a ``thinking`` block
        first, its ``signature`` empty (this server signs nothing), as proxies of local models answer it."""
        self.id = f"msg_{uuid.uuid4().hex[:24]}"
        self.model = model
        self.plan = plan if plan is not None and plan.parses else None
        self.text_parts: list[str] = []
        self.num_prompt_tokens = self.num_cached_tokens = self.num_output_tokens = 0
        self.finish_reason: str | None = None
        self.stop_reason: int | str | None = None
        self._stream = ToolStream(self.plan) if self.plan is not None else None
        self._block: str | None = None  # the streamed content block open now: "text" or "tool_use"
        self._num_blocks = 0
        self._called = False
        self._reasoning = ReasoningSplit() if reasoning else None

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    def add(self, chunk: TokenChunk) -> None:
        self.num_prompt_tokens = max(self.num_prompt_tokens, chunk.num_prompt_tokens)
        self.num_cached_tokens = max(self.num_cached_tokens, chunk.num_cached_tokens)
        self.num_output_tokens = max(self.num_output_tokens, chunk.num_output_tokens)
        self.text_parts.append(chunk.text)
        if chunk.finished:
            if chunk.finish_reason == "abort":
                raise FrontendError(ErrorCode.CANCELLED, "The request was aborted by the serving node")
            self.finish_reason, self.stop_reason = chunk.finish_reason or "stop", chunk.stop_reason

    def full_object(self) -> dict:
        text = "".join(self.text_parts)
        content: list[dict] = []
        calls = []
        if self._reasoning is not None:
            thought, answer = split_reasoning(text)
            text = answer or ""
            if thought:
                content.append({"type": "thinking", "thinking": thought, "signature": ""})
        if self.plan is not None:
            text, calls = self.plan.extract(text)
        if text:
            content.append({"type": "text", "text": text})
        for name, arguments in calls:
            content.append({"type": "tool_use", "id": _tool_use_id(), "name": name, "input": _input(arguments)})
        return {**self._head(), "content": content, **self._stop(bool(calls)), "usage": self._usage()}

    def start_events(self, first: TokenChunk) -> list[bytes]:
        self.num_prompt_tokens = first.num_prompt_tokens  # message_start's input_tokens
        message = {**self._head(), "content": [], "stop_reason": None, "stop_sequence": None}
        message["usage"] = {**self._usage(), "output_tokens": 0}
        return [_event("message_start", {"type": "message_start", "message": message})]

    def chunk_events(self, chunk: TokenChunk) -> list[bytes]:
        self.add(chunk)
        text, deltas = chunk.text, []
        if self._reasoning is not None:
            thought, text = self._reasoning.feed(text, last=self.finished)
            deltas = [{"reasoning": thought}] if thought else []
        if self._stream is None:
            deltas += [{"content": text}] if text else []
        else:
            deltas += self._stream.feed(text) + (self._stream.finish() if self.finished else [])
        events = [e for delta in deltas for e in self._delta_events(delta)]
        if self.finished:
            events += self._close_block()
            stop = self._stop(self._called)
            events.append(_event("message_delta", {"type": "message_delta", "delta": stop,
                                                   "usage": {"output_tokens": self.num_output_tokens}}))  # fmt: skip
            events.append(_event("message_stop", {"type": "message_stop"}))
        return events

    def _delta_events(self, delta: dict) -> list[bytes]:
        events: list[bytes] = []
        if delta.get("reasoning"):
            if self._block != "thinking":
                block = {"type": "thinking", "thinking": "", "signature": ""}
                events += self._close_block() + self._open_block(block, "thinking")
            events.append(self._block_delta({"type": "thinking_delta", "thinking": delta["reasoning"]}))
        if delta.get("content"):
            if self._block != "text":
                events += self._close_block() + self._open_block({"type": "text", "text": ""}, "text")
            events.append(self._block_delta({"type": "text_delta", "text": delta["content"]}))
        for call in delta.get("tool_calls") or ():
            function = call["function"]
            if "id" in call:  # a new call
                self._called = True
                block = {"type": "tool_use", "id": _tool_use_id(), "name": function["name"], "input": {}}
                events += self._close_block() + self._open_block(block, "tool_use")
            if function.get("arguments"):
                events.append(self._block_delta({"type": "input_json_delta", "partial_json": function["arguments"]}))
        return events

    def _open_block(self, block: dict, kind: str) -> list[bytes]:
        self._block = kind
        start = {"type": "content_block_start", "index": self._num_blocks, "content_block": block}
        return [_event("content_block_start", start)]

    def _block_delta(self, delta: dict) -> bytes:
        return _event("content_block_delta", {"type": "content_block_delta", "index": self._num_blocks, "delta": delta})

    def _close_block(self) -> list[bytes]:
        if self._block is None:
            return []
        self._block = None
        self._num_blocks += 1
        return [_event("content_block_stop", {"type": "content_block_stop", "index": self._num_blocks - 1})]

    def _head(self) -> dict:
        return {"id": self.id, "type": "message", "role": "assistant", "model": self.model}

    def _stop(self, called: bool) -> dict:
        reason = self.finish_reason or "stop"
        if reason == "stop" and isinstance(self.stop_reason, str):
            return {"stop_reason": "stop_sequence", "stop_sequence": self.stop_reason}
        if called and reason == "stop":
            return {"stop_reason": "tool_use", "stop_sequence": None}
        return {"stop_reason": _STOP_REASONS.get(reason, "end_turn"), "stop_sequence": None}

    def _usage(self) -> dict:
        cached = min(self.num_cached_tokens, self.num_prompt_tokens)
        return {"input_tokens": self.num_prompt_tokens - cached, "output_tokens": self.num_output_tokens,
                "cache_read_input_tokens": cached, "cache_creation_input_tokens": 0}  # fmt: skip

    def failure_events(self, err: FrontendError) -> list[bytes]:
        return [error_event(err)]


def error_event(err: FrontendError) -> bytes:
    return _event("error", error_body(err))


def _event(name: str, payload: dict) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + msgspec.json.encode(payload) + b"\n\n"


def _tool_use_id() -> str:
    return "toolu_" + new_call_id().removeprefix("call_")


def _input(arguments: str) -> object:
    try:
        value = msgspec.json.decode(arguments)
    except (msgspec.DecodeError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}
