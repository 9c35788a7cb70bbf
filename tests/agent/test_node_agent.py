"""NodeAgent in this process (trivial engine) against a bare ROUTER playing the control plane."""

from __future__ import annotations

import anyio
import pytest

from agent.agent_config import AgentConfig
from agent.node_agent import NodeAgent
from backends.fake import build_trivial_engine, cpu_test_hardware
from engine.sampling_params import SamplingParams
from transport.messages import (
    CancelRequest,
    ErrorCode,
    ErrorReply,
    GenerateRequest,
    Heartbeat,
    LoadReport,
    NodeHello,
    NodeLeave,
    TokenChunk,
    Welcome,
)

pytestmark = pytest.mark.anyio


async def _start(tg, cp, step_s: float = 0.0, **config) -> NodeAgent:
    config.setdefault("hello_timeout_s", 0.3)
    agent = NodeAgent(
        cp.endpoint,
        build_trivial_engine(step_s=step_s),
        AgentConfig(node_id="n1", model_name="fake-bytes", **config),
        hardware=cpu_test_hardware(),
    )
    await tg.start(agent.run)
    return agent


async def _join(cp) -> bytes:
    peer, _ = await cp.expect(NodeHello)
    await cp.send(peer=peer, msg=Welcome(node_id="n1", heartbeat_interval_s=0.05, report_interval_s=0.05))
    return peer


async def test_hello_describes_the_node_and_is_resent_until_welcome(router_peer):
    cp = router_peer
    async with anyio.create_task_group() as tg:
        await _start(tg, cp)
        peer, hello = await cp.expect(NodeHello)
        assert peer == b"n1"  # the routing id is the node id
        assert (hello.model, hello.hardware.gpu_type, hello.kv.num_device_blocks) == ("fake-bytes", "cpu", 4096)
        assert hello.kv.bytes_per_block > 0 and hello.max_model_len == 4096 and hello.power_score > 0
        await cp.expect(NodeHello)  # no Welcome: said again
        await cp.send(peer=peer, msg=Welcome(node_id="n1", heartbeat_interval_s=0.05, report_interval_s=0.05))
        await cp.expect(Heartbeat)
        _, report = await cp.expect(LoadReport)
        assert report.node_id == "n1" and report.num_running == 0
        tg.cancel_scope.cancel()
    _, leave = await cp.expect(NodeLeave)  # clean shutdown says goodbye
    assert leave.node_id == "n1"


async def test_streams_tokens_and_reports_load(router_peer):
    cp = router_peer
    async with anyio.create_task_group() as tg:
        await _start(tg, cp)
        peer = await _join(cp)
        request = GenerateRequest(
            request_id="r1",
            prompt_token_ids=[10, 11, 12],
            sampling=SamplingParams(max_tokens=3),
            arrival_ns=1,
            routed_ns=2,
        )
        await cp.send(peer=peer, msg=request)
        chunks = []
        while not (chunks and chunks[-1].finished):
            chunks.append((await cp.expect(TokenChunk))[1])
        assert [c.num_output_tokens for c in chunks] == [1, 2, 3]
        assert chunks[-1].finish_reason == "length" and chunks[-1].node_id == "n1"
        assert all(c.sent_ns > 0 for c in chunks)
        _, report = await cp.expect(LoadReport, where=lambda r: r.num_requests_finished_total == 1)
        assert report.prefill_tok_per_s > 0 and report.recent_step_ms is not None
        tg.cancel_scope.cancel()


async def test_cancel_aborts_and_bad_sampling_is_refused(router_peer):
    cp = router_peer
    async with anyio.create_task_group() as tg:
        await _start(tg, cp, step_s=0.01)
        peer = await _join(cp)
        await cp.send(
            peer=peer,
            msg=GenerateRequest(
                request_id="long",
                prompt_token_ids=[5],
                sampling=SamplingParams(max_tokens=100_000),
                arrival_ns=0,
                routed_ns=0,
            ),
        )
        await cp.expect(TokenChunk)
        await cp.send(peer=peer, msg=CancelRequest(request_id="long"))
        await cp.expect(LoadReport, where=lambda r: r.num_running == 0 and r.decode_batch_size == 0)
        await cp.send(
            peer=peer,
            msg=GenerateRequest(
                request_id="bad",
                prompt_token_ids=[5],
                sampling=SamplingParams.unchecked(top_p=2.0),
                arrival_ns=0,
                routed_ns=0,
            ),
        )
        _, error = await cp.expect(ErrorReply)
        assert (error.request_id, error.code) == ("bad", ErrorCode.INVALID_REQUEST) and "top_p" in error.message
        tg.cancel_scope.cancel()


async def test_an_unknown_node_reply_makes_the_agent_join_again(router_peer):
    cp = router_peer
    async with anyio.create_task_group() as tg:
        agent = await _start(tg, cp)
        peer = await _join(cp)
        await cp.expect(Heartbeat)
        await cp.send(
            peer=peer, msg=ErrorReply(code=ErrorCode.INVALID_REQUEST, message="unknown node 'n1': send NodeHello")
        )
        await _join(cp)  # a second NodeHello came
        await cp.expect(Heartbeat, where=lambda _: agent.num_welcomes == 2)
        tg.cancel_scope.cancel()
