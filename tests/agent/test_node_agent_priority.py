"""A GenerateRequest's priority (its traffic class's rank, set by the control plane's intake) and a resumed request's
count of earlier output reach the engine through the agent and its engine thread."""

from __future__ import annotations

import anyio
import pytest

from agent.agent_config import AgentConfig
from agent.node_agent import NodeAgent
from backends.fake import build_trivial_engine, cpu_test_hardware
from engine.sampling_params import SamplingParams
from transport.messages import CancelRequest, GenerateRequest, NodeHello, TokenChunk, Welcome

pytestmark = pytest.mark.anyio


async def _welcomed_agent(cp, tg) -> tuple[NodeAgent, bytes]:
    """A fake-runner agent started in ``tg`` and welcomed by the test's control plane ``cp``; (agent, its peer)."""
    agent = NodeAgent(
        cp.endpoint,
        build_trivial_engine(step_s=0.01),
        AgentConfig(node_id="n1", model_name="fake-bytes", hello_timeout_s=0.3),
        hardware=cpu_test_hardware(),
    )
    await tg.start(agent.run)
    peer, _ = await cp.expect(NodeHello)
    await cp.send(peer=peer, msg=Welcome(node_id="n1", heartbeat_interval_s=0.05, report_interval_s=0.05))
    return agent, peer


async def test_the_priority_of_a_generate_request_reaches_the_scheduler(router_peer):
    cp = router_peer
    async with anyio.create_task_group() as tg:
        agent, peer = await _welcomed_agent(cp, tg)
        for request_id, priority in (("vip", 2), ("plain", 0)):
            sampling = SamplingParams(max_tokens=10_000)
            msg = GenerateRequest(
                request_id=request_id,
                prompt_token_ids=[5],
                sampling=sampling,
                arrival_ns=0,
                routed_ns=0,
                priority=priority,
            )
            await cp.send(peer=peer, msg=msg)
            await cp.expect(TokenChunk, where=lambda c, rid=request_id: c.request_id == rid)
        scheduler = agent.engine.scheduler
        assert scheduler.get_request("vip").priority == 2 and scheduler.get_request("plain").priority == 0
        for request_id in ("vip", "plain"):
            await cp.send(peer=peer, msg=CancelRequest(request_id=request_id))
        tg.cancel_scope.cancel()


async def test_a_resumed_requests_count_reaches_the_engine_and_a_bad_one_is_an_error_reply(router_peer):
    """GenerateRequest.num_resumed_tokens (its prompt's last tokens are its earlier output) reaches the engine's
    request through the agent and its engine thread; a count not below the prompt's length is refused with an
    error reply, and the agent goes on serving."""
    from transport.messages import ErrorCode, ErrorReply

    cp = router_peer
    async with anyio.create_task_group() as tg:
        agent, peer = await _welcomed_agent(cp, tg)
        sampling = SamplingParams(max_tokens=10_000, frequency_penalty=1.0)

        def generate(request_id: str, num_resumed_tokens: int) -> GenerateRequest:
            return GenerateRequest(
                request_id=request_id, prompt_token_ids=[5, 6, 7], sampling=sampling, arrival_ns=0, routed_ns=0,
                num_resumed_tokens=num_resumed_tokens,
            )  # fmt: skip

        await cp.send(peer=peer, msg=generate("bad", 3))
        _, refused = await cp.expect(ErrorReply, where=lambda e: e.request_id == "bad")
        assert refused.code is ErrorCode.INVALID_REQUEST and "num_resumed_tokens" in refused.message
        await cp.send(peer=peer, msg=generate("resumed", 2))
        await cp.expect(TokenChunk, where=lambda c: c.request_id == "resumed")
        request = agent.engine.scheduler.get_request("resumed")
        assert request.num_resumed_tokens == 2 and request.logits_inputs().num_resumed_tokens == 2
        await cp.send(peer=peer, msg=CancelRequest(request_id="resumed"))
        tg.cancel_scope.cancel()
