"""NodeAgent.drain() and the control plane's NodeDrain, in this process (trivial engine) against a bare ROUTER
playing the control plane."""

from __future__ import annotations

import anyio
import pytest

from agent.agent_config import AgentConfig
from agent.node_agent import NodeAgent
from backends.fake import build_trivial_engine, cpu_test_hardware
from engine.sampling_params import SamplingParams
from transport.messages import (
    ErrorCode,
    ErrorReply,
    GenerateRequest,
    NodeDrain,
    NodeHello,
    Ping,
    Pong,
    TokenChunk,
    Welcome,
)

pytestmark = pytest.mark.anyio

WAIT_S = 10.0


@pytest.fixture
def cp(router_peer):
    return router_peer


async def _join(cp) -> bytes:
    peer, _ = await cp.expect(NodeHello, WAIT_S)
    await cp.send(Welcome(node_id="n1", heartbeat_interval_s=0.05, report_interval_s=0.05), peer)
    return peer


async def _start(tg, cp, **config) -> NodeAgent:
    agent = NodeAgent(
        cp.endpoint,
        build_trivial_engine(step_s=0.02),
        AgentConfig(node_id="n1", model_name="fake-bytes", hello_timeout_s=0.3, **config),
        hardware=cpu_test_hardware(),
    )
    await tg.start(agent.run)
    return agent


def _request(request_id: str, max_tokens: int) -> GenerateRequest:
    sampling = SamplingParams(max_tokens=max_tokens)
    ids = [10, 11]
    return GenerateRequest(request_id=request_id, prompt_token_ids=ids, sampling=sampling, arrival_ns=1, routed_ns=1)


async def test_drain_announces_itself_and_returns_once_every_chunk_is_sent(cp):
    async with anyio.create_task_group() as tg:
        agent = await _start(tg, cp)
        peer = await _join(cp)
        await cp.send(peer=peer, msg=_request("r1", max_tokens=10))
        await cp.expect(TokenChunk)  # running
        with anyio.fail_after(WAIT_S):
            drained = await agent.drain()
        assert drained and agent.draining
        assert len(agent._link.outbox) == 0  # handed to the socket: a stop now loses nothing
        _, drain = await cp.expect(NodeDrain)
        assert drain.node_id == "n1"
        _, last = await cp.expect(TokenChunk, where=lambda c: c.finished)
        assert last.num_output_tokens == 10
        tg.cancel_scope.cancel()


async def test_drain_gives_up_at_its_timeout(cp):
    async with anyio.create_task_group() as tg:
        agent = await _start(tg, cp, drain_timeout_s=0.2)
        peer = await _join(cp)
        await cp.send(peer=peer, msg=_request("long", max_tokens=100_000))
        await cp.expect(TokenChunk)
        with anyio.fail_after(WAIT_S):
            assert not await agent.drain()  # the caller stops the agent; the request resumes elsewhere
        tg.cancel_scope.cancel()


async def test_a_drained_agent_says_so_again_to_a_control_plane_it_joins_anew(cp):
    async with anyio.create_task_group() as tg:
        agent = await _start(tg, cp)
        peer = await _join(cp)
        await cp.send(peer=peer, msg=NodeDrain(node_id="n1", reason="zoo drain"))
        await cp.send(peer=peer, msg=Ping(request_id="after"))
        await cp.expect(Pong)  # handled in order: the NodeDrain was taken before the Ping
        assert agent.draining
        # a restarted control plane does not know it: "send NodeHello"
        await cp.send(
            peer=peer, msg=ErrorReply(code=ErrorCode.INVALID_REQUEST, message="unknown node 'n1': send NodeHello")
        )
        await _join(cp)
        _, drain = await cp.expect(NodeDrain)  # right after the new Welcome
        assert drain.node_id == "n1" and agent.draining
        tg.cancel_scope.cancel()


async def test_a_resumed_agent_is_ready_again_and_announces_no_drain_when_it_joins_anew(cp):
    async with anyio.create_task_group() as tg:
        agent = await _start(tg, cp)
        peer = await _join(cp)
        await cp.send(peer=peer, msg=NodeDrain(node_id="n1", reason="zoo drain"))
        await cp.send(peer=peer, msg=NodeDrain(node_id="n1", reason="zoo drain --resume", resume=True))
        await cp.send(peer=peer, msg=Ping(request_id="after"))
        await cp.expect(Pong)
        assert not agent.draining and agent.health()["status"] == "ok"
        await cp.send(
            peer=peer, msg=ErrorReply(code=ErrorCode.INVALID_REQUEST, message="unknown node 'n1': send NodeHello")
        )
        await _join(cp)
        await cp.send(peer=peer, msg=Ping(request_id="then"))
        between = []
        with anyio.fail_after(WAIT_S):
            while not isinstance(msg := await cp.recv(), Pong):
                between.append(msg)
        assert not [m for m in between if isinstance(m, NodeDrain)]  # a drained one says so right after the Welcome
        tg.cancel_scope.cancel()


async def test_an_agent_draining_to_stop_refuses_a_resume(cp):
    async with anyio.create_task_group() as tg:
        agent = await _start(tg, cp)
        peer = await _join(cp)
        await cp.send(peer=peer, msg=_request("long", max_tokens=100_000))
        await cp.expect(TokenChunk)
        tg.start_soon(agent.drain)  # SIGTERM's drain: it waits for the request
        _, drain = await cp.expect(NodeDrain)
        assert drain.leaving
        await cp.send(peer=peer, msg=NodeDrain(node_id="n1", resume=True))
        _, again = await cp.expect(NodeDrain)
        assert again.leaving and agent.draining and agent.health()["status"] == "draining"
        tg.cancel_scope.cancel()
