"""A background response (gateway/background_responses.py) through a real control plane, its gateway served by
serve_gateway, and an agent in process: it runs to its end with no client waiting, and its cancel stops the request
on the node."""

from __future__ import annotations

import anyio
import httpx
import pytest

from backends.fake import FAKE_MODEL_NAME, build_trivial_engine
from controlplane.gateway import create_app
from controlplane.gateway.http_server import serve_gateway

pytestmark = pytest.mark.anyio


async def _until(http: httpx.AsyncClient, response_id: str, *statuses: str) -> dict:
    with anyio.fail_after(60):
        while (reply := (await http.get(f"/v1/responses/{response_id}")).json())["status"] not in statuses:
            await anyio.sleep(0.01)
    return reply


async def test_a_background_response_runs_alone_and_its_cancel_stops_the_node(fleet_with_agents):
    engine = build_trivial_engine(step_s=0.01)
    async with fleet_with_agents("a", engines=[engine]) as cp, anyio.create_task_group() as tg:
        server = await tg.start(serve_gateway, create_app(cp), "127.0.0.1", 0)  # it runs the background responses
        port = server.servers[0].sockets[0].getsockname()[1]
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:
            body = {"model": FAKE_MODEL_NAME, "input": "Hi", "background": True, "max_output_tokens": 5}
            created = (await http.post("/v1/responses", json=body)).json()
            assert created["status"] == "queued"
            done = await _until(http, created["id"], "completed", "incomplete", "failed")
            assert done["usage"]["output_tokens"] == 5 and done["output"][0]["content"][0]["text"]

            long = (await http.post("/v1/responses", json={**body, "max_output_tokens": 3000})).json()
            await _until(http, long["id"], "in_progress")
            assert engine.num_unfinished_requests == 1
            cancelled = (await http.post(f"/v1/responses/{long['id']}/cancel")).json()
            assert cancelled["status"] == "cancelled"
            with anyio.fail_after(30):  # the node was told to stop: nothing left there or in the control plane
                while engine.num_unfinished_requests or len(cp.requests):
                    await anyio.sleep(0.01)
            stored = await _until(http, long["id"], "cancelled")
            assert stored["usage"] is None and stored["output"] == []
        tg.cancel_scope.cancel()
