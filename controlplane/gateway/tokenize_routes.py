"""``POST /tokenize`` and ``POST /detokenize`` as vLLM serves them, with the control plane's own tokenizer.

    POST /tokenize    {"model"?, "prompt": str, "add_special_tokens"?: true, "return_token_strs"?: false}
                   or {"model"?, "messages": [...], "tools"?: [...], "add_generation_prompt"?: true,
                       "continue_final_message"?: false, "chat_template_kwargs"?: {...},
                       "add_special_tokens"?: false, "return_token_strs"?: false}
                   →  {"count": N, "max_model_len": L, "tokens": [ids], "token_strs": [str] | null}
    POST /detokenize  {"model"?, "tokens": [ids]}  →  {"prompt": str}

(``count_chat`` also counts for Anthropic's ``POST /v1/messages/count_tokens``: gateway/app.py.)

``messages`` (and ``tools``, and vLLM's chat options) go through the model's chat template exactly as a chat
completion's do (backends/chat_render.py), so ``count`` is the ``usage.prompt_tokens`` that chat completion reports.
``max_model_len`` is the longest context a live node serves (0 before any node joined). Bad input answers 400 in
OpenAI's error shape; an unknown model 404 (checked once some node serves a model); a frontend without a tokenizer
501.
"""

from __future__ import annotations

from typing import Any

import msgspec
from starlette.responses import Response

from backends.chat_render import render_chat
from controlplane.frontend import FrontendError, invalid_param
from controlplane.gateway.errors import error_response, http_error_response
from controlplane.gateway.openai_schema import (
    ChatMessageIn,
    _chat_message,
    chat_options,
    decode_body,
    with_template_defaults,
)
from controlplane.gateway.token_text import TokenText
from controlplane.gateway.tool_calls import ToolIn, in_parser_format, tool_specs
from controlplane.model_aliases import aliases_of, resolve_model
from engine.prompt import PromptError
from engine.sampling_params import show_value
from transport.chat_wire import ChatMessage, ChatTemplateOptions, ToolSpec
from transport.messages import ErrorCode


class TokenizeRequest(msgspec.Struct, kw_only=True):
    model: str | None = None
    prompt: str | None = None
    messages: list[ChatMessageIn] | None = None
    tools: list[ToolIn] | None = None  # with messages: rendered as a chat request's are (gateway/tool_calls.py)
    add_special_tokens: bool | None = None  # default: True for a prompt, False for messages (vLLM's)
    add_generation_prompt: bool = True
    continue_final_message: bool = False  # vLLM's: the prompt ends inside the final message (a prefilled reply)
    chat_template_kwargs: dict[str, Any] | None = None  # vLLM's: more chat template variables
    return_token_strs: bool | None = False


class DetokenizeRequest(msgspec.Struct, kw_only=True):
    tokens: list[int]
    model: str | None = None


_TOKENIZE = msgspec.json.Decoder(TokenizeRequest)
_DETOKENIZE = msgspec.json.Decoder(DetokenizeRequest)


class TokenizeRoutes:
    """The two handlers over a frontend that has a ``tokenizer`` (and, optionally, ``max_model_len``);
    ``tool_call_parser``: the gateway's, whose format a chat's tools are written in (as a generation renders them);
    ``template_defaults``: the gateway's default chat template variables (a chat's own win, as a generation's)."""

    def __init__(
        self, frontend: Any, tool_call_parser: str | None = "hermes", template_defaults: dict | None = None
    ) -> None:
        self.frontend = frontend
        self.tool_call_parser = tool_call_parser
        self.template_defaults = template_defaults or {}

    @property
    def tokenizer(self) -> Any | None:
        return getattr(self.frontend, "tokenizer", None)

    def tokenize(self, body: bytes) -> Response:
        """The reply to a /tokenize request body (read by the gateway: capped, with a deadline)."""
        if self.tokenizer is None:
            return no_tokenizer()
        try:
            req = decode_body(_TOKENIZE, body)
            tokenizer = self._tokenizer_for(req.model)
            if (req.prompt is None) == (req.messages is None):
                raise invalid_param("prompt", "exactly one of prompt and messages must be given")
            try:
                if req.messages is not None:
                    if not req.messages:
                        raise invalid_param("messages", "must be a non-empty list of messages")
                    messages = [_chat_message(i, m) for i, m in enumerate(req.messages)]
                    tools = tool_specs(req.tools) if req.tools else None
                    chat = in_parser_format(
                        chat_options(req.add_generation_prompt, req.continue_final_message, req.chat_template_kwargs),
                        self.tool_call_parser,
                    )
                    chat = with_template_defaults(chat, self.template_defaults)
                    tokens = _chat_tokens(tokenizer, messages, tools, chat, req.add_special_tokens)
                else:
                    add_special = True if req.add_special_tokens is None else req.add_special_tokens
                    tokens = tokenizer.encode(req.prompt, add_special_tokens=add_special)
            except ValueError as exc:  # a lone surrogate, a checkpoint without a chat template
                raise invalid_param("messages" if req.messages is not None else "prompt", str(exc)) from None
            token_strs = TokenText(tokenizer).texts(tokens) if req.return_token_strs else None
            max_model_len = getattr(self.frontend, "max_model_len", None) or 0
            body = {"count": len(tokens), "max_model_len": max_model_len, "tokens": tokens, "token_strs": token_strs}
            return _json(body)
        except FrontendError as err:
            return error_response(err)

    def count_chat(
        self,
        model: str | None,
        messages: list[ChatMessage],
        tools: list[ToolSpec] | None,
        chat: ChatTemplateOptions | None = None,
    ) -> int:
        """The prompt tokens of a chat with these messages, tools and chat options (as a generation renders them);
        FrontendError naming the field at fault. The frontend must have a tokenizer."""
        tokenizer = self._tokenizer_for(model)
        try:
            return len(_chat_tokens(tokenizer, messages, tools, chat, None))
        except ValueError as exc:  # a lone surrogate, a checkpoint without a chat template
            raise invalid_param("messages", str(exc)) from None

    def detokenize(self, body: bytes) -> Response:
        if self.tokenizer is None:
            return no_tokenizer()
        try:
            req = decode_body(_DETOKENIZE, body)
            tokenizer = self._tokenizer_for(req.model)
            vocab_size = tokenizer.vocab_size
            bad = next((t for t in req.tokens if not 0 <= t < vocab_size), None)
            if bad is not None:
                raise invalid_param("tokens", f"token ids must be in [0, {vocab_size}), got {show_value(bad)}")
            return _json({"prompt": tokenizer.decode(req.tokens, skip_special_tokens=False)})
        except FrontendError as err:
            return error_response(err)

    def _tokenizer_for(self, model: str | None) -> Any:
        names = self.frontend.model_names
        model = resolve_model(aliases_of(self.frontend), model)  # an alias: its model
        if model is not None and names and model not in names:
            raise FrontendError(ErrorCode.UNKNOWN_MODEL, f"The model '{model}' does not exist", param="model")
        return self.tokenizer


def _chat_tokens(tokenizer, messages: list[ChatMessage], tools, chat: ChatTemplateOptions | None, add_special):
    """The chat's tokens as the intake renders them; a PromptError becomes a 400 naming its field."""
    try:
        text = render_chat(tokenizer, messages, tools, chat)
    except PromptError as exc:
        raise invalid_param(exc.param, str(exc)) from None
    return tokenizer.encode(text, add_special_tokens=bool(add_special))


def no_tokenizer() -> Response:
    return http_error_response(501, "This gateway has no tokenizer", code="not_implemented")


def _json(obj: dict) -> Response:
    return Response(msgspec.json.encode(obj), media_type="application/json")
