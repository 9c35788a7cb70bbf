"""The gateway's side of a draining control plane: new HTTP requests refused, those in flight counted.

Once the control plane drains (``ControlPlane.start_drain``: `zoo controlplane` at SIGTERM, then
``--shutdown-timeout`` seconds for what is in flight, as vLLM's API server does since vLLM's PR #36666), every new
HTTP request is answered here, before any route::

    503 {"error": {"message": ..., "type": "server_error", "param": null, "code": "server_shutting_down"}}
        Retry-After: 5          (the time a restart takes: agents rejoin a new control plane within a heartbeat or two)
        Connection: close       (a client's next request opens a new connection: to another replica behind a balancer)

except on ``GatewayConfig.open_while_draining`` (the probes and scrapes: ``/health`` then answers 503
``{"status": "draining"}``, so a readiness probe takes the replica out of its Service) and a GET of a response
(``/v1/responses/...``: a background response the drain lets finish is read before a restart forgets it) or its
cancel (``POST /v1/responses/{id}/cancel``: less work for the drain), or a GET of a conversation or its items
(``/v1/conversations/...``, which a restart forgets too).
Requests admitted before the drain run on; ``HttpInFlight`` counts them, and the shutdown waits until none is left
(zoo/controlplane_shutdown.py).
"""

from __future__ import annotations

import math

import msgspec
from starlette.types import ASGIApp, Receive, Scope, Send

from controlplane.gateway.errors import http_error_body
from controlplane.request_path import DRAIN_RETRY_AFTER_S, DRAINING

_REFUSAL_BODY = msgspec.json.encode(http_error_body(DRAINING, code="server_shutting_down", type_="server_error"))
_REFUSAL_HEADERS = [
    (b"content-type", b"application/json"),
    (b"content-length", str(len(_REFUSAL_BODY)).encode()),
    (b"retry-after", str(max(1, math.ceil(DRAIN_RETRY_AFTER_S))).encode()),
    (b"connection", b"close"),
]


# what a client may still read while the control plane drains: its responses, stored or running in the background
# (gateway/background_responses.py), which the drain lets finish and which a restart forgets, and cancel them; its
# conversations (gateway/conversation_store.py) and stored chat completions (chat_completion_store.py), which a
# restart forgets too
READABLE_WHILE_DRAINING = ("/v1/responses/", "/v1/conversations/", "/v1/chat/completions")


class HttpInFlight:
    """The gateway's HTTP requests being answered now (``count``), and those refused while draining (``refused``)."""

    def __init__(self) -> None:
        self.count = 0
        self.refused = 0

    @property
    def idle(self) -> bool:
        return self.count == 0


class ShutdownGate:
    """ASGI middleware: refuses new HTTP requests while ``frontend.draining`` (a frontend without that attribute never
    drains), except on ``open_paths``; counts the others in ``in_flight`` until their reply is sent."""

    def __init__(
        self,
        app: ASGIApp,
        frontend,
        in_flight: HttpInFlight,
        open_paths: tuple[str, ...],
        readable_prefixes: tuple[str, ...] = READABLE_WHILE_DRAINING,
    ) -> None:
        self.app = app
        self.frontend = frontend
        self.in_flight = in_flight
        self.open_paths = frozenset(open_paths)
        self.readable_prefixes = readable_prefixes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if getattr(self.frontend, "draining", False) and not self._open(scope):
            self.in_flight.refused += 1
            await send({"type": "http.response.start", "status": 503, "headers": _REFUSAL_HEADERS})
            await send({"type": "http.response.body", "body": _REFUSAL_BODY})
            return
        self.in_flight.count += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight.count -= 1

    def _open(self, scope: Scope) -> bool:
        path = scope["path"]
        if path in self.open_paths:
            return True
        if not path.startswith(self.readable_prefixes):
            return False
        method = scope["method"]  # a response read, or a background one cancelled (less work for the drain)
        return method in ("GET", "HEAD") or (method == "POST" and path.endswith("/cancel"))
