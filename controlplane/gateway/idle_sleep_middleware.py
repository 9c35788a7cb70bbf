"""The gateway's half of the fleet's idle sleep (controlplane/idle_sleep.py, vLLM's ``--sleep-idle-ttl``): each
inference request is counted from its start to its reply's last byte, and one that arrives while the fleet sleeps
waits for the wake before it is read.

Inference requests are vLLM's (vllm/entrypoints/serve/idle_sleep/middleware.py): a POST whose path starts with one
of INFERENCE_PATH_PREFIXES. Anything else (health probes, /metrics, /tokenize, the operator's routes, GETs of stored
responses) neither wakes the fleet nor keeps it awake.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

INFERENCE_PATH_PREFIXES = ("/v1/", "/classify", "/inference", "/invocations", "/pooling", "/rerank", "/score")


def is_inference_request(scope: Scope) -> bool:
    return scope.get("method") == "POST" and scope.get("path", "").startswith(INFERENCE_PATH_PREFIXES)


class IdleSleepMiddleware:
    """Pure ASGI: ``idle`` (an IdleSleep, or None: off) told of each inference request's start and end."""

    def __init__(self, app: ASGIApp, idle) -> None:
        self.app = app
        self.idle = idle

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.idle is None or scope["type"] != "http" or not is_inference_request(scope):
            await self.app(scope, receive, send)
            return
        await self.idle.on_request_start()
        try:
            await self.app(scope, receive, send)
        finally:
            self.idle.on_request_end()
