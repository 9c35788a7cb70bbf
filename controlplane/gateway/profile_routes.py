"""vLLM's POST /start_profile and /stop_profile on the gateway, for the fleet (controlplane/profiling.py).

vLLM serves the two routes only when its server was started with a profiler (``--profiler-config``), since a
profile slows what it traces and fills a disk; here they exist when the control plane was started with one
(``GatewayConfig.profiling``), behind the API key check as every route, and each node profiles by its own agent's
``--profiler-config`` (agent/node_profiler.py).

    POST /start_profile  [{"nodes": ["gpu-0", ...]}]   every node (and the control plane itself, frontend_profile.py,
                                                       unless ignore_frontend) when the body is empty or names none
    POST /stop_profile   [{"nodes": [...]}]            each node writes its trace on its own disk
        200 {"object": "profile", "action", "nodes": {id: {"ok", "detail", "trace_files"} | null (no answer)},
             "controlplane": {"ok", "detail", "trace_files"} (when it profiles itself)}
            when at least one node did it; 400 when none could (each node's reason in the message), or a node
            named is not in the fleet; 503 before any node joined.

vLLM answers an empty 200 for its one engine; a fleet's nodes may each answer otherwise (one started without a
profiler, one already profiling), so the body says what each did and, at a stop, where its trace is.
"""

from __future__ import annotations

import anyio
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from controlplane.gateway.errors import http_error_response
from controlplane.gateway.frontend_profile import FrontendProfile
from controlplane.gateway.guarded import json_response
from controlplane.gateway.node_selection import selected_nodes
from controlplane.gateway.reply_stream import until_disconnect
from controlplane.gateway.request_body import answered


def profile_routes(frontend: object, profiling: bool, read_timeout_s: float, own_dir: str | None = None) -> list[Route]:
    """The two routes, or none when the control plane was started without a profiler (or cannot ask its nodes);
    ``own_dir``: where the control plane's own profile goes (frontend_profile.py; None: not profiled)."""
    if not profiling or not hasattr(frontend, "profile"):
        return []
    handlers = _ProfileHandlers(frontend, read_timeout_s, None if own_dir is None else FrontendProfile(own_dir))
    return [
        Route("/start_profile", handlers.start, methods=["POST"]),
        Route("/stop_profile", handlers.stop, methods=["POST"]),
    ]


class _ProfileHandlers:
    def __init__(self, frontend, read_timeout_s: float, own: FrontendProfile | None) -> None:
        self.frontend = frontend
        self.read_timeout_s = read_timeout_s
        self.own = own

    async def start(self, request: Request) -> Response:
        return await answered(lambda: self._act(request, "start"))

    async def stop(self, request: Request) -> Response:
        return await answered(lambda: self._act(request, "stop"))

    async def _act(self, request: Request, action: str) -> Response:
        selected = await selected_nodes(request, self.frontend, self.read_timeout_s)
        if isinstance(selected, Response):
            return selected
        node_ids, named = selected
        own = await self._own(action) if self.own is not None and not named else None
        nodes = await until_disconnect(request, self.frontend.profile(action, node_ids))
        if not any(answer is not None and answer["ok"] for answer in [*nodes.values(), own]):
            why = "; ".join(f"{n}: {'no answer' if a is None else a['detail']}" for n, a in list(nodes.items())[:16])
            return http_error_response(400, f"No node could {action} its profiler. {why}", code="profiler_error")
        reply = {"object": "profile", "action": action, "nodes": nodes}
        return json_response(reply if own is None else {**reply, "controlplane": own})

    async def _own(self, action: str) -> dict:
        """The control plane's own profile started or stopped (written off the loop); its answer as a node's."""
        try:
            if action == "start":
                return {"ok": True, "detail": self.own.start(), "trace_files": []}
            files = await anyio.to_thread.run_sync(self.own.write, self.own.stop())
            return {"ok": True, "detail": "cProfile stopped", "trace_files": files}
        except (ValueError, OSError) as e:
            return {"ok": False, "detail": str(e), "trace_files": []}
