"""What the HTTP gateway and the ZeroMQ client endpoint need from the control plane."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Protocol

import msgspec

from engine.sampling_params import SamplingParams
from transport.chat_wire import ChatMessage, ChatTemplateOptions, ToolSpec
from transport.messages import ClientGenerate, ErrorCode, TokenChunk


class FrontendError(Exception):
    """A request refused or failed; ``code`` maps to an HTTP status and an OpenAI error type."""

    def __init__(self, code: ErrorCode, message: str, retry_after_s: float | None = None, param: str | None = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.retry_after_s = retry_after_s
        self.param = param


def invalid_param(param: str, message: str) -> FrontendError:
    """A 400 naming the request field ``param`` (its message starts with the field's name)."""
    return FrontendError(ErrorCode.INVALID_REQUEST, f"{param}: {message}", param=param)


class Frontend(Protocol):
    """The control plane, as its front doors see it."""

    @property
    def model_names(self) -> list[str]:
        """Models some live node serves (the first is the default)."""
        ...

    def generate(
        self,
        request_id: str,
        *,
        model: str | None,
        prompt: str | None = None,
        messages: list[ChatMessage] | None = None,
        prompt_token_ids: list[int] | None = None,
        sampling: SamplingParams,
        traffic_class: str = "default",
        arrival_ns: int | None = None,
        num_choices: int = 1,
        tenant: str = "",
        tools: list[ToolSpec] | None = None,
        prompts: list[str | list[int]] | None = None,
        trace_headers: dict[str, str] | None = None,
        priority: int = 0,
        chat: ChatTemplateOptions | None = None,
        return_prompt_token_ids: bool = False,
    ) -> AsyncIterator[TokenChunk]:
        """Tokenize, validate, admit, route, and stream the request's chunks until one has finished=True.
        ``traffic_class`` picks its cell, priority and SLOs (controlplane/cells.py); ``tenant`` (from its API
        key) its rate limits and usage books, and perhaps its class (controlplane/tenants.py).

        Raises FrontendError before the first chunk for a refused request (bad parameter, unknown
        model, prompt too long, overloaded, no node) and mid-stream when the serving node fails.
        Closing the iterator early cancels the request on its node.

        arrival_ns: when the request arrived (``time.monotonic_ns()``; None: now); the node's TTFT and
            E2E count from there. num_choices > 1: that many engine requests, ids
            ``choice_request_ids(request_id, num_choices)``, chunks interleaved until all have finished.
            tools: the functions a chat may call, rendered into its prompt (controlplane/gateway/tool_calls.py).
            prompts: a batch of prompts (texts or token ids) instead of one: ``num_choices`` engine requests each,
            choice ``i * num_choices + j`` of prompt i (OpenAI's order), one stream (client_generates).
            trace_headers: the caller's W3C traceparent / tracestate, the parent of the request's spans.
            priority: vLLM's (lower runs earlier), among the requests of its traffic class (cells.engine_priority).
            chat: how ``messages`` are rendered: vLLM's add_generation_prompt, continue_final_message (a prefilled
            reply) and chat_template_kwargs (backends/chat_render.py); None: a new reply, no extra variables.
            return_prompt_token_ids: each choice's first chunk names the prompt's tokens as served (vLLM's
            return_token_ids: TokenChunk.prompt_token_ids).
        """
        ...

    def health(self) -> dict:
        """{"status": "ok" | "degraded" | "draining", "nodes": N, ...}"""
        ...

    # optional: draining -> bool, True once the control plane is shutting down (ControlPlane.start_drain): the gateway
    # then refuses new HTTP requests (gateway/shutdown_gate.py) and holds its batches' next requests

    # optional: rate_limit_status(tenant) -> (requests, tokens) BucketStatus pair or None (controlplane/tenants.py),
    # for OpenAI's x-ratelimit-* headers (gateway/rate_limit_headers.py); a frontend without it sends none


def choice_request_ids(request_id: str, num_choices: int) -> list[str]:
    """The engine request id of each choice of a request (OpenAI's ``n``): the request's own id when n = 1."""
    if num_choices == 1:
        return [request_id]
    return [f"{request_id}-{i}" for i in range(num_choices)]


def choice_seed(seed: int | None, index: int) -> int | None:
    """Choice ``index``'s seed: a seeded request's choices differ from each other and are each reproducible."""
    return None if seed is None else (seed + index) % (1 << 63)


def client_generates(
    request_id: str,
    *,
    sampling: SamplingParams,
    num_choices: int = 1,
    prompts: list[str | list[int]] | None = None,
    **fields: Any,
) -> list[ClientGenerate]:
    """The engine requests of one generate call: ``num_choices`` per prompt (``prompts``, a batch; else the one
    prompt, messages or token ids in ``fields``), ids ``choice_request_ids(request_id, total)`` in OpenAI's choice
    order (prompt by prompt), each choice's seed ``choice_seed(seed, j)`` for its index j within its prompt."""
    batch: list[dict[str, Any]] = [{}]
    if prompts is not None:
        batch = [{"prompt": p} if isinstance(p, str) else {"prompt_token_ids": p} for p in prompts]
    ids = iter(choice_request_ids(request_id, len(batch) * num_choices))
    return [
        ClientGenerate(
            request_id=next(ids),
            **{**fields, **prompt},  # a batch's prompt over the (unset) single one
            sampling=msgspec.structs.replace(sampling, seed=choice_seed(sampling.seed, j)) if j else sampling,
        )
        for prompt in batch
        for j in range(num_choices)
    ]
