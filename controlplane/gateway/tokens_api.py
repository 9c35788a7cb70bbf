"""vLLM's tokens-in, tokens-out API: ``POST /inference/v1/generate``, over the fleet, and its render routes
(``POST /v1/chat/completions/render``, ``POST /v1/completions/render``).

vLLM (``vllm/entrypoints/serve/disagg/``, ``GenerateRequest``/``GenerateResponse``) serves it for callers that keep
the tokens themselves: RL rollouts that must score exactly the ids the policy sampled (a text round trip can
re-tokenize differently), and frontends that render and tokenize once and hand only ids on. Here it is a completion
of a token prompt with vLLM's ``return_token_ids`` and ``return_tokens_as_token_ids`` on, answered in vLLM's shape:

    {"token_ids": [ids], "sampling_params": {vLLM's SamplingParams fields}, "model"?, "request_id"?, "stream"?,
     "stream_options"?, "cache_salt"?, "priority"?}
    → {"request_id", "id", "created", "model", "choices": [{"index", "token_ids", "finish_reason",
       "logprobs": {"content": [{"token": "token_id:N", "logprob", "bytes": null, "top_logprobs": [...]}]} | null}],
       "usage", "prompt_logprobs"}
    streamed: one ``data:`` event per chunk of new ids, {"request_id", "choices": [{"index", "token_ids",
       "finish_reason", "logprobs"}]}, the usage in a last event with ``stream_options.include_usage``, then [DONE]

``sampling_params`` takes vLLM's field names where a completion has the same (n, temperature, top_p, top_k, min_p,
seed, stop, stop_token_ids, ignore_eos, max_tokens, min_tokens, logprobs, prompt_logprobs, penalties, logit_bias,
bad_words, allowed_token_ids, skip_special_tokens, include_stop_str_in_output, truncate_prompt_tokens,
thinking_token_budget); ``detokenize`` and ``spaces_between_special_tokens`` are taken (only ids are answered); any
other field is refused by name rather than dropped. Without ``max_tokens`` a generation gets the gateway's
open-ended default (a chat's), where vLLM's runs to the end of the context. ``features`` (multimodal inputs) and
``kv_transfer_params`` (vLLM's own prefill/decode hand-off; the fleet has its own) are refused.

The render routes (vLLM's ``vllm/entrypoints/serve/render/``) take a chat or a completion request and answer the
GenerateRequest(s) it stands for, without generating: its prompt's token ids as the control plane's intake makes
them (the chat template, ``truncate_prompt_tokens``: request_intake.tokenize), and its sampling parameters in
vLLM's names, which ``/inference/v1/generate`` takes as they are. A chat renders to one, a completion to one per
prompt. Refused by name, as the generate route could not carry them: beam search, structured outputs, predictions.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from controlplane.frontend import FrontendError, invalid_param
from controlplane.gateway.guarded import guarded
from controlplane.gateway.openai_reply import OpenAIReply
from controlplane.gateway.openai_schema import decode_body, parse_chat, parse_completion
from controlplane.gateway.reply_stream import next_chunk
from controlplane.gateway.request_ids import MAX_CALLER_ID_CHARS
from controlplane.gateway.sse import DONE_EVENT, data_event, error_event
from controlplane.request_intake import tokenize
from engine.prompt import PromptError
from transport.messages import ClientGenerate, ErrorCode, TokenChunk

SAMPLING_FIELDS = frozenset({
    "n", "temperature", "top_p", "top_k", "min_p", "seed", "stop", "stop_token_ids", "ignore_eos", "max_tokens",
    "min_tokens", "logprobs", "prompt_logprobs", "presence_penalty", "frequency_penalty", "repetition_penalty",
    "logit_bias", "bad_words", "allowed_token_ids", "skip_special_tokens", "include_stop_str_in_output",
    "truncate_prompt_tokens", "thinking_token_budget",
})  # fmt: skip
TAKEN_FIELDS = frozenset({"detokenize", "spaces_between_special_tokens"})  # only ids are answered


class TokensRequest(msgspec.Struct):
    token_ids: list[int]
    sampling_params: dict[str, Any] = {}
    model: str | None = None
    request_id: str | None = None
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    cache_salt: str | None = None
    priority: int = 0
    features: Any = None
    kv_transfer_params: Any = None


_DECODER = msgspec.json.Decoder(TokensRequest)


def completion_body(body: bytes, default_max_tokens: int) -> tuple[bytes, str | None]:
    """The request as a completion's body (for the completion parser: the same checks, naming the same fields), and
    the caller's ``request_id``; FrontendError naming what is refused."""
    req = decode_body(_DECODER, body)  # the gateway's one body decoder: any bytes, a 400 naming what is wrong
    if not req.token_ids:
        raise invalid_param("token_ids", "must be a non-empty list of token ids")
    if req.request_id is not None and len(req.request_id) > MAX_CALLER_ID_CHARS:  # echoed in every event: bounded
        raise invalid_param("request_id", f"must be at most {MAX_CALLER_ID_CHARS} characters")
    for name in ("features", "kv_transfer_params"):
        if getattr(req, name) is not None:
            raise invalid_param(name, "is not supported: no multimodal inputs, and the fleet splits prefill itself")
    unknown = sorted(set(req.sampling_params) - SAMPLING_FIELDS - TAKEN_FIELDS)
    if unknown:
        raise invalid_param(f"sampling_params.{unknown[0]}", f"is not supported here (have: {sorted(SAMPLING_FIELDS)})")
    sampling = {k: v for k, v in req.sampling_params.items() if k in SAMPLING_FIELDS and v is not None}
    sampling.setdefault("max_tokens", default_max_tokens)
    completion = {
        **sampling, "prompt": req.token_ids, "model": req.model, "stream": req.stream, "priority": req.priority,
        "return_token_ids": True, "return_tokens_as_token_ids": True,
    }  # fmt: skip
    for name in ("stream_options", "cache_salt"):
        if getattr(req, name) is not None:
            completion[name] = getattr(req, name)
    return msgspec.json.encode(completion), req.request_id


def _logprobs(completion_logprobs: dict | None) -> dict | None:
    """A completion's logprobs (tokens, token_logprobs, top_logprobs) as vLLM's tokens API answers them (a chat's
    ``content`` list; each token named "token_id:N")."""
    if completion_logprobs is None:
        return None
    tokens, logprobs = completion_logprobs["tokens"], completion_logprobs["token_logprobs"]
    tops = completion_logprobs.get("top_logprobs") or [None] * len(tokens)
    return {
        "content": [
            {"token": token, "logprob": logprob, "bytes": None,
             "top_logprobs": [{"token": t, "logprob": lp, "bytes": None} for t, lp in (top or {}).items()]}
            for token, logprob, top in zip(tokens, logprobs, tops)
        ]
    }  # fmt: skip


def _choice(choice: dict) -> dict:
    return {
        "index": choice["index"],
        "token_ids": choice.get("token_ids") or [],
        "finish_reason": choice.get("finish_reason"),
        "logprobs": _logprobs(choice.get("logprobs")),
    }


class TokensReply:
    """A completion's OpenAIReply, answered in the tokens API's shape."""

    def __init__(self, inner: OpenAIReply, request_id: str) -> None:
        self.inner = inner
        self.request_id = request_id

    def add(self, chunk: TokenChunk) -> None:
        self.inner.add(chunk)

    @property
    def finished(self) -> bool:
        return self.inner.finished

    def full_object(self) -> dict:
        whole = self.inner.full_object()
        choices = whole["choices"]
        return {
            "request_id": self.request_id,
            "id": whole["id"],
            "created": whole["created"],
            "model": whole["model"],
            "choices": [_choice(c) for c in choices],
            "usage": whole["usage"],
            "prompt_logprobs": choices[0].get("prompt_logprobs") if choices else None,
        }


async def tokens_events(chunks: AsyncIterator[TokenChunk], first: TokenChunk, reply: TokensReply) -> AsyncGenerator:
    """The stream: each chunk's new ids (and its finish) per choice, the usage last when asked, then [DONE]."""
    inner = reply.inner
    try:
        chunk = first
        while True:
            for obj in inner.chunk_objects(chunk):
                choices = [_choice(c) for c in obj["choices"] if c.get("token_ids") or c.get("finish_reason")]
                if choices:
                    yield data_event({"request_id": reply.request_id, "choices": choices})
            if inner.finished:
                break
            chunk = await next_chunk(chunks)
        if inner.include_usage:
            yield data_event({"request_id": reply.request_id, "choices": [], "usage": inner.usage()})
    except FrontendError as err:
        yield error_event(err)
    yield DONE_EVENT


def tokens_handler(gateway):
    """``POST /inference/v1/generate`` on ``gateway`` (app.py's): the completion path, answered in this shape."""

    async def handle(request: Request) -> Response:
        arrival_ns = time.monotonic_ns()

        async def serve() -> Response:
            body, request_id = completion_body(await gateway.read_body(request), gateway.config.chat_max_tokens)
            config = gateway.config
            args = parse_completion(
                body, default_max_tokens=config.default_completion_max_tokens, defaults=config.sampling_defaults
            )

            def answer(reply: OpenAIReply, ids):
                return TokensReply(reply, request_id or ids.reply), tokens_events

            return await gateway._generate(request, args, chat=False, arrival_ns=arrival_ns, answer=answer)

        return await guarded(request, serve)

    return handle


def _sampling_params(sp, n: int) -> dict:
    """The engine's parameters as vLLM's sampling_params names them (those the generate route takes)."""
    return {
        "n": n, "temperature": sp.temperature, "top_p": sp.top_p, "top_k": sp.top_k, "min_p": sp.min_p,
        "seed": sp.seed, "max_tokens": sp.max_tokens, "min_tokens": sp.min_tokens, "stop": list(sp.stop),
        "stop_token_ids": list(sp.stop_token_ids), "ignore_eos": sp.ignore_eos, "logprobs": sp.logprobs,
        "prompt_logprobs": sp.prompt_logprobs, "presence_penalty": sp.presence_penalty,
        "frequency_penalty": sp.frequency_penalty, "repetition_penalty": sp.repetition_penalty,
        "logit_bias": {str(token): bias for token, bias in sp.logit_bias},
        "allowed_token_ids": list(sp.allowed_token_ids),
        "bad_words": list(sp.bad_words), "skip_special_tokens": sp.skip_special_tokens,
        "include_stop_str_in_output": sp.include_stop_str_in_output, "thinking_token_budget": sp.thinking_token_budget,
    }  # fmt: skip


def _rendered(gateway, args, prefix: str) -> list[dict]:
    """``args`` (a parsed chat or completion) as GenerateRequests: one per prompt."""
    for name, given in (("use_beam_search", args.beam), ("structured_outputs", args.sampling.structured_outputs),
                        ("prediction", args.sampling.prediction)):  # fmt: skip
        if given is not None:
            raise invalid_param(name, "is not carried by the tokens API here: send the request itself")
    tokenizer = getattr(gateway.frontend, "tokenizer", None)
    if tokenizer is None:
        raise FrontendError(ErrorCode.INVALID_REQUEST, "This gateway has no tokenizer to render with")  # (a 400)
    prompts = args.prompts if args.prompts is not None else [args.prompt or args.prompt_token_ids]
    rendered = []
    for prompt in prompts:
        fields = {"prompt": prompt} if isinstance(prompt, str) else {"prompt_token_ids": prompt}
        fields = fields if args.messages is None else {"messages": args.messages}
        msg = ClientGenerate(request_id="render", model=args.model, tools=args.tools, chat=args.chat,
                             sampling=args.sampling, **fields)  # fmt: skip
        try:
            token_ids = tokenize(tokenizer, msg)
        except PromptError as e:
            raise invalid_param(e.param or "prompt", str(e)) from None
        sampling = _sampling_params(args.sampling, args.n)  # (truncate_prompt_tokens applied: these ids are kept)
        rendered.append({
            "request_id": f"{prefix}-{uuid.uuid4().hex}", "token_ids": token_ids, "features": None,
            "sampling_params": sampling, "model": args.model, "stream": args.stream,
            "stream_options": {"include_usage": args.include_usage} if args.stream else None,
            "cache_salt": args.sampling.cache_salt, "priority": args.priority,
        })  # fmt: skip
    return rendered


def render_handler(gateway, *, chat: bool):
    """``POST /v1/chat/completions/render`` (``chat``: one GenerateRequest) or ``/v1/completions/render`` (a list)."""

    async def handle(request: Request) -> Response:
        async def serve() -> Response:
            body, config = await gateway.read_body(request), gateway.config
            if chat:
                parser, defaults = config.tool_call_parser, config.sampling_defaults
                args = parse_chat(
                    body, default_max_tokens=config.chat_max_tokens, tool_call_parser=parser, defaults=defaults
                )
                args = gateway.with_template_defaults(args)
            else:
                args = parse_completion(
                    body, default_max_tokens=config.default_completion_max_tokens, defaults=config.sampling_defaults
                )
            rendered = _rendered(gateway, args, "chatcmpl" if chat else "cmpl")
            return Response(msgspec.json.encode(rendered[0] if chat else rendered), media_type="application/json")

        return await guarded(request, serve)

    return handle


def tokens_routes(gateway) -> list[Route]:
    """vLLM's tokens API on ``gateway`` (app.py's): generate, and the two render routes."""
    return [
        Route("/inference/v1/generate", tokens_handler(gateway), methods=["POST"]),
        Route("/v1/chat/completions/render", render_handler(gateway, chat=True), methods=["POST"]),
        Route("/v1/completions/render", render_handler(gateway, chat=False), methods=["POST"]),
    ]
