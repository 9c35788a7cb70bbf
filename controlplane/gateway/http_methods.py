"""OPTIONS on every route: ``204 No Content`` with ``Allow`` (the route's methods, HEAD and OPTIONS included).

Starlette answers HEAD on every GET route (the GET's status and headers; uvicorn sends no body) and a wrong
method with 405 + ``Allow`` (the gateway's JSON error; no body for HEAD). It has no OPTIONS of its own: this
middleware answers it, outside the API-key check (a preflight carries no credentials), for every path some
route serves, and ``OPTIONS *`` for the server as a whole. An unknown path stays a 404.
"""

from __future__ import annotations

from collections.abc import Sequence

from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Receive, Scope, Send


class OptionsMiddleware:
    def __init__(self, app: ASGIApp, routes: Sequence[BaseRoute]) -> None:
        self.app = app
        self.routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "OPTIONS":
            await self.app(scope, receive, send)
            return
        methods = self.allowed_methods(scope)
        if not methods:
            await self.app(scope, receive, send)
            return
        allow = ", ".join(sorted(methods | {"HEAD", "OPTIONS"} if "GET" in methods else methods | {"OPTIONS"}))
        headers = [(b"allow", allow.encode()), (b"content-length", b"0")]
        await send({"type": "http.response.start", "status": 204, "headers": headers})
        await send({"type": "http.response.body", "body": b""})

    def allowed_methods(self, scope: Scope) -> set[str]:
        """The methods of the routes that serve this path (every route's for ``OPTIONS *``)."""
        methods: set[str] = set()
        whole_server = scope.get("path") == "*" or scope.get("raw_path") == b"*"
        for route in self.routes:
            route_methods = getattr(route, "methods", None) or set()
            if whole_server or route.matches(scope)[0] is not Match.NONE:
                methods |= set(route_methods)
        return methods
