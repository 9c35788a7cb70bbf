"""vLLM's sleep mode routes on the gateway, for the fleet (controlplane/node_sleeps.py).

vLLM serves them with ``--enable-sleep-mode`` (and its dev mode: vllm/entrypoints/serve/dev/sleep/api_router.py),
for its one engine; here the control plane started with ``--enable-sleep-mode`` serves them, behind the API key check
as every route, for every node or those a body names (node_selection.py):

    POST /sleep?level=1|2&mode=abort|wait  [{"nodes": [...]}]   level 1 (vLLM's default): KV freed, weights to host
                                                                RAM; 2: both freed. mode "abort" (vLLM's default):
                                                                the node's requests resume on other nodes; "wait":
                                                                it sleeps once they are done
    POST /wake_up[?tags=weights&tags=kv_cache]  [{"nodes": [...]}]   every tag when none is named (vLLM's)
        200 {"object": "sleep" | "wake_up", "nodes": {id: {"ok", "detail", "sleep_level", "freed_bytes"} | null}}
            when at least one node did it (null: no answer in time; a "wait" node sleeps when its requests are done);
            400 for a level, mode or tag not taken, or when no node could (each node's reason in the message)
    GET  /is_sleeping   {"is_sleeping": every node asleep, "nodes": {id: level}}   (vLLM's key, and each node's level:
                        0 awake, 1, 2, -1 waiting for its requests to sleep)

vLLM answers an empty 200; a fleet's nodes may each answer otherwise (one whose backend has no sleep mode), so the body
says what each did. vLLM's third mode, "keep", is refused by name (engine/sleep_mode.py says why).
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from controlplane.gateway.errors import http_error_response
from controlplane.gateway.guarded import json_response
from controlplane.gateway.node_selection import selected_nodes
from controlplane.gateway.reply_stream import until_disconnect
from controlplane.gateway.request_body import answered
from engine.sleep_mode import SleepModeError, check_level, check_tags


def sleep_routes(frontend: object, enabled: bool, read_timeout_s: float) -> list[Route]:
    """The three routes, or none without ``--enable-sleep-mode`` (or a control plane that cannot ask its nodes)."""
    sleeps = getattr(frontend, "sleeps", None)
    if not enabled or sleeps is None:
        return []
    handlers = _SleepHandlers(frontend, sleeps, read_timeout_s)
    return [
        Route("/sleep", handlers.sleep, methods=["POST"]),
        Route("/wake_up", handlers.wake_up, methods=["POST"]),
        Route("/is_sleeping", handlers.is_sleeping, methods=["GET"]),
    ]


class _SleepHandlers:
    def __init__(self, frontend, sleeps, read_timeout_s: float) -> None:
        self.frontend = frontend
        self.sleeps = sleeps  # controlplane/node_sleeps.py's NodeSleeps
        self.read_timeout_s = read_timeout_s

    async def sleep(self, request: Request) -> Response:
        return await answered(lambda: self._sleep(request))

    async def wake_up(self, request: Request) -> Response:
        return await answered(lambda: self._wake_up(request))

    async def is_sleeping(self, request: Request) -> Response:
        levels = self.sleeps.levels
        nodes = {node_id: levels.get(node_id, 0) for node_id in self.frontend.node_ids}
        return json_response({"is_sleeping": self.sleeps.is_sleeping, "nodes": nodes})

    async def _sleep(self, request: Request) -> Response:
        query = request.query_params
        level_text, mode = query.get("level", "1"), query.get("mode", "abort")
        try:
            level = check_level(_int_or_text(level_text))
            if mode == "keep":
                raise SleepModeError("mode 'keep' is not taken: a sleep discards the KV the kept requests would need")
            if mode not in ("abort", "wait"):
                raise SleepModeError(f"mode must be abort or wait, got {mode[:64]!r}")
        except SleepModeError as e:
            return http_error_response(400, str(e), code="invalid_sleep")
        selected = await selected_nodes(request, self.frontend, self.read_timeout_s)
        if isinstance(selected, Response):
            return selected
        nodes = await until_disconnect(request, self.sleeps.sleep(selected[0], level, mode))
        return _reply("sleep", nodes)

    async def _wake_up(self, request: Request) -> Response:
        tags = request.query_params.getlist("tags")
        try:
            check_tags(tags)
        except SleepModeError as e:
            return http_error_response(400, str(e), code="invalid_sleep")
        selected = await selected_nodes(request, self.frontend, self.read_timeout_s)
        if isinstance(selected, Response):
            return selected
        nodes = await until_disconnect(request, self.sleeps.wake_up(selected[0], tags))
        return _reply("wake_up", nodes)


def _reply(action: str, nodes: dict) -> Response:
    if any(answer is not None and answer["ok"] for answer in nodes.values()):
        return json_response({"object": action, "nodes": nodes})
    if all(answer is None for answer in nodes.values()):  # a "wait" sleep still waiting, or nodes that are slow
        return json_response({"object": action, "nodes": nodes}, status=202)
    why = "; ".join(f"{n}: {'no answer' if a is None else a['detail']}" for n, a in list(nodes.items())[:16])
    return http_error_response(400, f"No node could {action.replace('_', ' ')}. {why}", code="sleep_error")


def _int_or_text(text: str) -> int | str:
    """``?level=``'s number, or the text when it is none (check_level names it then)."""
    try:
        return int(text)
    except ValueError:  # "one", "2.0", "²" (a digit int() does not read)
        return text
