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
              once, run by gateway/background_responses.py), truncation ("auto": the prompt's first tokens dropped
              to leave the output room in the context), reasoning.effort (to the chat template, as vLLM passes it),
              max_tool_calls (echoed); vLLM's extensions: stop, seed, presence/frequency/repetition_penalty,
              logit_bias, ignore_eos, skip_special_tokens, include_stop_str_in_output, structured_outputs,
              chat_template_kwargs; a last assistant message "in_progress" or "incomplete" is continued (vLLM's
              rule); other fields are ignored; image and file parts and a stored ``prompt`` are refused by name
    reply     the Response object and the stream's named events: gateway/responses_reply.py

Tools map onto OpenAI's chat tool calling (gateway/tool_calls.py); a function_call item is an assistant's ToolCall, a
function_call_output a "tool" message answering it, as the intake renders them. A stored response (``store``, the
default, as OpenAI's) keeps its conversation in the gateway's ResponseStore (gateway/response_store.py), so a later
request's ``previous_response_id`` continues it: that response's input and output come before the new input, its
``instructions`` do not (OpenAI's rule).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from controlplane.cells import RequestPriority
from controlplane.frontend import invalid_param
from controlplane.gateway import service_tier as service_tiers
from controlplane.gateway.openai_schema import (
    GenerateArgs,
    StreamOptions,
    chat_options,
    check_cache_hints,
    decode_body,
    logit_bias_of,
    with_reasoning_effort,
)
from controlplane.gateway.sampling_defaults import with_sampling_defaults
from controlplane.gateway.structured_fields import (
    NOT_GIVEN,
    StructuredOutputsIn,
    StructuredRequest,
    schema_text,
    structured_of,
)
from controlplane.gateway.tool_calls import FunctionIn, ToolIn, ToolPlan, in_parser_format, plan_for, tool_specs
from engine.sampling_params import MAX_LOGPROBS, SamplingParams, SamplingParamsError, show_value
from engine.structured_output import StructuredOutput, StructuredOutputError
from transport.chat_wire import ChatMessage, ChatTemplateOptions, ToolCall

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
    status: str | None = None  # an assistant message "in_progress" or "incomplete" last: the model continues it


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


class ConversationRefIn(msgspec.Struct, kw_only=True):
    id: str


class ReasoningIn(msgspec.Struct, kw_only=True):
    effort: str | None = None
    summary: str | None = None


class ResponsesRequest(msgspec.Struct, kw_only=True):
    model: str | None = None
    input: str | list[InputItem]
    instructions: str | None = None
    max_output_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None  # extension (as in vLLM)
    stream: bool | None = None
    stream_options: StreamOptions | None = None  # its include_obfuscation (gateway/stream_obfuscation.py)
    store: bool | None = None
    previous_response_id: str | None = None
    conversation: str | ConversationRefIn | None = None  # its items come first; this response's are added to it
    tools: list[FunctionToolIn] | None = None
    tool_choice: str | ToolChoiceIn | None = None
    parallel_tool_calls: bool | None = None
    text: TextIn | None = None
    metadata: dict[str, str] | None = None
    user: str | None = None
    # OpenAI's hints, checked (openai_schema.check_cache_hints) and echoed
    prompt_cache_key: str | None = None
    safety_identifier: str | None = None
    prompt_cache_retention: str | None = None
    background: bool | None = None
    include: list[str] | None = None
    top_logprobs: int | None = None  # with include ["message.output_text.logprobs"]: alternatives per token
    traffic_class: str | None = None  # extension: the request's traffic class (controlplane/cells.py)
    priority: RequestPriority | None = None  # extension (as in vLLM): lower runs earlier, within its traffic class
    service_tier: str | None = None  # OpenAI's: a priority inside the request's class (gateway/service_tier.py)
    cache_salt: str | None = None  # extension (as in vLLM): only requests of the same salt share the prefix cache
    truncation: str | None = None  # "disabled" (the default) | "auto": the prompt's first tokens dropped to fit
    max_tool_calls: int | None = None  # echoed (it bounds built-in tools, which there are none of)
    reasoning: ReasoningIn | None = None  # its effort reaches the chat template (vLLM's rule)
    prompt: msgspec.Raw = NOT_GIVEN  # a stored prompt template: refused, as vLLM refuses it
    # vLLM's extensions (vllm/entrypoints/openai/responses/protocol.py ResponsesRequest), as the chat API's
    stop: str | list[str] | None = None
    seed: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    ignore_eos: bool | None = None
    skip_special_tokens: bool | None = None
    include_stop_str_in_output: bool | None = None
    structured_outputs: StructuredOutputsIn | None = None
    chat_template_kwargs: dict[str, Any] | None = None


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
    conversation_id: str | None = None  # the conversation it continues, to which its items are added once it ends

    @property
    def own_input(self) -> Conversation:
        return self.conversation[len(self.conversation) - self.num_input :]


def parse_responses(
    body: bytes,
    *,
    default_max_tokens: int,
    tool_call_parser: str | None,
    previous: Callable[[str], Conversation | str | None],
    context_length: Callable[[str | None], int | None] = lambda model: None,
    conversation_items: Callable[[str], tuple[dict, ...] | None] = lambda conversation_id: None,
    defaults: Mapping | None = None,
) -> ResponsesArgs:
    """The request as ResponsesArgs; ``previous(id)`` is a stored response's conversation (None: unknown; a string:
    the status of one that did not finish); ``context_length(model)`` the longest context its nodes take (None:
    unknown), which ``truncation: auto`` fits the prompt to; ``conversation_items(id)`` a conversation's items (None:
    its owner has none of that id: gateway/conversation_store.py); ``defaults`` the server's sampling defaults
    (gateway/sampling_defaults.py). FrontendError naming the field at fault."""
    req = with_sampling_defaults(decode_body(_DECODER, body), defaults)
    if req.prompt and bytes(req.prompt) != b"null":
        raise invalid_param("prompt", "stored prompt templates are not supported: send the input itself")
    if req.truncation not in (None, "disabled", "auto"):
        raise invalid_param("truncation", f"must be 'disabled' or 'auto', got {show_value(req.truncation)}")
    if req.max_tool_calls is not None and req.max_tool_calls < 1:
        raise invalid_param("max_tool_calls", f"must be at least 1, got {show_value(req.max_tool_calls)}")
    check_cache_hints(req)
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
    conversation_id = req.conversation.id if isinstance(req.conversation, ConversationRefIn) else req.conversation
    if conversation_id is not None:
        if req.previous_response_id is not None:
            raise invalid_param("conversation", "cannot be given beside previous_response_id: name one of them")
        items = conversation_items(conversation_id)
        if items is None:
            raise invalid_param("conversation", f"no conversation has the id {show_value(conversation_id)}")
        conversation = items_conversation(items)
    own_input = _input_messages(req.input)
    conversation += own_input
    if not conversation:
        raise invalid_param("input", "must hold at least one message")
    plan = _tool_plan(req, tool_call_parser)
    structured, param = _structured(req, plan)
    max_tokens = default_max_tokens if req.max_output_tokens is None else req.max_output_tokens
    try:
        sampling = SamplingParams(
            temperature=1.0 if req.temperature is None else req.temperature,
            top_p=1.0 if req.top_p is None else req.top_p,
            top_k=req.top_k or 0,
            max_tokens=max_tokens,
            structured_outputs=structured,
            cache_salt=req.cache_salt,
            logprobs=(req.top_logprobs or 0) if _LOGPROBS_INCLUDE in (req.include or ()) else None,
            seed=req.seed,
            stop=req.stop or (),
            ignore_eos=bool(req.ignore_eos),
            presence_penalty=req.presence_penalty or 0.0,
            frequency_penalty=req.frequency_penalty or 0.0,
            repetition_penalty=1.0 if req.repetition_penalty is None else req.repetition_penalty,
            logit_bias=logit_bias_of(req.logit_bias),
            include_stop_str_in_output=bool(req.include_stop_str_in_output),
            skip_special_tokens=req.skip_special_tokens is not False
            if plan is None
            else plan.skip_special_tokens(req.skip_special_tokens),
            truncate_prompt_tokens=_fit(req, max_tokens, context_length),
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
        obfuscation=req.stream_options.include_obfuscation if req.stream_options is not None else None,
        tool_plan=plan,
        structured_param=param,
        traffic_class=req.traffic_class,
        priority=priority,
        service_tier=service_tier,
        chat=in_parser_format(_chat(req), tool_call_parser),
    )
    settings = _settings(req, sampling, service_tier)
    settings["conversation"] = {"id": conversation_id} if conversation_id is not None else None
    store = req.store is not False
    return ResponsesArgs(generate, settings, conversation, store, len(own_input), bool(req.background), conversation_id)


def _fit(req: ResponsesRequest, max_tokens: int, context_length: Callable[[str | None], int | None]) -> int | None:
    """``truncation: auto``: the prompt's last tokens that leave room for the output in the context (vLLM cuts the
    prompt's first tokens, as OpenAI drops the conversation's first items); None: the whole prompt."""
    if req.truncation != "auto":
        return None
    length = context_length(req.model)
    return length - max_tokens if length is not None and length > max_tokens else None


def _chat(req: ResponsesRequest) -> ChatTemplateOptions | None:
    """The chat options: a last assistant message left in progress or incomplete is continued, not answered
    (vLLM's should_continue_final_message); a reasoning effort reaches the template as ``reasoning_effort`` and
    ``enable_thinking`` (off for "none"), unless chat_template_kwargs set it (vLLM's build_chat_params)."""
    last = req.input[-1] if isinstance(req.input, list) and req.input else None
    continued = (
        last is not None
        and (last.type or "message") == "message"
        and last.role == "assistant"
        and last.status in ("in_progress", "incomplete")
    )
    effort = req.reasoning.effort if req.reasoning is not None else None
    return chat_options(not continued, continued, with_reasoning_effort(req.chat_template_kwargs, effort))


def _input_messages(items: str | list[InputItem], field: str = "input") -> Conversation:
    if isinstance(items, str):
        return (ChatMessage("user", items),)
    messages: list[ChatMessage] = []
    for i, item in enumerate(items):
        at = f"{field}[{i}]"
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
        elif kind == "reasoning":
            continue  # an earlier reply's reasoning, its output sent back whole: the prompt shows the answers alone
        else:
            kinds = "'message', 'function_call', 'function_call_output' or 'reasoning'"
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
    if req.structured_outputs is not None:  # vLLM's field: not beside text.format or a forced call
        if forced is not None or (fmt is not None and fmt.type != "text"):
            raise invalid_param("structured_outputs", "cannot be given beside text.format or a forced tool call")
        return structured_of(StructuredRequest(structured_outputs=req.structured_outputs))
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
        "max_tool_calls": req.max_tool_calls,
        "reasoning": {"effort": req.reasoning.effort, "summary": req.reasoning.summary} if req.reasoning else None,
        **({"service_tier": service_tier} if service_tier is not None else {}),
        "truncation": req.truncation or "disabled",
        "user": req.user,
        "prompt_cache_key": req.prompt_cache_key,
        "safety_identifier": req.safety_identifier,
        **({"prompt_cache_retention": req.prompt_cache_retention} if req.prompt_cache_retention else {}),
    }


def input_items(messages: Conversation) -> tuple[dict, ...]:
    """A request's input as the Responses API lists it (``GET /v1/responses/{id}/input_items``), each item with a new
    id: messages (``input_text`` parts; an assistant's ``output_text``), an assistant's calls as ``function_call``
    items, tool results as ``function_call_output`` items."""
    items: list[dict] = []
    for m in messages:
        if m.role == "tool":
            items.append({"type": "function_call_output", "id": item_id("fco"), "call_id": m.tool_call_id,
                          "output": m.content, "status": "completed"})  # fmt: skip
            continue
        if m.content or not m.tool_calls:
            part = {"type": "output_text" if m.role == "assistant" else "input_text", "text": m.content}
            if m.role == "assistant":
                part["annotations"] = []
            items.append({"type": "message", "id": item_id("msg"), "role": m.role, "status": "completed",
                          "content": [part]})  # fmt: skip
        for call in m.tool_calls:
            items.append({"type": "function_call", "id": item_id("fc"), "call_id": call.id, "name": call.name,
                          "arguments": call.arguments, "status": "completed"})  # fmt: skip
    return tuple(items)


def items_conversation(items: tuple[dict, ...] | list[dict]) -> Conversation:
    """Items as the Responses API lists them (a conversation's, gateway/conversation_store.py) as the messages they
    stand for: the inverse of ``input_items``."""
    return _input_messages(msgspec.convert(list(items), list[InputItem]))


def parse_items(raw: list[InputItem], at: str = "items") -> tuple[dict, ...]:
    """Input items a client sent (a message's content as a string or text parts, function calls, their outputs) as
    the Responses API lists them, each with a new id; FrontendError naming the one at fault. A reasoning item, which
    a response's input may carry back (and the prompt leaves out), is not kept: refused here."""
    for i, item in enumerate(raw):
        if item.type == "reasoning":
            kinds = "'message', 'function_call' or 'function_call_output'"
            raise invalid_param(f"{at}[{i}].type", f"must be {kinds} (reasoning items are not kept), got 'reasoning'")
    return input_items(_input_messages(raw, at))


def item_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:24]}"
