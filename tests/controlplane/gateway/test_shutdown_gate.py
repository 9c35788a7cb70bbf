"""A draining frontend (the control plane shutting down): the gateway refuses new requests with a 503 in OpenAI's
shape, keeps the probes' paths open, lets the requests admitted before the drain finish, counts them, and holds its
batches' next requests (gateway/shutdown_gate.py, gateway/batch_runner.py)."""

from __future__ import annotations

import json
import time

import anyio
import httpx
import openai
import pytest

from controlplane.frontend import FrontendError
from controlplane.gateway import create_app
from controlplane.gateway.app import GatewayConfig
from controlplane.gateway.batch_runner import BatchRunnerConfig
from transport.messages import ErrorCode

BODY = {"model": "smol", "prompt": "hi", "max_tokens": 3}


def _client(app) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gateway")


@pytest.mark.anyio
async def test_new_requests_are_refused_with_a_503_in_openai_shape_while_draining(make_frontend):
    frontend = make_frontend()
    app = create_app(frontend)
    async with _client(app) as c:
        assert (await c.post("/v1/completions", json=BODY)).status_code == 200  # not draining: served
        frontend.draining = True
        for method, path in (("POST", "/v1/completions"), ("POST", "/v1/chat/completions"), ("GET", "/v1/models")):
            reply = await c.request(method, path, json=BODY if method == "POST" else None)
            assert reply.status_code == 503, path
            assert reply.json()["error"]["code"] == "server_shutting_down"
            assert reply.json()["error"]["type"] == "server_error"
            assert "shutting down" in reply.json()["error"]["message"]
            assert int(reply.headers["retry-after"]) >= 1
            assert reply.headers["connection"] == "close"  # the client's next request opens a new connection
        assert (await c.post("/no/such/path")).status_code == 503  # refused before routing: no path is served
    assert len(frontend.calls) == 1  # nothing reached the frontend while draining
    assert app.state.http_in_flight.refused == 4 and app.state.http_in_flight.idle


@pytest.mark.anyio
async def test_the_probes_paths_stay_open_and_health_says_draining(make_frontend):
    frontend = make_frontend(health_status="draining")  # what ControlPlane.health() says once it drains
    frontend.draining = True
    async with _client(create_app(frontend, metrics_app=_metrics_app)) as c:
        health = await c.get("/health")
        assert health.status_code == 503 and health.json()["status"] == "draining"  # a readiness probe fails
        assert (await c.get("/metrics")).status_code == 200
        assert (await c.get("/version")).status_code == 200


@pytest.mark.anyio
async def test_a_response_is_still_read_and_cancelled_while_draining(make_frontend):
    frontend = make_frontend()
    async with _client(create_app(frontend)) as c:
        done = (await c.post("/v1/responses", json={"model": "smol", "input": "Hi"})).json()
        frontend.draining = True
        read = await c.get(f"/v1/responses/{done['id']}")  # its result, before a restart forgets it
        assert read.status_code == 200 and read.json()["status"] == "completed"
        assert (await c.get(f"/v1/responses/{done['id']}/input_items")).status_code == 200
        assert (await c.post("/v1/responses", json={"model": "smol", "input": "Hi"})).status_code == 503
        assert (await c.delete(f"/v1/responses/{done['id']}")).status_code == 503  # reads and cancels only
        cancel = await c.post(f"/v1/responses/{done['id']}/cancel")  # served (a 400: it was not a background one)
        assert cancel.status_code == 400 and "background" in cancel.json()["error"]["message"]
        assert (await c.post("/v1/responses/x/other")).status_code == 503


@pytest.mark.anyio
async def test_a_conversation_is_still_read_while_draining(make_frontend):
    frontend = make_frontend()
    async with _client(create_app(frontend)) as c:
        made = (await c.post("/v1/conversations", json={"items": [{"role": "user", "content": "Hi"}]})).json()
        frontend.draining = True
        assert (await c.get(f"/v1/conversations/{made['id']}")).status_code == 200
        assert len((await c.get(f"/v1/conversations/{made['id']}/items")).json()["data"]) == 1
        assert (await c.post("/v1/conversations", json={})).status_code == 503  # reads only
        assert (await c.post(f"/v1/conversations/{made['id']}/items", json={"items": []})).status_code == 503
        assert (await c.delete(f"/v1/conversations/{made['id']}")).status_code == 503


@pytest.mark.anyio
async def test_stored_chat_completions_are_still_read_while_draining(make_frontend):
    frontend = make_frontend()
    async with _client(create_app(frontend)) as c:
        chat = {"messages": [{"role": "user", "content": "Hi"}], "store": True}
        made = (await c.post("/v1/chat/completions", json=chat)).json()
        frontend.draining = True
        path = f"/v1/chat/completions/{made['id']}"
        assert (await c.get(path)).status_code == 200 and (await c.get(f"{path}/messages")).status_code == 200
        assert [o["id"] for o in (await c.get("/v1/chat/completions")).json()["data"]] == [made["id"]]
        assert (await c.post("/v1/chat/completions", json=chat)).status_code == 503  # reads only
        assert (await c.post(path, json={"metadata": {"k": "v"}})).status_code == 503
        assert (await c.delete(path)).status_code == 503


async def _metrics_app(scope, receive, send):
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"up 1\n"})


@pytest.mark.anyio
async def test_a_request_admitted_before_the_drain_finishes_and_is_counted_until_then(make_frontend):
    class Slow(make_frontend):
        def generate(self, request_id, **kwargs):
            return self._after(self.go, super().generate(request_id, **kwargs))

        async def _after(self, go, chunks):
            await go.wait()  # its node is still working on it
            async for chunk in chunks:
                yield chunk

    frontend = Slow()
    frontend.go = anyio.Event()
    app = create_app(frontend)
    in_flight = app.state.http_in_flight
    replies: list[httpx.Response] = []
    async with _client(app) as c, anyio.create_task_group() as tg:

        async def admitted() -> None:
            replies.append(await c.post("/v1/completions", json=BODY))

        tg.start_soon(admitted)
        with anyio.fail_after(10):
            while in_flight.count == 0 or len(frontend.calls) == 0:
                await anyio.sleep(0.01)
        frontend.draining = True
        assert (await c.post("/v1/completions", json=BODY)).status_code == 503  # a new one is refused
        assert in_flight.count == 1 and not replies  # the admitted one is still being answered
        frontend.go.set()
    assert replies[0].status_code == 200 and replies[0].json()["choices"][0]["text"] == "Hello, world"
    assert in_flight.idle and in_flight.refused == 1


@pytest.mark.anyio
async def test_a_frontend_without_draining_is_never_refused(make_frontend):
    frontend = make_frontend()
    assert not hasattr(frontend, "draining")
    async with _client(create_app(frontend)) as c:
        assert (await c.post("/v1/completions", json=BODY)).status_code == 200


def test_a_batch_is_held_while_draining_and_loses_nothing(make_frontend, serve):
    """Its line refused by the draining control plane (503) is neither failed nor sent again while the drain lasts,
    though a retry was due: the next process (or an ended drain, here) answers it."""

    class Draining(make_frontend):
        def generate(self, request_id, **kwargs):
            if not self.calls:  # the first request meets the drain's start: refused, as the control plane refuses
                self.calls.append({"refused": True})
                self.draining = True
                return self._refuse()
            return super().generate(request_id, **kwargs)

        async def _refuse(self):
            raise FrontendError(ErrorCode.NO_NODE, "the control plane is shutting down", retry_after_s=0.01)
            yield  # an async generator, as generate's

    frontend = Draining()
    app = create_app(frontend, config=GatewayConfig(batches=BatchRunnerConfig(max_retries=1, backoff_s=0.01)))
    runner = app.state.batches
    with serve(app) as url, openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0) as c:
        upload = c.files.create(file=("in.jsonl", json.dumps(_LINE).encode() + b"\n"), purpose="batch")
        batch = c.batches.create(input_file_id=upload.id, endpoint="/v1/completions", completion_window="24h")
        deadline = time.monotonic() + 30
        while not getattr(frontend, "draining", False) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert frontend.draining
        time.sleep(1.0)  # four looks at the drain, a hundred back-offs: held all along
        held = runner.get(None, batch.id)
        assert len(frontend.calls) == 1 and held.status == "in_progress" and held.failed == 0
        frontend.draining = False  # the drain ends (in production: the next process resumes the batch)
        while runner.get(None, batch.id).status != "completed" and time.monotonic() < deadline + 30:
            time.sleep(0.02)
        done = c.batches.retrieve(batch.id)
    assert (done.status, done.request_counts.completed, done.request_counts.failed) == ("completed", 1, 0)
    assert len(frontend.calls) == 2


_LINE = {"custom_id": "q", "method": "POST", "url": "/v1/completions", "body": BODY}
