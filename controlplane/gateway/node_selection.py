"""The nodes an operator's route acts on: every node of the fleet, or those its JSON body names (``{"nodes": [...]}``),
of a GPU type (``"gpu_type": "T4"``) or of a cell (``"cell": "west"``): the keys given are all met.

POST /start_profile, /stop_profile (profile_routes.py), /sleep and /wake_up (sleep_routes.py) take it; vLLM's own
routes act on its one engine and take no body, so an empty body (or none) means every node, as there. On a fleet of
mismatched GPUs, a GPU type is what an operator most often means: the T4s put to sleep at night, the H100s profiled.

    selected_nodes(request, frontend, read_timeout_s) ─► (node ids, named: whether the body chose them), or the
        error to answer: 400 for a body that is not JSON, not the shape, names a node not in the fleet, or chooses
        none (code "invalid_nodes"); 503 before any node joined ("no_node")
"""

from __future__ import annotations

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from controlplane.gateway.errors import http_error_response
from controlplane.gateway.request_body import read_body

MAX_NODES_BODY_BYTES = 64 * 1024


class _Body(msgspec.Struct):
    nodes: list[str] | None = None  # other keys are ignored: vLLM's routes take no body at all
    gpu_type: str | None = None
    cell: str | None = None


async def selected_nodes(request: Request, frontend, read_timeout_s: float) -> tuple[list[str], bool] | Response:
    raw = await read_body(request, MAX_NODES_BODY_BYTES, read_timeout_s)
    try:
        body = msgspec.json.decode(raw, type=_Body) if raw.strip() else _Body()
    except msgspec.ValidationError as e:
        return http_error_response(400, f"Invalid request body: {e}", code="invalid_nodes")
    except msgspec.DecodeError as e:
        return http_error_response(400, f"The request body is not valid JSON: {e}")
    known = frontend.node_ids
    if not known:
        return http_error_response(503, "No node has joined the fleet yet", code="no_node")
    unknown = [] if body.nodes is None else [n for n in body.nodes if n not in known]
    if unknown:
        names = ", ".join(repr(n[:64]) for n in unknown[:8])
        return http_error_response(400, f"Not in the fleet: {names}", code="invalid_nodes")
    chosen = list(dict.fromkeys(body.nodes)) if body.nodes else list(known)
    if body.gpu_type is None and body.cell is None:
        return chosen, bool(body.nodes)
    rows = frontend.stats()["nodes"] if hasattr(frontend, "stats") else {}  # each node's gpu_type and cell
    chosen = [n for n in chosen if n in rows and _matches(rows[n], body)]
    if not chosen:
        wanted = ", ".join(f"{key} {value[:64]!r}" for key, value in (("gpu_type", body.gpu_type), ("cell", body.cell))
                           if value is not None)  # fmt: skip
        return http_error_response(400, f"No node of {wanted} in the fleet", code="invalid_nodes")
    return chosen, True


def _matches(row: dict, body: _Body) -> bool:
    return body.gpu_type in (None, row.get("gpu_type")) and body.cell in (None, row.get("cell"))
