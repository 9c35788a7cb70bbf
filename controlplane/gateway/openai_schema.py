"""The OpenAI request bodies the gateway accepts, decoded strictly into what Frontend.generate takes.

Types are strict (``"2"`` is not an int, ``true`` is not a number), unknown fields are ignored as
OpenAI ignores them, ``null`` means "not given". Every refusal is a FrontendError whose ``param``
names the offending field (``"n"``, ``"messages[0].content"``), so it answers 400 in OpenAI's shape.
Fields that would change the output and that the engine cannot honour (best_of, suffix) are refused rather than
silently ignored. A completion's ``echo`` puts the prompt before its text (with ``logprobs``, the prompt tokens'
log-probabilities first: what lm-evaluation-harness's loglikelihood tasks read); vLLM's ``prompt_logprobs`` (both
endpoints) answers the prompt tokens' scores in vLLM's shape (engine/prompt_logprobs.py). Structured outputs
(``response_format``, vLLM's ``structured_outputs`` and ``guided_*``) are read by gateway/structured_fields.py, tool
calling (``tools``, ``tool_choice``, an assistant message's ``tool_calls``, a tool message's ``tool_call_id``) by
gateway/tool_calls.py. The penalties, ``logit_bias`` (its keys token ids written as strings, as OpenAI's) and vLLM's
``repetition_penalty``, ``min_p``, ``min_tokens``, ``allowed_token_ids``, ``bad_words``, ``truncate_prompt_tokens``,
``include_stop_str_in_output`` and ``skip_special_tokens`` are honoured (engine/sampling_params.py
says each one's range and the order they apply in). vLLM's chat options (``add_generation_prompt``,
``continue_final_message`` for a prefilled assistant reply, ``chat_template_kwargs``) ride to the intake's renderer
(backends/chat_render.py). ``n`` choices (at most MAX_CHOICES) become n engine requests. A chat's ``prediction``
(OpenAI's Predicted Outputs) is the text the answer is expected to mostly repeat: a node that speculates drafts from
it (engine/spec/prediction_drafts.py), which changes the number of steps, never the output. The
replies are built in gateway/openai_reply.py.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from controlplane.cells import RequestPriority
from controlplane.frontend import FrontendError, invalid_param
from controlplane.gateway import service_tier as service_tiers
from controlplane.gateway.beam_search import BeamSpec
from controlplane.gateway.conversation_store import check_metadata
from controlplane.gateway.sampling_defaults import with_sampling_defaults
from controlplane.gateway.structured_fields import StructuredRequest, structured_of
from controlplane.gateway.tool_calls import NamedToolChoice, ToolIn, ToolPlan, in_parser_format, tool_plan_of
from engine.sampling_params import MAX_TOKEN_ID, SamplingParams, SamplingParamsError, show_value
from transport.chat_wire import DEFAULT_CHAT_OPTIONS, ChatMessage, ChatTemplateOptions, ToolCall, ToolSpec
from transport.messages import ErrorCode

MAX_COMPLETION_LOGPROBS = 5  # OpenAI's limit for /v1/completions ``logprobs``
MAX_CHOICES = 16  # the most choices (``n``) one request may ask for
MAX_BATCH = 256  # the most engine requests one completion's batch of prompts (times its ``n``) may make
CHAT_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant", "tool": "tool"}


class StreamOptions(msgspec.Struct, kw_only=True):
    include_usage: bool | None = None
    continuous_usage_stats: bool | None = None  # vLLM's: usage in every chunk (with include_usage)
    include_obfuscation: bool | None = None  # OpenAI's: random padding per event (gateway/stream_obfuscation.py)


class ContentPart(msgspec.Struct, kw_only=True):
    type: str
    text: str | None = None


class PredictionIn(msgspec.Struct, kw_only=True):
    """OpenAI's Predicted Outputs: ``{"type": "content", "content": str | [text parts]}``."""

    type: str
    content: str | list[ContentPart]


class ToolCallFunctionIn(msgspec.Struct, kw_only=True):
    name: str
    arguments: str


class ToolCallIn(msgspec.Struct, kw_only=True):
    id: str
    type: str = "function"
    function: ToolCallFunctionIn


class ChatMessageIn(msgspec.Struct, kw_only=True):
    role: str
    content: str | list[ContentPart] | None = None
    tool_calls: list[ToolCallIn] | None = None  # an assistant's calls
    tool_call_id: str | None = None  # a tool message: the call it answers
    name: str | None = None  # accepted and ignored


class _CommonRequest(StructuredRequest, kw_only=True):
    """Fields /v1/completions and /v1/chat/completions share (the structured-output ones: structured_fields.py)."""

    model: str | None = None  # None: the fleet's default model
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None  # extension (as in vLLM)
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None  # extension
    ignore_eos: bool | None = None  # extension
    seed: int | None = None
    n: int | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logit_bias: dict[str, float] | None = None  # token id (a string of digits) -> bias
    repetition_penalty: float | None = None  # extension (as in vLLM)
    min_p: float | None = None  # extension (as in vLLM)
    min_tokens: int | None = None  # extension (as in vLLM)
    allowed_token_ids: list[int] | None = None  # extension (as in vLLM)
    bad_words: list[str] | None = None  # extension (as in vLLM): words the output may not contain (engine/bad_words.py)
    thinking_token_budget: int | None = None  # extension (as in vLLM): the most thinking (engine/thinking_budget.py)
    prompt_logprobs: int | None = None  # extension (as in vLLM): the prompt tokens' scores, that many alternatives
    truncate_prompt_tokens: int | None = None  # extension (as in vLLM): keep the prompt's last k tokens
    include_stop_str_in_output: bool | None = None  # extension (as in vLLM)
    skip_special_tokens: bool | None = None  # extension (as in vLLM)
    user: str | None = None  # accepted and ignored
    traffic_class: str | None = None  # extension: the request's traffic class (controlplane/cells.py)
    priority: RequestPriority | None = None  # extension (as in vLLM): lower runs earlier, within its traffic class
    cache_salt: str | None = None  # extension (as in vLLM): only requests of the same salt share the prefix cache
    return_token_ids: bool | None = None  # extension (as in vLLM): the reply names the prompt's and output's tokens
    return_tokens_as_token_ids: bool | None = None  # extension (as in vLLM): logprobs name tokens "token_id:<id>"
    use_beam_search: bool | None = None  # extension (as in vLLM): the n best beams (gateway/beam_search.py)
    length_penalty: float | None = None  # extension (as in vLLM): a beam's score is logprob / length ** this


class CompletionRequest(_CommonRequest, kw_only=True):
    # a string, a list of one string, a list of token ids, or a list of one list of token ids
    prompt: str | list[str | int | list[int]]
    logprobs: int | None = None
    echo: bool | None = None
    best_of: int | None = None
    suffix: str | None = None


class ChatCompletionRequest(_CommonRequest, kw_only=True):
    messages: list[ChatMessageIn]
    max_completion_tokens: int | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None
    tools: list[ToolIn] | None = None  # read by gateway/tool_calls.py
    tool_choice: str | NamedToolChoice | None = None
    parallel_tool_calls: bool | None = None
    service_tier: str | None = None  # OpenAI's: a priority inside the request's class (gateway/service_tier.py)
    add_generation_prompt: bool = True  # extension (as in vLLM): the prompt ends with a new assistant message's header
    continue_final_message: bool = False  # extension (as in vLLM): the model continues the final message (a prefill)
    chat_template_kwargs: dict[str, Any] | None = None  # extension (as in vLLM): more chat template variables
    chat_template: str | None = None  # vLLM's; refused, as vLLM refuses it without --trust-request-chat-template
    echo: bool | None = None  # extension (as in vLLM): the reply starts with the final assistant message
    include_reasoning: bool = True  # extension (as in vLLM): false drops the reasoning (gateway/reasoning_parsers.py)
    reasoning_effort: str | None = None  # OpenAI's: to the chat template, as vLLM passes it (with_reasoning_effort)
    prediction: PredictionIn | None = None  # OpenAI's Predicted Outputs: drafts on a node that speculates
    store: bool | None = None  # OpenAI's: keep the completion for GET /v1/chat/completions (chat_completion_store.py)
    metadata: dict[str, str] | None = None  # OpenAI's: a stored completion's labels (a list filters by them)
    prompt_cache_key: str | None = None  # OpenAI's hints, checked (check_cache_hints) and otherwise unused
    safety_identifier: str | None = None
    prompt_cache_retention: str | None = None


@dataclass(frozen=True, slots=True)
class GenerateArgs:
    """One parsed request: exactly one of prompt / messages / prompt_token_ids / prompts (a completion's batch) is
    set."""

    model: str | None
    sampling: SamplingParams
    prompt: str | None = None
    messages: list[ChatMessage] | None = None
    prompt_token_ids: list[int] | None = None
    prompts: list[str | list[int]] | None = None  # a completion's batch of prompts (texts or token ids)
    stream: bool = False
    include_usage: bool = False
    continuous_usage: bool = False
    obfuscation: bool | None = None  # stream_options.include_obfuscation (None: not said: the server's default)
    n: int = 1
    traffic_class: str | None = None  # the body's; the x-zoo-class header wins (gateway/app.py)
    priority: int = 0  # vLLM's (lower runs earlier), checked by the intake (controlplane/cells.py)
    service_tier: str | None = None  # the OpenAI tier the reply names (gateway/service_tier.py); None: not asked
    structured_param: str | None = None  # the field that asked for structured outputs (an error about them names it)
    tool_plan: ToolPlan | None = None  # a chat's tools (gateway/tool_calls.py)
    chat: ChatTemplateOptions | None = None  # how a chat's messages are rendered (None: the defaults)
    echo: bool = False  # a completion's text (and logprobs) start with its prompt's
    chat_echo: str = ""  # a chat's content starts with this (vLLM's chat echo: the final assistant message)
    prompt_logprobs_field: bool = False  # the reply carries vLLM's ``prompt_logprobs`` (the client asked by name)
    return_token_ids: bool = False  # vLLM's: the reply carries ``prompt_token_ids`` and each choice's ``token_ids``
    tokens_as_ids: bool = False  # vLLM's return_tokens_as_token_ids: logprobs name tokens "token_id:<id>"
    store: bool = False  # a chat's ``store``: the ended completion is kept (gateway/chat_completion_store.py)
    metadata: dict[str, str] | None = None  # a chat's ``metadata`` (checked), which a stored completion carries
    stored_messages: tuple[dict, ...] = ()  # with ``store``: the request's messages as GET .../messages lists them
    include_reasoning: bool = True  # a chat's: its reply carries the reasoning (gateway/reasoning_parsers.py)
    beam: BeamSpec | None = None  # vLLM's use_beam_search: n beams searched (gateway/beam_search.py)

    @property
    def tools(self) -> list[ToolSpec] | None:
        """The tools the prompt shows."""
        return self.tool_plan.prompt_tools if self.tool_plan is not None else None

    @property
    def template_kwargs(self) -> dict | None:
        """A chat's ``chat_template_kwargs`` (None: none)."""
        return self.chat.template_kwargs if self.chat is not None else None


_COMPLETION_DECODER = msgspec.json.Decoder(CompletionRequest)
_CHAT_DECODER = msgspec.json.Decoder(ChatCompletionRequest)
_AT_PATH = re.compile(r" - at `\$\.?([^`]*)`")
_MISSING_FIELD = re.compile(r"(?:missing required|unknown) field `([^`]+)`")


def parse_completion(body: bytes, *, default_max_tokens: int, defaults: Mapping | None = None) -> GenerateArgs:
    """``defaults``: the server's sampling defaults for the fields a request leaves out (sampling_defaults.py)."""
    req = with_sampling_defaults(decode_body(_COMPLETION_DECODER, body), defaults)
    if req.best_of not in (None, 1):
        raise invalid_param("best_of", f"only best_of=1 is supported, got {show_value(req.best_of)}")
    if req.suffix:
        raise invalid_param("suffix", "suffix is not supported")
    if req.logprobs is not None and not 0 <= req.logprobs <= MAX_COMPLETION_LOGPROBS:
        raise invalid_param("logprobs", f"must be in [0, {MAX_COMPLETION_LOGPROBS}], got {show_value(req.logprobs)}")
    prompt, prompt_token_ids, prompts = prompts_of(req.prompt)
    if prompts is not None and len(prompts) * (req.n or 1) > MAX_BATCH:
        message = f"a batch of {len(prompts)} prompts times n={req.n or 1} is more than {MAX_BATCH} requests"
        raise invalid_param("prompt", message)
    max_tokens = req.max_tokens if req.max_tokens is not None else default_max_tokens
    # echo with logprobs scores the prompt too (vLLM's rule: prompt_logprobs = logprobs)
    prompt_logprobs = req.prompt_logprobs if req.prompt_logprobs is not None or not req.echo else req.logprobs
    sampling, structured_param = _sampling_of(
        req,
        max_tokens=max_tokens,
        max_tokens_param="max_tokens",
        logprobs=req.logprobs,
        prompt_logprobs=prompt_logprobs,
    )
    return GenerateArgs(
        model=req.model,
        sampling=sampling,
        prompt=prompt,
        prompt_token_ids=prompt_token_ids,
        prompts=prompts,
        stream=bool(req.stream),
        include_usage=_include_usage(req),
        continuous_usage=_continuous_usage(req),
        obfuscation=_obfuscation(req),
        n=req.n or 1,
        traffic_class=req.traffic_class,
        priority=req.priority or 0,
        structured_param=structured_param,
        echo=bool(req.echo),
        prompt_logprobs_field=req.prompt_logprobs is not None,
        beam=_beam_of(req),
        **_token_id_options(req),
    )


MAX_IDENTIFIER_CHARS = 64  # OpenAI's bound on safety_identifier (and, here, prompt_cache_key)


def check_cache_hints(req) -> None:
    """OpenAI's ``prompt_cache_key``, ``safety_identifier`` (at most 64 characters) and ``prompt_cache_retention``
    ("in-memory" | "24h") on a chat or a response: a 400 naming the one at fault. Routing here follows the prompt's
    own prefix blocks (controlplane/router/prefix_index.py), which a key adds nothing to; the engine's prefix cache
    keeps blocks while it has room, whatever retention is asked."""
    if req.prompt_cache_retention not in (None, "in-memory", "24h"):
        message = f"must be 'in-memory' or '24h', got {show_value(req.prompt_cache_retention)}"
        raise invalid_param("prompt_cache_retention", message)
    for name in ("prompt_cache_key", "safety_identifier"):
        value = getattr(req, name)
        if value is not None and len(value) > MAX_IDENTIFIER_CHARS:
            raise invalid_param(name, f"must be at most {MAX_IDENTIFIER_CHARS} characters, got {len(value)}")


def parse_chat(
    body: bytes, *, default_max_tokens: int, tool_call_parser: str | None = "hermes", defaults: Mapping | None = None
) -> GenerateArgs:
    req = with_sampling_defaults(decode_body(_CHAT_DECODER, body), defaults)
    if not req.messages:
        raise invalid_param("messages", "must be a non-empty list of messages")
    if req.chat_template is not None:
        message = "a request's own template is not taken: chats use the server's (zoo controlplane --chat-template)"
        raise invalid_param("chat_template", message)
    tool_plan = tool_plan_of(req, parser=tool_call_parser)
    check_cache_hints(req)
    if req.top_logprobs is not None and not req.logprobs:
        raise invalid_param("top_logprobs", "requires logprobs=true")
    messages = [_chat_message(i, m) for i, m in enumerate(req.messages)]
    if req.max_completion_tokens is not None:
        max_tokens, max_tokens_param = req.max_completion_tokens, "max_completion_tokens"
    else:
        max_tokens = req.max_tokens if req.max_tokens is not None else default_max_tokens
        max_tokens_param = "max_tokens"
    logprobs = (req.top_logprobs or 0) if req.logprobs else None
    priority, service_tier = service_tiers.resolve(req.priority, req.service_tier)
    sampling, structured_param = _sampling_of(
        req,
        max_tokens=max_tokens,
        max_tokens_param=max_tokens_param,
        logprobs=logprobs,
        tool_plan=tool_plan,
        prompt_logprobs=req.prompt_logprobs,
        prediction=_prediction_text(req.prediction),
    )
    return GenerateArgs(
        model=req.model,
        sampling=sampling,
        messages=messages,
        tool_plan=tool_plan,
        prompt_logprobs_field=req.prompt_logprobs is not None,
        stream=bool(req.stream),
        include_usage=_include_usage(req),
        continuous_usage=_continuous_usage(req),
        obfuscation=_obfuscation(req),
        n=req.n or 1,
        traffic_class=req.traffic_class,
        priority=priority,
        service_tier=service_tier,
        structured_param=structured_param,
        chat=in_parser_format(
            chat_options(
                req.add_generation_prompt,
                req.continue_final_message,
                with_reasoning_effort(req.chat_template_kwargs, req.reasoning_effort),
            ),
            tool_call_parser,
        ),
        chat_echo=messages[-1].content if req.echo and messages[-1].role == "assistant" else "",
        store=bool(req.store),
        metadata=check_metadata(req.metadata) if req.metadata is not None else None,
        stored_messages=tuple(_stored_message(m) for m in req.messages) if req.store else (),
        include_reasoning=req.include_reasoning,
        beam=_beam_of(req),
        **_token_id_options(req),
    )


def _stored_message(message: ChatMessageIn) -> dict:
    """A request's message as OpenAI lists a stored completion's: its content as text, and as the parts it came in
    (``content_parts``) when it came in parts."""
    parts = None if message.content is None or isinstance(message.content, str) else message.content
    text = "\n".join(part.text or "" for part in parts) if parts is not None else message.content
    stored = {"role": message.role, "content": text, "name": message.name}
    stored["content_parts"] = [{"type": p.type, "text": p.text} for p in parts] if parts is not None else None
    if message.tool_calls:
        stored["tool_calls"] = [msgspec.to_builtins(call) for call in message.tool_calls]
    if message.tool_call_id is not None:
        stored["tool_call_id"] = message.tool_call_id
    return stored


def _token_id_options(req: _CommonRequest) -> dict:
    """vLLM's two token-id options, as GenerateArgs fields."""
    return {"return_token_ids": bool(req.return_token_ids), "tokens_as_ids": bool(req.return_tokens_as_token_ids)}


def with_reasoning_effort(template_kwargs: dict[str, Any] | None, effort: str | None) -> dict[str, Any] | None:
    """A request's ``chat_template_kwargs`` with its reasoning effort (a chat's ``reasoning_effort``, a response's
    ``reasoning.effort``): the template gets ``reasoning_effort`` and ``enable_thinking`` (off for "none"), unless the
    kwargs set them (vLLM's build_chat_params; gateway/reasoning_parsers.py reads ``enable_thinking`` too)."""
    if effort is None:
        return template_kwargs
    return {"reasoning_effort": effort, "enable_thinking": effort != "none", **(template_kwargs or {})}


def chat_options(
    add_generation_prompt: bool, continue_final_message: bool, template_kwargs: dict[str, Any] | None
) -> ChatTemplateOptions | None:
    """vLLM's chat options as the wire's (None: the defaults). As in vLLM, ``chat_template_kwargs`` may set the two
    flags too, and wins (vllm/entrypoints/openai/chat_completion/serving.py updates the flags with them); the
    options are checked where the chat is rendered (backends/chat_render.py)."""
    kwargs = dict(template_kwargs or {})
    flags = {"add_generation_prompt": add_generation_prompt, "continue_final_message": continue_final_message}
    for name in flags:
        if name in kwargs:
            value = kwargs.pop(name)
            if not isinstance(value, bool):
                raise invalid_param("chat_template_kwargs", f"{name} must be a boolean, got {show_value(value)}")
            flags[name] = value
    options = ChatTemplateOptions(**flags, template_kwargs=kwargs or None)
    return None if options == DEFAULT_CHAT_OPTIONS else options


def with_template_defaults(
    chat: ChatTemplateOptions | None, defaults: Mapping[str, Any] | None
) -> ChatTemplateOptions | None:
    """A chat's options with the server's default template variables under its own (vLLM's
    ``--default-chat-template-kwargs``): the request's ``chat_template_kwargs`` and its reasoning effort win."""
    if not defaults:
        return chat
    base = chat or DEFAULT_CHAT_OPTIONS
    return msgspec.structs.replace(base, template_kwargs={**defaults, **(base.template_kwargs or {})})


def decode_body(decoder: msgspec.json.Decoder, body: bytes):
    try:
        return decoder.decode(body)
    except msgspec.ValidationError as exc:
        message = str(exc)
        at = _AT_PATH.search(message)
        missing = _MISSING_FIELD.search(message)
        path = at.group(1) if at else ""
        if missing:
            path = f"{path}.{missing.group(1)}" if path else missing.group(1)
        if message.startswith("Expected `object`") and not at:
            message = "The request body must be a JSON object"
        raise FrontendError(ErrorCode.INVALID_REQUEST, f"Invalid request: {message}", param=path or None) from None
    except msgspec.DecodeError as exc:
        raise FrontendError(ErrorCode.MALFORMED, f"We could not parse the JSON body of your request ({exc})") from None
    except RecursionError:
        raise FrontendError(ErrorCode.MALFORMED, "The JSON body of your request is nested too deeply") from None
    except Exception as exc:  # whatever else decoding a client's bytes raises is the bytes' fault
        message = f"We could not parse the JSON body of your request ({type(exc).__name__})"
        raise FrontendError(ErrorCode.MALFORMED, message) from None


def logit_bias_of(logit_bias: dict[str, float] | None) -> tuple[tuple[int, float], ...]:
    """OpenAI's ``logit_bias`` (token id strings -> bias) as SamplingParams' pairs; a key that is not a token id
    written in decimal digits is refused (the ranges are SamplingParams', the vocabulary the intake's)."""
    if not logit_bias:
        return ()
    pairs = []
    for key, bias in logit_bias.items():
        if not (key.isascii() and key.isdigit()) or len(key) > 10:
            raise invalid_param("logit_bias", f"keys must be token ids (decimal digits), got {show_value(key)}")
        pairs.append((int(key), bias))
    return tuple(pairs)


def _include_usage(req: _CommonRequest) -> bool:
    return bool(req.stream and req.stream_options is not None and req.stream_options.include_usage)


def _obfuscation(req: _CommonRequest) -> bool | None:
    return req.stream_options.include_obfuscation if req.stream_options is not None else None


def _beam_of(req: _CommonRequest) -> BeamSpec | None:
    if not req.use_beam_search:
        if req.length_penalty is not None:
            raise invalid_param("length_penalty", "scores beams: it needs use_beam_search")
        return None
    return BeamSpec(req.n or 1, 1.0 if req.length_penalty is None else req.length_penalty)


def _continuous_usage(req: _CommonRequest) -> bool:
    return _include_usage(req) and bool(req.stream_options.continuous_usage_stats)


def prompts_of(
    prompt: str | list, *, param: str = "prompt", max_batch: int = MAX_BATCH
) -> tuple[str | None, list[int] | None, list[str | list[int]] | None]:
    """(prompt text, None, None), (None, prompt token ids, None), or a batch: (None, None, prompts). OpenAI's shapes:
    a string, a list of strings, a list of token ids, a list of lists of token ids (a list of one is one prompt).
    A refusal names ``param`` (the field: a completion's ``prompt``, an embedding's ``input``)."""
    if isinstance(prompt, str) or (prompt and all(isinstance(t, int) for t in prompt)):
        prompt = [prompt]  # one prompt
    if not prompt:
        raise invalid_param(param, "must not be empty")
    kinds = {type(p) for p in prompt}
    if kinds not in ({str}, {list}):
        raise invalid_param(param, "must be a string, token ids, or a list of either kind (not both)")
    for i, p in enumerate(prompt):
        where = param if len(prompt) == 1 else f"{param}[{i}]"
        if not p:
            raise invalid_param(where, "must not be empty")
        if isinstance(p, list) and (min(p) < 0 or max(p) > MAX_TOKEN_ID):
            raise invalid_param(where, "token ids must be in [0, 2**31-1]")
    if len(prompt) > max_batch:
        raise invalid_param(param, f"a batch may hold at most {max_batch} items, got {len(prompt)}")
    if len(prompt) > 1:
        return None, None, [p if isinstance(p, str) else list(p) for p in prompt]
    (one,) = prompt
    return (one, None, None) if isinstance(one, str) else (None, list(one), None)


def _prediction_text(prediction: PredictionIn | None) -> str | None:
    """A predicted output's text (its text parts joined, as OpenAI's are); a 400 naming ``prediction`` otherwise."""
    if prediction is None:
        return None
    if prediction.type != "content":
        raise invalid_param("prediction", f"type must be 'content', got {show_value(prediction.type)}")
    if isinstance(prediction.content, str):
        return prediction.content
    if any(part.type != "text" or part.text is None for part in prediction.content):
        raise invalid_param("prediction", "its content parts must be text parts")
    return "".join(part.text or "" for part in prediction.content)


def _chat_message(index: int, message: ChatMessageIn) -> ChatMessage:
    role = CHAT_ROLES.get(message.role)
    if role is None:
        raise invalid_param(
            f"messages[{index}].role", f"must be one of {sorted(CHAT_ROLES)}, got {show_value(message.role)}"
        )
    content = message.content
    if content is None or isinstance(content, str):
        text = content or ""
    else:
        texts = []
        for part in content:
            if part.type != "text" or part.text is None:
                message = f"only text content parts are supported, got {show_value(part.type)}"
                raise invalid_param(f"messages[{index}].content", message)
            texts.append(part.text)
        text = "\n".join(texts)
    calls = []
    for i, call in enumerate(message.tool_calls or ()):
        if role != "assistant":
            raise invalid_param(f"messages[{index}].tool_calls", "only an assistant message makes tool calls")
        if call.type != "function":
            raise invalid_param(f"messages[{index}].tool_calls[{i}].type", f"must be 'function', got {call.type!r}")
        calls.append(ToolCall(id=call.id, name=call.function.name, arguments=call.function.arguments))
    return ChatMessage(role=role, content=text, tool_calls=tuple(calls), tool_call_id=message.tool_call_id)


def _sampling_of(
    req: _CommonRequest,
    *,
    max_tokens: int,
    max_tokens_param: str,
    logprobs: int | None,
    tool_plan: ToolPlan | None = None,
    prompt_logprobs: int | None = None,
    prediction: str | None = None,
) -> tuple[SamplingParams, str | None]:
    """The request's SamplingParams, and the field that asked for structured outputs (None: none did): one of the
    structured-output fields, or ``tools`` for a forced call (gateway/tool_calls.py)."""
    if req.n is not None and not 1 <= req.n <= MAX_CHOICES:
        raise invalid_param("n", f"must be in [1, {MAX_CHOICES}], got {show_value(req.n)}")
    logit_bias = logit_bias_of(req.logit_bias)
    structured, structured_param = structured_of(req)
    forced = tool_plan.constraint() if tool_plan is not None else None
    if forced is not None:
        if structured is not None:
            raise invalid_param("tool_choice", f"a forced tool call cannot be combined with {structured_param}")
        structured, structured_param = forced, "tools"
    try:
        sampling = SamplingParams(
            temperature=1.0 if req.temperature is None else req.temperature,
            top_p=1.0 if req.top_p is None else req.top_p,
            top_k=req.top_k or 0,
            seed=req.seed,
            max_tokens=max_tokens,
            stop=req.stop or (),
            stop_token_ids=req.stop_token_ids or (),
            ignore_eos=bool(req.ignore_eos),
            logprobs=logprobs,
            presence_penalty=req.presence_penalty or 0.0,
            frequency_penalty=req.frequency_penalty or 0.0,
            repetition_penalty=1.0 if req.repetition_penalty is None else req.repetition_penalty,
            logit_bias=logit_bias,
            min_p=req.min_p or 0.0,
            min_tokens=req.min_tokens or 0,
            allowed_token_ids=req.allowed_token_ids or (),
            bad_words=tuple(req.bad_words or ()),
            thinking_token_budget=req.thinking_token_budget,
            structured_outputs=structured,
            prompt_logprobs=prompt_logprobs,
            truncate_prompt_tokens=req.truncate_prompt_tokens,
            include_stop_str_in_output=bool(req.include_stop_str_in_output),
            skip_special_tokens=req.skip_special_tokens is not False
            if tool_plan is None
            else tool_plan.skip_special_tokens(req.skip_special_tokens),
            cache_salt=req.cache_salt,
            prediction=prediction,
        )
    except SamplingParamsError as exc:
        param = {"max_tokens": max_tokens_param, "structured_outputs": structured_param}.get(exc.field, exc.field)
        if param == "logprobs" and isinstance(req, ChatCompletionRequest):
            param = "top_logprobs"
        detail = str(exc).removeprefix(f"{exc.field}: ")
        raise invalid_param(param, detail) from None
    return sampling, structured_param
