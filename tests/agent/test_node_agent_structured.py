"""A node whose backend cannot constrain its output (the fake runner: no grammar compiler) answers a request with
structured outputs with an error reply naming the field, and goes on serving."""

from __future__ import annotations

import anyio
import pytest

from engine.sampling_params import SamplingParams
from engine.structured_output import StructuredOutput
from tests.agent.test_node_agent_priority import _welcomed_agent
from transport.messages import CancelRequest, ErrorCode, ErrorReply, GenerateRequest, TokenChunk

pytestmark = pytest.mark.anyio


async def test_a_node_without_a_grammar_compiler_refuses_a_constraint_and_serves_on(router_peer):
    cp = router_peer
    async with anyio.create_task_group() as tg:
        agent, peer = await _welcomed_agent(cp, tg)

        def generate(request_id: str, sampling: SamplingParams) -> GenerateRequest:
            return GenerateRequest(
                request_id=request_id, prompt_token_ids=[5, 6, 7], sampling=sampling, arrival_ns=0, routed_ns=0
            )

        constrained = SamplingParams(max_tokens=8, structured_outputs=StructuredOutput(choice=("yes", "no")))
        await cp.send(peer=peer, msg=generate("constrained", constrained))
        _, refused = await cp.expect(ErrorReply, where=lambda e: e.request_id == "constrained")
        assert refused.code is ErrorCode.INVALID_REQUEST and "structured_outputs" in refused.message
        assert agent.engine.scheduler.get_request("constrained") is None
        await cp.send(peer=peer, msg=generate("plain", SamplingParams(max_tokens=10_000)))
        await cp.expect(TokenChunk, where=lambda c: c.request_id == "plain")
        await cp.send(peer=peer, msg=CancelRequest(request_id="plain"))
        tg.cancel_scope.cancel()
