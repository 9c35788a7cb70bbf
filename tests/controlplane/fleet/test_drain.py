"""Graceful drain with real agent processes: SIGTERM to an agent, or `zoo drain NODE`, stops new routing to
it; its requests finish there, or resume elsewhere when it leaves at its drain timeout."""

from __future__ import annotations

import signal
import sys

import anyio
import pytest

from client import ZooInvalidRequestError
from observe.stats_stream import FleetObserver

pytestmark = pytest.mark.anyio

JOIN_TIMEOUT_S = 30.0
SLOW = ("--fake-step-ms", "20")  # 20 ms per engine step: a request of N tokens takes N x 20 ms


async def _start(cp, spawn_agent, *flags_a: str):
    a = spawn_agent(cp.agent_endpoint, "a", *SLOW, *flags_a)
    b = spawn_agent(cp.agent_endpoint, "b", *SLOW)
    await cp.wait_until(lambda: len(cp.registry) == 2, JOIN_TIMEOUT_S)
    return a, b


async def _streams_on(c, node_id: str, count: int, max_tokens: int) -> tuple[list, list]:
    """Round robin: open streams until ``count`` of them run on ``node_id``; (theirs, the others)."""
    mine, others = [], []
    while len(mine) < count:
        stream = await c.generate("drain me", max_tokens=max_tokens, stream=True)
        first = await stream.__anext__()
        (mine if first.node_id == node_id else others).append((first, stream))
    return mine, others


async def _finish(pairs) -> list[list]:
    return [[first, *[chunk async for chunk in stream]] for first, stream in pairs]


async def test_sigterm_drains_the_agent_its_requests_finish_there_and_new_ones_go_elsewhere(
    controlplane, spawn_agent, client
):
    async with controlplane("round_robin") as cp:
        a, _ = await _start(cp, spawn_agent)
        async with client(cp) as c:
            mine, others = await _streams_on(c, "a", 3, max_tokens=50)
            a.proc.send_signal(signal.SIGTERM)
            await cp.wait_until(lambda: str(cp.registry.state("a")) == "draining", 10)
            assert cp.stats()["nodes"]["a"]["state"] == "leaving"  # draining to stop: no resume undoes it
            assert [v.node_id for v in cp.registry.snapshot().nodes] == ["b"]
            new = [await c.generate("new", max_tokens=3) for _ in range(4)]
            assert {d.node_id for d in new} == {"b"}
            with anyio.fail_after(30):
                finished = await _finish(mine + others)
                assert await anyio.to_thread.run_sync(a.proc.wait, 20) == 0  # left once empty
        for chunks in finished[: len(mine)]:
            assert chunks[-1].node_id == "a" and chunks[-1].finished and chunks[-1].num_output_tokens == 50
        await cp.wait_until(lambda: "a" not in cp.registry, 10)
        requests = cp.stats()["requests"]
        assert (requests["failed"], requests["resumed"]) == (0, 0)
        assert "drained" in a.output() or "leaving" in a.output()


async def test_requests_left_at_the_drain_timeout_resume_on_another_node(controlplane, spawn_agent, client):
    max_tokens = 150  # 3 s at 20 ms a step: longer than a's drain timeout
    async with controlplane("round_robin") as cp:
        a, _ = await _start(cp, spawn_agent, "--drain-timeout-s", "0.3")
        async with client(cp) as c:
            mine, others = await _streams_on(c, "a", 2, max_tokens=max_tokens)
            a.proc.send_signal(signal.SIGTERM)
            with anyio.fail_after(30):
                finished = await _finish(mine + others)
        assert a.proc.wait(timeout=10) == 0
        for chunks in finished:
            assert sum(len(ch.token_ids) for ch in chunks) == max_tokens
            assert [ch.num_output_tokens for ch in chunks] == list(range(1, max_tokens + 1))
            assert chunks[-1].node_id == "b" and chunks[-1].finish_reason == "length"
        requests = cp.stats()["requests"]
        assert (requests["failed"], requests["resumed"]) == (0, len(mine))


async def test_zoo_drain_stops_routing_to_a_running_node(controlplane, spawn_agent, client):
    long = 2000  # 40 s at 20 ms a step: still running whenever `zoo drain` gets to start, however slow the machine
    async with controlplane("round_robin") as cp:
        a, _ = await _start(cp, spawn_agent)
        async with client(cp) as c:
            ((first, stream),), _ = await _streams_on(c, "a", 1, max_tokens=long)
            cli = [sys.executable, "-m", "zoo", "drain", "a", "--control", cp.client_endpoint]
            result = await anyio.run_process(cli, check=False)
            assert result.returncode == 0, result.stderr.decode()
            assert b"node a is draining: 1 requests in flight" in result.stdout
            assert cp.stats()["nodes"]["a"]["state"] == "draining"
            shown = {n.node_id: n.state for n in FleetObserver(cp).fleet_stats(0).nodes}  # what `zoo top` shows
            assert shown == {"a": "draining", "b": "up"}
            assert {(await c.generate("new", max_tokens=2)).node_id for _ in range(3)} == {"b"}
            with anyio.fail_after(30):  # the running request keeps streaming from a
                more = [await stream.__anext__() for _ in range(5)]
            assert {ch.node_id for ch in (first, *more)} == {"a"} and not more[-1].finished
            await stream.cancel()
            await cp.wait_until(lambda: len(cp.requests) == 0, 30)
            assert a.proc.poll() is None  # drained, not stopped
            assert await c.drain("a") == 0  # again: nothing left there
            with pytest.raises(ZooInvalidRequestError, match="unknown node"):
                await c.drain("nope")
        result = await anyio.run_process([*cli[:4], "nope", *cli[5:]], check=False)
        assert result.returncode == 1 and b"unknown node 'nope'" in result.stderr


async def test_zoo_drain_resume_routes_to_the_node_again(controlplane, spawn_agent, client):
    async with controlplane("round_robin") as cp:
        a, _ = await _start(cp, spawn_agent)
        async with client(cp) as c:
            assert await c.drain("a") == 0
            assert {(await c.generate("new", max_tokens=2)).node_id for _ in range(3)} == {"b"}
            cli = [sys.executable, "-m", "zoo", "drain", "--resume", "nope", "a", "--control", cp.client_endpoint]
            result = await anyio.run_process(cli, check=False)  # one refused: the other is still asked, exit 1
            assert result.returncode == 1 and b"nope: unknown node 'nope'" in result.stderr, result.stderr.decode()
            assert b"node a takes new requests again" in result.stdout
            assert cp.stats()["nodes"]["a"]["state"] == "up" and cp.stats()["registry"]["num_resumes_total"] == 1
            assert {(await c.generate("new", max_tokens=2)).node_id for _ in range(4)} == {"a", "b"}
            assert await c.drain("a", resume=True) == 0  # again: it is not draining, nothing to do
            with pytest.raises(ZooInvalidRequestError, match="unknown node"):
                await c.drain("nope", resume=True)
            await cp.wait_until(lambda: "resumed by the control plane" in a.output(), 10)


async def test_a_node_whose_agent_drains_to_stop_cannot_be_resumed(controlplane, spawn_agent, client):
    long = 2000  # 40 s at 20 ms a step: the agent still waits for it when the resume is asked
    async with controlplane("round_robin") as cp:
        a, _ = await _start(cp, spawn_agent)
        async with client(cp) as c:
            ((_, stream),), _ = await _streams_on(c, "a", 1, max_tokens=long)
            a.proc.send_signal(signal.SIGTERM)
            await cp.wait_until(lambda: str(cp.registry.state("a")) == "draining", 10)
            with pytest.raises(ZooInvalidRequestError, match="shutting down"):
                await c.drain("a", resume=True)
            assert cp.stats()["nodes"]["a"]["state"] == "leaving" and str(cp.registry.state("a")) == "draining"
            await stream.cancel()


async def test_zoo_tops_node_actions_drain_and_resume_a_node(fleet_with_agents):
    from tui.node_actions import NodeActions  # what zoo top --client does at D and U

    async with fleet_with_agents("n0") as cp:
        actions = NodeActions(cp.client_endpoint, timeout_s=10)
        done, message = await actions("n0", "drain")
        assert done and "node n0 is draining: 0 requests" in message and str(cp.registry.state("n0")) == "draining"
        done, message = await actions("n0", "resume")
        assert done and "takes new requests again" in message and str(cp.registry.state("n0")) == "up"
        done, message = await actions("nope", "drain")
        assert not done and "unknown node 'nope'" in message
