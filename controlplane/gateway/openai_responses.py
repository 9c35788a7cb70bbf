"""OpenAI's Responses API (``POST /v1/responses``) over the same engine requests as a chat completion.

The ``openai`` SDK's ``client.responses.create`` / ``.stream`` and the agent frameworks built on it send this; vLLM
serves the same route (vllm/entrypoints/openai/serving_responses.py, protocol.py ``ResponsesRequest``, v0.11):

    request   model, input (a string, or items: messages with string or part content — input_text, output_text —,
              function_call, function_call_output), instructions, max_output_tokens, temperature, top_p, top_k
              (vLLM's extension), stream, store, previous_response_id, tools (flat function tools: {type: function,
              name, description, parameters, strict}), tool_choice ("none" | "auto" | "required" | {type: function,
              name}), parallel_tool_calls, text.format (text | json_object | json_schema {name, schema, strict}),
              metadata and user (echoed), top_logprobs with include ["message.output_text.logprobs"] (each
              output_text part's and delta's ``logprobs``, as the chat API's), background (with store: answered at
              once, run by gateway/background_responses.py); other fields are ignored; image and file parts are
              refused by name
    reply     {id: resp_…, object: response, created_at, status: completed | incomplete, incomplete_details, output:
              [a message item {content: [output_text]} and function_call items {call_id, name, arguments}], usage:
              {input_tokens, input_tokens_details.cached_tokens, output_tokens, total_tokens}, and the request's
              settings echoed}
    stream    named events, each with its ``sequence_number``: response.created, response.in_progress,
              response.output_item.added, response.content_part.added, response.output_text.delta / .done,
              response.content_part.done, response.function_call_arguments.delta / .done, response.output_item.done,
              response.completed (or response.incomplete); a failure after the first event is an ``error`` event and
              response.failed

Tools map onto OpenAI's chat tool calling (gateway/tool_calls.py); a function_call item is an assistant's ToolCall, a
function_call_output a "tool" message answering it, as the intake renders them. A stored response (``store``, the
default, as OpenAI's) keeps its conversation in the gateway's ResponseStore (gateway/response_store.py), so a later
request's ``previous_response_id`` continues it: that response's input and output come before the new input, its
``instructions`` do not (OpenAI's rule).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import msgspec

from controlplane.cells import RequestPriority
from controlplane.frontend import FrontendError, invalid_param
from controlplane.gateway import service_tier as service_tiers
from controlplane.gateway.errors import ERROR_KINDS
from controlplane.gateway.openai_schema import GenerateArgs, decode_body
from controlplane.gateway.structured_fields import NOT_GIVEN, schema_text
from controlplane.gateway.token_text import TokenText, clamp_logprob
from controlplane.gateway.tool_calls import FunctionIn, ToolIn, ToolPlan, ToolStream, plan_for, tool_specs
from engine.sampling_params import MAX_LOGPROBS, SamplingParams, SamplingParamsError, show_value
from engine.structured_output import StructuredOutput, StructuredOutputError
from transport.chat_wire import ChatMessage, ToolCall
from transport.messages import ErrorCode, TokenChunk

_ROLES = {"user": "user", "system": "system", "developer": "system", "assistant": "assistant"}
_TEXT_PARTS = ("input_text", "output_text", "text")
_LOGPROBS_INCLUDE = "message.output_text.logprobs"


class InputPart(msgspec.Struct, kw_only=True):
    type: str
    text: str | None = None


class InputItem(msgspec.Struct, kw_only=True):
    type: str | None = None  # "message" when absent (an EasyInputMessage: role and content only)
    role: str | None = None
    content: str | list[InputPart] | None = None
    call_id: str | None = None  # function_call, function_call_output
    name: str | None = None  # function_call
    arguments: str | None = None  # function_call
    output: str | list[InputPart] | None = None  # function_call_output


class FunctionToolIn(msgspec.Struct, kw_only=True):
    type: str
    name: str | None = None
    description: str | None = None
    parameters: msgspec.Raw = NOT_GIVEN
    strict: bool | None = None


class ToolChoiceIn(msgspec.Struct, kw_only=True):
    type: str
    name: str | None = None


class TextFormatIn(msgspec.Struct, kw_only=True):
    type: str
    name: str | None = None
    schema: msgspec.Raw = NOT_GIVEN
    strict: bool | None = None
    description: str | None = None


class TextIn(msgspec.Struct, kw_only=True):
    format: TextFormatIn | None = None


class ResponsesRequest(msgspec.Struct, kw_only=True):
    model: str | None = None
    input: str | list[InputItem]
    instructions: str | None = None
    max_output_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None  # extension (as in vLLM)
    stream: bool | None = None
    store: bool | None = None
    previous_response_id: str | None = None
    tools: list[FunctionToolIn] | None = None
    tool_choice: str | ToolChoiceIn | None = None
    parallel_tool_calls: bool | None = None
    text: TextIn | None = None
    metadata: dict[str, str] | None = None
    user: str | None = None
    background: bool | None = None
    include: list[str] | None = None
    top_logprobs: int | None = None  # with include ["message.output_text.logprobs"]: alternatives per token
    traffic_class: str | None = None  # extension: the request's traffic class (controlplane/cells.py)
    priority: RequestPriority | None = None  # extension (as in vLLM): lower runs earlier, within its traffic class
    service_tier: str | None = None  # OpenAI's: a priority inside the request's class (gateway/service_tier.py)
    cache_salt: str | None = None  # extension (as in vLLM): only requests of the same salt share the prefix cache


_DECODER = msgspec.json.Decoder(ResponsesRequest)
Conversation = tuple[ChatMessage, ...]


@dataclass(frozen=True, slots=True)
class ResponsesArgs:
    """A parsed request: what the engine gets (``generate``), what the reply echoes, what a stored response keeps."""

    generate: GenerateArgs
    settings: dict  # the request's settings, as the reply echoes them
    conversation: Conversation  # the input (after the previous response's conversation), without the instructions
    store: bool
    num_input: int = 0  # this request's own input messages: the conversation's last ones
    background: bool = False  # answered at once, run by gateway/background_responses.py

    @property
    def own_input(self) -> Conversation:
        return self.conversation[len(self.conversation) - self.num_input :]


def parse_responses(
    body: bytes,
    *,
    default_max_tokens: int,
    tool_call_parser: str | None,
    previous: Callable[[str], Conversation | str | None],
) -> ResponsesArgs:
    """The request as ResponsesArgs; ``previous(id)`` is a stored response's conversation (None: unknown; a string:
    the status of one that did not finish). FrontendError naming the field at fault."""
    req = decode_body(_DECODER, body)
    if req.background and req.store is False:
        raise invalid_param("background", "requires store: a background response is read back by its id")
    if req.top_logprobs is not None and not 0 <= req.top_logprobs <= MAX_LOGPROBS:
        raise invalid_param("top_logprobs", f"must be in [0, {MAX_LOGPROBS}], got {show_value(req.top_logprobs)}")
    conversation: Conversation = ()
    if req.previous_response_id is not None:
        found = previous(req.previous_response_id)
        if found is None:
            message = f"no stored response has the id {show_value(req.previous_response_id)}"
            raise invalid_param("previous_response_id", message)
        if isinstance(found, str):  # a stored response that did not finish (still running, failed, cancelled)
            message = f"the response {show_value(req.previous_response_id)} is {found}: only a finished one goes on"
            raise invalid_param("previous_response_id", message)
        conversation = found
    own_input = _input_messages(req.input)
    conversation += own_input
    if not conversation:
        raise invalid_param("input", "must hold at least one message")
    plan = _tool_plan(req, tool_call_parser)
    structured, param = _structured(req, plan)
    try:
        sampling = SamplingParams(
            temperature=1.0 if req.temperature is None else req.temperature,
            top_p=1.0 if req.top_p is None else req.top_p,
            top_k=req.top_k or 0,
            max_tokens=default_max_tokens if req.max_output_tokens is None else req.max_output_tokens,
            structured_outputs=structured,
            cache_salt=req.cache_salt,
            logprobs=(req.top_logprobs or 0) if _LOGPROBS_INCLUDE in (req.include or ()) else None,
        )
    except SamplingParamsError as exc:
        name = {"max_tokens": "max_output_tokens", "structured_outputs": param, "logprobs": "top_logprobs"}.get(
            exc.field, exc.field
        )
        raise invalid_param(name, str(exc).removeprefix(f"{exc.field}: ")) from None
    messages = [ChatMessage("system", req.instructions)] if req.instructions else []
    priority, service_tier = service_tiers.resolve(req.priority, req.service_tier)
    generate = GenerateArgs(
        model=req.model,
        sampling=sampling,
        messages=messages + list(conversation),
        stream=bool(req.stream),
        tool_plan=plan,
        structured_param=param,
        traffic_class=req.traffic_class,
        priority=priority,
        service_tier=service_tier,
    )
    settings = _settings(req, sampling, service_tier)
    store = req.store is not False
    return ResponsesArgs(generate, settings, conversation, store, len(own_input), background=bool(req.background))


def _input_messages(items: str | list[InputItem]) -> Conversation:
    if isinstance(items, str):
        return (ChatMessage("user", items),)
    messages: list[ChatMessage] = []
    for i, item in enumerate(items):
        at = f"input[{i}]"
        kind = item.type or "message"
        if kind == "message":
            role = _ROLES.get(item.role or "")
            if role is None:
                roles = ", ".join(repr(r) for r in _ROLES)
                raise invalid_param(f"{at}.role", f"must be one of {roles}, got {show_value(item.role)}")
            messages.append(ChatMessage(role, _text(item.content, f"{at}.content")))
        elif kind == "function_call":
            if not (item.call_id and item.name and item.arguments is not None):
                raise invalid_param(at, "a function_call needs call_id, name and arguments")
            call = ToolCall(item.call_id, item.name, item.arguments)
            last = messages[-1] if messages else None
            if last is not None and last.role == "assistant" and last.tool_call_id is None:
                messages[-1] = msgspec.structs.replace(last, tool_calls=(*last.tool_calls, call))
            else:
                messages.append(ChatMessage("assistant", "", tool_calls=(call,)))
        elif kind == "function_call_output":
            if not item.call_id or item.output is None:
                raise invalid_param(at, "a function_call_output needs call_id and output")
            messages.append(ChatMessage("tool", _text(item.output, f"{at}.output"), tool_call_id=item.call_id))
        else:
            kinds = "'message', 'function_call' or 'function_call_output'"
            raise invalid_param(f"{at}.type", f"must be {kinds}, got {show_value(kind)}")
    return tuple(messages)


def _text(content: str | list[InputPart] | None, where: str) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    texts = []
    for j, part in enumerate(content):
        if part.type not in _TEXT_PARTS or part.text is None:
            raise invalid_param(f"{where}[{j}]", f"only text parts are supported, got {show_value(part.type)}")
        texts.append(part.text)
    return "".join(texts)


def _tool_plan(req: ResponsesRequest, parser: str | None) -> ToolPlan | None:
    choice = req.tool_choice
    if not req.tools:
        if choice is not None and choice != "none":
            raise invalid_param("tool_choice", "is only allowed when tools are given")
        return None
    for i, tool in enumerate(req.tools):
        if tool.type != "function" or not tool.name:
            raise invalid_param(f"tools[{i}]", f"only function tools with a name are supported, got {tool.type!r}")
    functions = [FunctionIn(name=t.name or "", description=t.description, parameters=t.parameters) for t in req.tools]
    specs = tool_specs([ToolIn(type="function", function=f) for f in functions])
    named = (choice.type, choice.name) if isinstance(choice, ToolChoiceIn) else None
    return plan_for(specs, choice, named, parallel=req.parallel_tool_calls is not False, parser=parser)


def _structured(req: ResponsesRequest, plan: ToolPlan | None) -> tuple[StructuredOutput | None, str | None]:
    """The constraint (a forced call's, or ``text.format``'s) and the field that asked for it."""
    forced = plan.constraint() if plan is not None else None
    fmt = req.text.format if req.text is not None else None
    if fmt is None or fmt.type == "text":
        return forced, "tool_choice" if forced is not None else None
    if forced is not None:
        raise invalid_param("text.format", "cannot ask for a format beside a forced tool call")
    if fmt.type == "json_object":
        spec = StructuredOutput(json_object=True)
    elif fmt.type == "json_schema":
        if not fmt.schema or bytes(fmt.schema) == b"null":
            raise invalid_param("text.format.schema", "is required with type 'json_schema'")
        spec = StructuredOutput(json=schema_text(fmt.schema, "text.format.schema"))
    else:
        raise invalid_param("text.format.type", f"must be 'text', 'json_object' or 'json_schema', got {fmt.type!r}")
    try:
        spec.check()
    except StructuredOutputError as error:
        raise invalid_param("text.format", str(error)) from None
    return spec, "text.format"


def _settings(req: ResponsesRequest, sampling: SamplingParams, service_tier: str | None) -> dict:
    """The request's settings as a Response object carries them (``service_tier``: the tier it is served at, if
    it named one)."""
    tools = [
        {"type": "function", "name": t.name, "description": t.description, "strict": bool(t.strict),
         "parameters": t.parameters if t.parameters and bytes(t.parameters) != b"null" else None}
        for t in req.tools or ()
    ]  # fmt: skip
    choice = req.tool_choice or "auto"
    fmt = req.text.format if req.text is not None else None
    text_format: dict = {"type": "text"}
    if fmt is not None and fmt.type != "text":
        text_format = {"type": fmt.type}
        if fmt.type == "json_schema":
            text_format.update(name=fmt.name or "response", schema=fmt.schema, strict=bool(fmt.strict))
    return {
        "background": bool(req.background),
        "instructions": req.instructions,
        "max_output_tokens": sampling.max_tokens,
        "metadata": req.metadata or {},
        "parallel_tool_calls": req.parallel_tool_calls is not False,
        "previous_response_id": req.previous_response_id,
        "store": req.store is not False,
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
        "text": {"format": text_format},
        "tool_choice": {"type": "function", "name": choice.name} if isinstance(choice, ToolChoiceIn) else choice,
        "tools": tools,
        "top_logprobs": req.top_logprobs or 0,
        **({"service_tier": service_tier} if service_tier is not None else {}),
        "truncation": "disabled",
        "user": req.user,
    }


def input_items(messages: Conversation) -> tuple[dict, ...]:
    """A request's input as the Responses API lists it (``GET /v1/responses/{id}/input_items``), each item with a new
    id: messages (``input_text`` parts; an assistant's ``output_text``), an assistant's calls as ``function_call``
    items, tool results as ``function_call_output`` items."""
    items: list[dict] = []
    for m in messages:
        if m.role == "tool":
            items.append({"type": "function_call_output", "id": _item_id("fco"), "call_id": m.tool_call_id,
                          "output": m.content, "status": "completed"})  # fmt: skip
            continue
        if m.content or not m.tool_calls:
            part = {"type": "output_text" if m.role == "assistant" else "input_text", "text": m.content}
            if m.role == "assistant":
                part["annotations"] = []
            items.append({"type": "message", "id": _item_id("msg"), "role": m.role, "status": "completed",
                          "content": [part]})  # fmt: skip
        for call in m.tool_calls:
            items.append({"type": "function_call", "id": _item_id("fc"), "call_id": call.id, "name": call.name,
                          "arguments": call.arguments, "status": "completed"})  # fmt: skip
    return tuple(items)


def _item_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:24]}"


class ResponsesReply:
    """One response, built from its TokenChunks: ``add`` each (it returns the SSE events they make), then
    ``full_object()``; streamed, ``start_events(first)`` before, ``failure_events(err)`` on a failure.
    ``on_done(object, conversation)`` is called once the response is complete (the store keeps it)."""

    def __init__(
        self,
        model: str,
        parsed: ResponsesArgs,
        on_done: Callable[[dict, Conversation], None] | None = None,
        names: TokenText | None = None,
    ) -> None:
        self.id = _item_id("resp")
        self.model = model
        self.parsed = parsed
        self.created_at = int(time.time())
        plan = parsed.generate.tool_plan
        self._stream = ToolStream(plan) if plan is not None and plan.parses else None
        self._on_done = on_done
        self.items: list[dict] = []  # the output items, in order
        self._open: dict | None = None  # the item being streamed now
        self._sequence = 0
        self.num_prompt_tokens = self.num_cached_tokens = self.num_output_tokens = 0
        self.finish_reason: str | None = None
        self.status: str | None = None  # set: what the object says instead (queued, cancelled, failed)
        self.error: dict | None = None  # a failed response's {code, message}
        self._names = names or TokenText(None)  # how logprobs name tokens (the gateway's tokenizer)
        self._logprobs: list[dict] = []  # the tokens' logprobs not yet given to a text delta

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    def add(self, chunk: TokenChunk) -> list[bytes]:
        self.num_prompt_tokens = max(self.num_prompt_tokens, chunk.num_prompt_tokens)
        self.num_cached_tokens = max(self.num_cached_tokens, chunk.num_cached_tokens)
        self.num_output_tokens = max(self.num_output_tokens, chunk.num_output_tokens)
        if chunk.finished and chunk.finish_reason == "abort":
            raise FrontendError(ErrorCode.CANCELLED, "The request was aborted by the serving node")
        self._logprobs += [self._logprob(*entry) for entry in chunk.logprobs or ()]
        if self._stream is None:
            deltas = [{"content": chunk.text}] if chunk.text else []
        else:
            deltas = self._stream.feed(chunk.text) + (self._stream.finish() if chunk.finished else [])
        events = [event for delta in deltas for event in self._delta_events(delta)]
        if chunk.finished:
            self.finish_reason = chunk.finish_reason or "stop"
            events += self._close_item()
            done = self.full_object()
            if self._on_done is not None:
                self._on_done(done, self.conversation_after())
            kind = "response.completed" if done["status"] == "completed" else "response.incomplete"
            events.append(self._event(kind, response=done))
        return events

    def conversation_after(self) -> Conversation:
        """The conversation a later request continues: the input, then the output as the assistant's message."""
        return (*self.parsed.conversation, self._output_message())

    def full_object(self) -> dict:
        status = "in_progress"
        if self.finished:
            status = "incomplete" if self.finish_reason == "length" else "completed"
        status = self.status or status
        obj = {
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "error": self.error,
            "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
            "model": self.model,
            "output": self.items if self.finished else [],
            **self.parsed.settings,
            "usage": self._usage() if self.finished else None,
        }
        return obj

    def start_events(self, first: TokenChunk) -> list[bytes]:
        return [self.created_event(), self.in_progress_event()]

    def created_event(self) -> bytes:
        return self._event("response.created", response=self.full_object())

    def in_progress_event(self) -> bytes:
        return self._event("response.in_progress", response=self.full_object())

    chunk_events = add

    def failure_events(self, err: FrontendError) -> list[bytes]:
        """The events of a failure; the object is failed from now on."""
        kind = ERROR_KINDS[err.code]
        code = kind.code or kind.type
        self.status, self.error = "failed", {"code": code, "message": err.message}
        return [
            self._event("error", code=code, message=err.message, param=err.param),
            self._event("response.failed", response=self.full_object()),
        ]

    def _delta_events(self, delta: dict) -> list[bytes]:
        events: list[bytes] = []
        if delta.get("content"):
            if self._open is None or self._open["type"] != "message":
                events += self._close_item()
                message = {"type": "message", "id": _item_id("msg"), "status": "in_progress", "role": "assistant"}
                events += self._open_item({**message, "content": []})
                events.append(self._event("response.content_part.added", **self._at(), content_index=0,
                                          part=_text_part("")))  # fmt: skip
                self._open.update(text="", logprobs=[])
            logprobs, self._logprobs = self._logprobs, []
            self._open["text"] += delta["content"]
            self._open["logprobs"] += logprobs
            events.append(self._event("response.output_text.delta", **self._at(), content_index=0,
                                      delta=delta["content"], logprobs=logprobs))  # fmt: skip
        for call in delta.get("tool_calls") or ():
            self._logprobs = []  # a call's tokens: its arguments carry no logprobs
            function = call["function"]
            if "id" in call:  # a new call
                events += self._close_item()
                item = {"type": "function_call", "id": _item_id("fc"), "call_id": call["id"],
                        "name": function["name"], "arguments": "", "status": "in_progress"}  # fmt: skip
                events += self._open_item(item)
            if function.get("arguments"):
                self._open["arguments"] += function["arguments"]
                events.append(self._event("response.function_call_arguments.delta", **self._at(),
                                          delta=function["arguments"]))  # fmt: skip
        return events

    def _open_item(self, item: dict) -> list[bytes]:
        self._open = item
        return [self._event("response.output_item.added", output_index=len(self.items), item=dict(item))]

    def _close_item(self) -> list[bytes]:
        item, self._open = self._open, None
        if item is None:
            return []
        events = []
        if item["type"] == "message":
            text, logprobs = item.pop("text"), item.pop("logprobs")
            item["content"] = [_text_part(text, logprobs)]
            at = {"item_id": item["id"], "output_index": len(self.items), "content_index": 0}
            events.append(self._event("response.output_text.done", **at, text=text, logprobs=logprobs))
            events.append(self._event("response.content_part.done", **at, part=_text_part(text, logprobs)))
        else:
            at = {"item_id": item["id"], "output_index": len(self.items)}
            events.append(self._event("response.function_call_arguments.done", **at, name=item["name"],
                                      arguments=item["arguments"]))  # fmt: skip
        item["status"] = "completed"
        self.items.append(item)
        events.append(self._event("response.output_item.done", output_index=len(self.items) - 1, item=item))
        return events

    def _at(self) -> dict:
        assert self._open is not None
        return {"item_id": self._open["id"], "output_index": len(self.items)}

    def _output_message(self) -> ChatMessage:
        """The output as the assistant's message of the conversation a later request continues."""
        text = "".join(p["text"] for item in self.items if item["type"] == "message" for p in item["content"])
        calls = tuple(
            ToolCall(item["call_id"], item["name"], item["arguments"])
            for item in self.items
            if item["type"] == "function_call"
        )
        return ChatMessage("assistant", text, tool_calls=calls)

    def _logprob(self, token: int, logprob: float, top: list[tuple[int, float]]) -> dict:
        """A token's logprob as the Responses API shows it (the chat API's shape)."""
        lookup = self._names.lookup
        text, raw = lookup(token)
        tops = [{"token": lookup(t)[0], "logprob": clamp_logprob(lp), "bytes": lookup(t)[1]} for t, lp in top]
        return {"token": text, "logprob": clamp_logprob(logprob), "bytes": raw, "top_logprobs": tops}

    def _usage(self) -> dict:
        cached = min(self.num_cached_tokens, self.num_prompt_tokens)
        return {
            "input_tokens": self.num_prompt_tokens,
            "input_tokens_details": {"cached_tokens": cached},
            "output_tokens": self.num_output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": self.num_prompt_tokens + self.num_output_tokens,
        }

    def _event(self, kind: str, **fields) -> bytes:
        payload = {"type": kind, "sequence_number": self._sequence, **fields}
        self._sequence += 1
        return b"event: " + kind.encode() + b"\ndata: " + msgspec.json.encode(payload) + b"\n\n"


def _text_part(text: str, logprobs: list[dict] | None = None) -> dict:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs or []}
