"""Join, leave, heartbeat expiry, agent restart and rejoin, control-plane restart, client cancellation."""

from __future__ import annotations

import pytest

from client import ZooNodeFailedError
from transport.messages import ErrorCode

pytestmark = pytest.mark.anyio

JOIN_TIMEOUT_S = 30.0
SLOW = ("--fake-step-ms", "20")  # 20 ms per step: a long request stays in flight for seconds


async def test_clean_leave_removes_the_node_at_once_and_fails_its_requests(controlplane, spawn_agent, client):
    async with controlplane(heartbeat_timeout_s=60.0) as cp:  # expiry cannot be what removes it
        agent = spawn_agent(cp.agent_endpoint, "a", *SLOW, "--drain-timeout-s", "0")  # SIGTERM: no draining
        await cp.wait_until(lambda: "a" in cp.registry, JOIN_TIMEOUT_S)
        async with client(cp) as c:
            stream = await c.generate("long", max_tokens=100_000, stream=True)
            assert agent.terminate() == 0  # SIGTERM: NodeLeave, exit 0
            await cp.wait_until(lambda: "a" not in cp.registry, 10)
            with pytest.raises(ZooNodeFailedError, match="left"):
                async for _ in stream:
                    pass
        assert cp.stats()["requests"]["failed"] == 1


async def test_killed_agent_expires_and_its_inflight_requests_fail_with_node_failed(controlplane, spawn_agent, client):
    async with controlplane(heartbeat_timeout_s=1.0) as cp:
        victim = spawn_agent(cp.agent_endpoint, "victim", *SLOW)
        await cp.wait_until(lambda: "victim" in cp.registry, JOIN_TIMEOUT_S)
        async with client(cp) as c:
            streams = [await c.generate("doomed", max_tokens=100_000, stream=True) for _ in range(2)]
            for s in streams:
                await s.__anext__()  # it is really running there
            victim.kill()  # SIGKILL: no NodeLeave; only the silence tells
            for s in streams:
                with pytest.raises(ZooNodeFailedError) as failed:
                    async for _ in s:
                        pass
                assert failed.value.code is ErrorCode.NODE_FAILED
                assert "victim" in failed.value.message and "heartbeats" in failed.value.message
        assert "victim" not in cp.registry
        assert cp.stats()["nodes"]["victim"]["requests_failed"] == 2


async def test_restarted_agent_rejoins_and_serves(controlplane, spawn_agent, client):
    async with controlplane(heartbeat_timeout_s=1.0) as cp:
        first = spawn_agent(cp.agent_endpoint, "phoenix")
        await cp.wait_until(lambda: "phoenix" in cp.registry, JOIN_TIMEOUT_S)
        first_pid = cp.registry.hello("phoenix").pid
        first.kill()
        await cp.wait_until(lambda: "phoenix" not in cp.registry, 10)
        spawn_agent(cp.agent_endpoint, "phoenix")
        await cp.wait_until(lambda: "phoenix" in cp.registry, JOIN_TIMEOUT_S)
        assert cp.registry.hello("phoenix").pid != first_pid
        async with client(cp) as c:
            done = await c.generate("again", max_tokens=3)
        assert (done.node_id, done.text) == ("phoenix", "zzz")


async def test_restart_before_expiry_fails_the_old_requests_as_restarted(controlplane, spawn_agent, client):
    async with controlplane(heartbeat_timeout_s=60.0) as cp:
        first = spawn_agent(cp.agent_endpoint, "quick", *SLOW)
        await cp.wait_until(lambda: "quick" in cp.registry, JOIN_TIMEOUT_S)
        first_pid = cp.registry.hello("quick").pid
        async with client(cp) as c:
            stream = await c.generate("long", max_tokens=100_000, stream=True)
            first.kill()
            spawn_agent(cp.agent_endpoint, "quick")  # the same node id, before anyone noticed
            with pytest.raises(ZooNodeFailedError, match="restarted"):
                async for _ in stream:
                    pass
            assert cp.registry.hello("quick").pid != first_pid
            assert (await c.generate("after", max_tokens=2)).node_id == "quick"


async def test_agents_rejoin_a_restarted_control_plane(controlplane, spawn_agent, client):
    async with controlplane() as cp:
        endpoint = cp.agent_endpoint
        spawn_agent(endpoint, "a")
        spawn_agent(endpoint, "b")
        await cp.wait_until(lambda: len(cp.registry) == 2, JOIN_TIMEOUT_S)
    async with controlplane(agent_endpoint=endpoint) as cp2:  # same address, fresh process state
        await cp2.wait_until(lambda: len(cp2.registry) == 2, JOIN_TIMEOUT_S)
        async with client(cp2) as c:
            assert (await c.generate("hi", max_tokens=2)).text == "zz"


async def test_client_cancel_stops_the_request_on_its_node(controlplane, spawn_agent, client):
    async with controlplane() as cp:
        spawn_agent(cp.agent_endpoint, "a", *SLOW)
        await cp.wait_until(lambda: "a" in cp.registry, JOIN_TIMEOUT_S)
        async with client(cp) as c:
            async with await c.generate("stop me", max_tokens=100_000, stream=True) as stream:
                await stream.__anext__()
                await stream.__anext__()
                await cp.wait_until(lambda: cp.node_view("a").num_running == 1, 10)
            # leaving the block closed the stream: CancelRequest → control plane → node
            await cp.wait_until(lambda: cp.stats()["requests"]["cancelled"] == 1, 10)
            await cp.wait_until(lambda: cp.node_view("a").num_running == 0, 10)
            assert cp.node_view("a").num_inflight == 0


async def test_a_vanished_client_gets_its_request_cancelled(controlplane, spawn_agent, client):
    async with controlplane() as cp:
        spawn_agent(cp.agent_endpoint, "a", *SLOW)
        await cp.wait_until(lambda: "a" in cp.registry, JOIN_TIMEOUT_S)
        async with client(cp) as c:
            await (await c.generate("orphan", max_tokens=100_000, stream=True)).__anext__()
            c._streams.clear()  # forget it locally: the client sends no CancelRequest
        # the client's socket is closed: the next chunk is undeliverable and the request is cancelled
        await cp.wait_until(lambda: cp.stats()["requests"]["cancelled"] == 1, 10)
        await cp.wait_until(lambda: cp.node_view("a").num_running == 0, 10)
