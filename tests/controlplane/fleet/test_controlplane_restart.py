"""The control plane as a real process: killed with SIGKILL and restarted (no ZeroMQ client hangs, agents come
back), and stopped with SIGTERM (HTTP streams end with an SSE error event, ZeroMQ clients get an error)."""

from __future__ import annotations

import json
import signal
import socket
import time

import anyio
import httpx
import pytest

from backends.fake import FAKE_MODEL_NAME
from client import AsyncZooClient, ZooConnectionLostError, ZooNodeFailedError
from observe.stats_stream import subscribe

pytestmark = pytest.mark.anyio

SLOW = ("--fake-step-ms", "20")
START_TIMEOUT_S = 60.0


async def _until_nodes_up(stats_endpoint: str, num_nodes: int, started_ns: int = 0):
    """The first FleetStats (of a control plane started after ``started_ns``) with ``num_nodes`` nodes up;
    returns it and the first FleetStats that control plane published."""
    first = None
    async for stats in subscribe(stats_endpoint):
        if stats.started_ns <= started_ns:
            continue
        first = first or stats
        if sum(n.state == "up" for n in stats.nodes) >= num_nodes:
            return stats, first
    raise AssertionError("unreachable")


async def test_a_killed_and_restarted_control_plane_leaves_no_client_hanging(spawn_controlplane, spawn_agent):
    cp1 = spawn_controlplane()
    spawn_agent(cp1.agent_endpoint, "a", *SLOW)
    spawn_agent(cp1.agent_endpoint, "b", *SLOW)
    with anyio.fail_after(START_TIMEOUT_S):
        stats1, _ = await _until_nodes_up(cp1.stats_endpoint, 2)
    # the restart is what this test is about: the client calls a control plane silent only after 45 s (its default,
    # 5 s, is shorter than a loaded 2-core host may take to start the new process, which then fails the streams for
    # silence instead, with another message)
    async with AsyncZooClient(cp1.client_endpoint, timeout_s=60.0, connection_timeout_s=45.0) as c:
        streams = [await c.generate("long", max_tokens=100_000, stream=True) for _ in range(4)]
        for s in streams:
            await s.__anext__()  # tokens flow through the first control plane
        cp1.kill()
        killed_s = time.monotonic()
        cp2 = spawn_controlplane(cp1.ports)  # the same ports, a fresh process
        with anyio.fail_after(55):  # below the client's 60 s request timeout
            for s in streams:
                with pytest.raises(ZooConnectionLostError, match="no longer knows the request"):
                    async for _ in s:
                        pass
        errors_after_s = time.monotonic() - killed_s
        with anyio.fail_after(START_TIMEOUT_S):
            back, _ = await _until_nodes_up(cp2.stats_endpoint, 2, stats1.started_ns)
        rejoin_s = (back.sent_ns - back.started_ns) / 1e9  # at most this long after the new one started
        done = await c.generate("after the restart", max_tokens=3)
        assert done.text == "zzz"
        assert c.control_plane_started_ns > stats1.started_ns  # the Pongs come from the new process
    print(f"\nclient errors {errors_after_s:.2f} s after the kill; agents back <= {rejoin_s:.2f} s after the restart")


async def test_sigterm_ends_http_streams_with_an_sse_error_and_zeromq_streams_with_an_error(
    spawn_controlplane, spawn_agent, sse_events
):
    cp = spawn_controlplane()
    spawn_agent(cp.agent_endpoint, "a", *SLOW)
    with anyio.fail_after(START_TIMEOUT_S):
        await _until_nodes_up(cp.stats_endpoint, 1)
    body = {"model": FAKE_MODEL_NAME, "prompt": "hello", "max_tokens": 100_000, "stream": True}
    async with (
        AsyncZooClient(cp.client_endpoint, timeout_s=60.0) as c,
        httpx.AsyncClient(base_url=f"http://{cp.http}", timeout=30.0) as http,
    ):
        zmq_stream = await c.generate("long", max_tokens=100_000, stream=True)
        await zmq_stream.__anext__()

        async def when_streaming(events: list[str]) -> None:
            if len(events) == 2:  # streaming: now stop the control plane
                cp.proc.send_signal(signal.SIGTERM)

        with anyio.fail_after(30):
            events = await sse_events(http, "/v1/completions", body, when_streaming)
            with pytest.raises(ZooNodeFailedError, match="shutting down"):
                async for _ in zmq_stream:
                    pass
    assert cp.proc.wait(timeout=20) == 0
    assert events[-1] == "[DONE]"
    error = json.loads(events[-2])["error"]
    assert "shutting down" in error["message"] and error["type"]


async def test_a_stopped_control_plane_tells_its_zeromq_clients_at_once(controlplane, spawn_agent):
    """Its last ErrorReplies are flushed before the sockets close: no client waits for its watchdog."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        endpoint = f"tcp://127.0.0.1:{s.getsockname()[1]}"
    async with AsyncZooClient(endpoint, timeout_s=60.0, ping_interval_s=5.0, connection_timeout_s=30.0) as c:
        async with controlplane(client_endpoint=endpoint) as cp:
            spawn_agent(cp.agent_endpoint, "a", *SLOW)
            await cp.wait_until(lambda: "a" in cp.registry, START_TIMEOUT_S)
            stream = await c.generate("long", max_tokens=100_000, stream=True)
            await stream.__anext__()
        with anyio.fail_after(3), pytest.raises(ZooNodeFailedError, match="shutting down"):  # < 1 ping interval
            async for _ in stream:
                pass


async def test_a_restarted_control_plane_with_files_dir_still_has_its_conversations_and_responses(
    spawn_controlplane, spawn_agent, tmp_path
):
    """`zoo controlplane --files-dir`: a conversation, a response naming it, SIGTERM, a new process on the same
    directory: the conversation's items and the stored response are still there, and the response goes on."""
    cp1 = spawn_controlplane(None, "--files-dir", str(tmp_path))
    spawn_agent(cp1.agent_endpoint, "a")
    with anyio.fail_after(START_TIMEOUT_S):
        stats1, _ = await _until_nodes_up(cp1.stats_endpoint, 1)
    async with httpx.AsyncClient(base_url=f"http://{cp1.http}", timeout=30) as http:
        made = (await http.post("/v1/conversations", json={"items": [{"role": "user", "content": "hi"}]})).json()
        body = {"input": "more", "conversation": made["id"], "max_output_tokens": 3}
        response = (await http.post("/v1/responses", json=body)).json()
        before = (await http.get(f"/v1/conversations/{made['id']}/items")).json()
    cp1.proc.send_signal(signal.SIGTERM)
    assert await anyio.to_thread.run_sync(cp1.proc.wait, 30) == 0
    cp2 = spawn_controlplane(cp1.ports, "--files-dir", str(tmp_path))
    with anyio.fail_after(START_TIMEOUT_S):
        await _until_nodes_up(cp2.stats_endpoint, 1, stats1.started_ns)
    async with httpx.AsyncClient(base_url=f"http://{cp2.http}", timeout=30) as http:
        after = (await http.get(f"/v1/conversations/{made['id']}/items")).json()
        assert after == before and len(after["data"]) == 3
        assert (await http.get(f"/v1/responses/{response['id']}")).json() == response
        more = await http.post("/v1/responses", json={"input": "and?", "previous_response_id": response["id"]})
        assert more.status_code == 200, more.text
