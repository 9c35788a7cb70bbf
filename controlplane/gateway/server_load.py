"""vLLM's ``GET /load``: ``{"server_load": N}``, the requests this gateway is serving now that use the GPUs.

vLLM counts, with ``--enable-server-load-tracking``, the requests of its GPU routes from their handler's start to
their reply's last byte (vllm/entrypoints/utils.py ``load_aware_call``; the route in
vllm/entrypoints/serve/ ``get_server_load_metrics``); a load balancer in front of several servers reads it to pick
the least loaded. Here the count is always kept (a counter per request costs nothing): the generation and embedding
routes' requests (``LOAD_PATHS``: a stream counts until its last event), and the background responses still running
(gateway/background_responses.py: they use a GPU with no HTTP request open, which vLLM leaves out). The fleet's own
view, every request of every gateway and ZeroMQ client, is on /metrics (``vllm:num_requests_running``, ...).
"""

from __future__ import annotations

from collections.abc import Callable

from starlette.types import ASGIApp, Receive, Scope, Send

# vLLM's load_aware_call routes that this gateway serves (the stored responses' GET, DELETE and cancel are not work)
LOAD_PATHS = frozenset({
    "/v1/completions", "/v1/chat/completions", "/v1/messages", "/v1/responses", "/v1/embeddings", "/score",
    "/v1/score", "/rerank", "/v1/rerank", "/v2/rerank", "/invocations",
})  # fmt: skip


class ServerLoad:
    """The count: ``http`` requests of LOAD_PATHS being answered, plus ``background()`` (responses running)."""

    def __init__(self, background: Callable[[], int] = lambda: 0) -> None:
        self.http = 0
        self.background = background

    @property
    def value(self) -> int:
        return self.http + self.background()


class ServerLoadMiddleware:
    """ASGI middleware: counts each POST to LOAD_PATHS in ``load.http`` until its reply is sent."""

    def __init__(self, app: ASGIApp, load: ServerLoad) -> None:
        self.app = app
        self.load = load

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] not in LOAD_PATHS:
            await self.app(scope, receive, send)
            return
        self.load.http += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.load.http -= 1
