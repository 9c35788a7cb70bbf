"""POST /invocations: Amazon SageMaker's one inference path, served by the route the body's shape names.

SageMaker sends every inference request of an endpoint to ``POST /invocations`` (and checks health at
``/ping``: app.py serves it as /health). vLLM serves it by trying each request type in order and handing the body
to the first one that validates (vllm-project/vllm, vllm/entrypoints/sagemaker/api_router.py, ``invocations``;
the order: the generate types, chat completion then completion, then the pooling types of
vllm/entrypoints/pooling/factories.py, ``get_pooling_invocation_types``: embeddings, classify, rerank, score,
pooling). This gateway has no classify or pooling route; the rest, read off the keys each type requires:

    "messages"                  → /v1/chat/completions
    "prompt"                    → /v1/completions
    "input"                     → /v1/embeddings
    "query" and "documents"     → /v1/rerank
    "text_1" and "text_2"       → /v1/score
    anything else               → 400 invalid_request_error, naming what was expected (vLLM's message)

The body is read once, under the gateway's size cap and read deadline, and replayed to the chosen route's handler
as its request body: the reply (a stream too), its errors and its checks are that route's. Only the body's top-level
keys are read here (``msgspec.Raw`` values: nothing below them is decoded twice).

Left out: the ``X-Amzn-SageMaker-*`` headers vLLM's sagemaker-standards decorators read (adapter id, sessions).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from controlplane.frontend import FrontendError
from controlplane.gateway.openai_schema import decode_body
from controlplane.gateway.request_body import answered, replayed_body
from transport.messages import ErrorCode

Handler = Callable[[Request], Awaitable[Response]]

# (the keys a body must have, the route that serves it), in vLLM's order
ROUTES: tuple[tuple[tuple[str, ...], str], ...] = (
    (("messages",), "/v1/chat/completions"),
    (("prompt",), "/v1/completions"),
    (("input",), "/v1/embeddings"),
    (("query", "documents"), "/v1/rerank"),
    (("text_1", "text_2"), "/v1/score"),
)
EXPECTED = "Cannot find suitable handler for request. Expected one of: " + ", ".join(
    f"{path} ({' and '.join(repr(k) for k in keys)})" for keys, path in ROUTES
)
_TOP_LEVEL = msgspec.json.Decoder(dict[str, msgspec.Raw])


def route_for(body: bytes) -> str:
    """The route that serves ``body``; FrontendError (400) for a body that is not a JSON object (or is one nested
    too deeply for its keys to be read) or that no route takes."""
    keys = decode_body(_TOP_LEVEL, body)  # the routes' own refusals: not JSON, not an object, nested too deeply
    for needed, path in ROUTES:
        if all(key in keys for key in needed):
            return path
    raise FrontendError(ErrorCode.INVALID_REQUEST, EXPECTED)


def invocations(handlers: dict[str, Handler], read_body: Callable[[Request], Awaitable[bytes]]) -> Handler:
    """The /invocations handler over ``handlers`` (route path → the handler that route has)."""
    missing = {path for _, path in ROUTES} - set(handlers)
    if missing:
        raise ValueError(f"/invocations: no handler for {sorted(missing)}")

    async def handle(request: Request) -> Response:
        async def serve() -> Response:
            body = await read_body(request)
            handler = handlers[route_for(body)]
            return await handler(Request(request.scope, replayed_body(body, request.receive)))

        return await answered(serve)

    return handle
