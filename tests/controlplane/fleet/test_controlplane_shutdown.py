"""The control plane's shutdown drain (zoo/controlplane_shutdown.py, `zoo controlplane --shutdown-timeout`): at SIGTERM
new requests are refused (HTTP 503, a ZeroMQ ErrorReply, /health "draining") while those in flight finish; a
second signal, or the timeout, fails what is left. In process (ControlPlane.start_drain) and as a real process."""

from __future__ import annotations

import json
import signal

import anyio
import httpx
import pytest

from backends.fake import FAKE_MODEL_NAME
from client import AsyncZooClient, ZooNodeFailedError, ZooNoNodeError
from transport.messages import ErrorCode
from zoo.controlplane_shutdown import _drain

pytestmark = pytest.mark.anyio

SLOW = ("--fake-step-ms", "20")
START_TIMEOUT_S = 60.0


async def test_a_draining_control_plane_refuses_new_requests_and_lets_those_in_flight_finish(
    controlplane, spawn_agent, client
):
    async with controlplane() as cp:
        spawn_agent(cp.agent_endpoint, "a", *SLOW)
        await cp.wait_until(lambda: "a" in cp.registry, START_TIMEOUT_S)
        async with client(cp, timeout_s=60.0) as c:
            stream = await c.generate("before", max_tokens=40, stream=True)
            await stream.__anext__()
            cp.start_drain()
            assert cp.draining and cp.health()["status"] == "draining"
            with pytest.raises(ZooNoNodeError, match="shutting down") as refused:
                await c.generate("after", max_tokens=3)
            assert refused.value.retry_after_s and refused.value.retry_after_s >= 1
            assert cp.path.refused[ErrorCode.NO_NODE] == 1
            num_tokens = 1 + sum([len(chunk.token_ids) async for chunk in stream])
        assert num_tokens == 40  # the request admitted before the drain ran to its end
        assert len(cp.requests) == 0


async def test_a_models_request_waiting_for_a_first_node_is_answered_when_the_drain_starts(controlplane):
    """Else it would wait until the process stops and be cut off there (a 500)."""
    async with controlplane() as cp, anyio.create_task_group() as tg:
        answers: list = []

        async def wait() -> None:
            answers.append(await cp.wait_for_models(3600.0))

        tg.start_soon(wait)
        await anyio.sleep(0.1)
        assert not answers  # no node has joined: it waits
        cp.start_drain()
        with anyio.fail_after(10):
            while not answers:
                await anyio.sleep(0.01)
    assert answers == [[]]


async def test_the_drain_ends_when_idle_at_a_second_signal_or_at_its_timeout():
    class Signals:
        def __init__(self, num: int) -> None:
            self.num = num

        def __aiter__(self):
            return self

        async def __anext__(self):
            if not self.num:
                await anyio.sleep_forever()
            self.num -= 1
            await anyio.sleep(0.2)
            return signal.SIGTERM

    looks = iter(range(3))
    with anyio.fail_after(30):
        assert await _drain(lambda: next(looks, 2) >= 2, Signals(0), 3600.0) == "done"
        assert await _drain(lambda: False, Signals(1), 3600.0) == "cut short"
        assert await _drain(lambda: False, Signals(0), 0.2) == "timed out"


async def test_sigterm_drains_http_and_zeromq_streams_then_the_process_exits(
    spawn_controlplane, spawn_agent, sse_events
):
    """As a process: a new HTTP request is answered 503 (OpenAI's shape, Retry-After, Connection: close), /health 503
    "draining", a new ZeroMQ request refused; the streams admitted before SIGTERM end as they would have."""
    cp = spawn_controlplane(None, "--shutdown-timeout", "120")
    spawn_agent(cp.agent_endpoint, "a", *SLOW)
    body = {"model": FAKE_MODEL_NAME, "prompt": "hello", "max_tokens": 150, "stream": True}
    async with (
        AsyncZooClient(cp.client_endpoint, timeout_s=60.0) as c,
        httpx.AsyncClient(base_url=f"http://{cp.http}", timeout=30.0) as http,
    ):
        with anyio.fail_after(START_TIMEOUT_S):
            while (await _health(cp.http)).get("status") != "ok":
                await anyio.sleep(0.1)
        zmq_stream = await c.generate("long", max_tokens=150, stream=True)
        await zmq_stream.__anext__()
        seen: dict = {}

        async def when_streaming(events: list[str]) -> None:
            if len(events) == 2:  # streaming: now stop the control plane, then ask it for more
                cp.proc.send_signal(signal.SIGTERM)
                while (health := await _health(cp.http)).get("status") != "draining":
                    await anyio.sleep(0.02)
                seen["health"], seen["refused"] = health, await _post(cp.http, {**body, "stream": False})
                with pytest.raises(ZooNoNodeError, match="shutting down"):
                    await c.generate("after", max_tokens=3)

        with anyio.fail_after(60):
            events = await sse_events(http, "/v1/completions", body, when_streaming)
            zmq_tokens = 1 + sum([len(chunk.token_ids) async for chunk in zmq_stream])
    assert cp.proc.wait(timeout=30) == 0
    health, refused = seen["health"], seen["refused"]
    assert health["status"] == "draining"
    assert refused.status_code == 503 and refused.json()["error"]["code"] == "server_shutting_down"
    assert refused.headers["retry-after"] and refused.headers["connection"] == "close"
    assert events[-1] == "[DONE]" and all("error" not in json.loads(e) for e in events[:-1])
    assert json.loads(events[-2])["choices"][0]["finish_reason"] == "length"  # the whole stream, to its end
    assert zmq_tokens == 150
    assert "drain done" in cp.output()


async def test_a_second_sigterm_fails_what_the_drain_has_left(spawn_controlplane, spawn_agent):
    cp = spawn_controlplane(None, "--shutdown-timeout", "600")
    spawn_agent(cp.agent_endpoint, "a", *SLOW)
    async with AsyncZooClient(cp.client_endpoint, timeout_s=60.0) as c:
        with anyio.fail_after(START_TIMEOUT_S):
            while (await _health(cp.http)).get("status") != "ok":
                await anyio.sleep(0.1)
        stream = await c.generate("long", max_tokens=100_000, stream=True)
        await stream.__anext__()
        cp.proc.send_signal(signal.SIGTERM)
        with anyio.fail_after(30):
            while (await _health(cp.http)).get("status") != "draining":
                await anyio.sleep(0.02)
        await stream.__anext__()  # it goes on while the drain lasts
        cp.proc.send_signal(signal.SIGTERM)
        with anyio.fail_after(30), pytest.raises(ZooNodeFailedError, match="shutting down"):
            async for _ in stream:
                pass
    assert cp.proc.wait(timeout=30) == 0
    assert "drain cut short" in cp.output()


async def _health(address: str) -> dict:
    try:
        async with httpx.AsyncClient(base_url=f"http://{address}", timeout=5.0) as http:
            return (await http.get("/health")).json()
    except (httpx.TransportError, ValueError):
        return {}  # not listening yet


async def _post(address: str, body: dict) -> httpx.Response:
    async with httpx.AsyncClient(base_url=f"http://{address}", timeout=30.0) as http:  # a new connection
        return await http.post("/v1/completions", json=body)
