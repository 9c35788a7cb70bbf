"""A NodeAgent told by its control plane (a bare ROUTER here) to draft with a fleet drafter (SpecPair): it pairs
with the DraftServer, drafts remotely (greedy tokens identical to plain decoding, acceptance in its
LoadReports), goes back to plain decoding when unpaired, and refuses a drafter of another vocabulary. An agent
with a drafter (``--can-draft``) advertises it in its hello, with its tokenizer's id."""

from __future__ import annotations

import anyio
import pytest

from agent.agent_config import AgentConfig
from agent.draft_server import DraftServer
from agent.node_agent import NodeAgent
from backends.fake import ByteTokenizer, cpu_test_hardware
from backends.torch import TorchModelRunner
from backends.torch.draft_proposer import DraftModelProposer
from engine.config import CacheConfig, SchedulerConfig
from engine.llm_engine import LLMEngine
from engine.sampling_params import SamplingParams
from engine.spec.vocab_id import vocab_id
from transport.messages import GenerateRequest, LoadReport, NodeHello, SpecPair, TokenChunk, Welcome

pytestmark = pytest.mark.anyio

PROMPT = [5, 17, 33, 2, 8, 44, 61, 9]
PARAMS = SamplingParams(temperature=0.0, max_tokens=16, ignore_eos=True)


@pytest.fixture
def anyio_backend():
    return "asyncio"


class _Tok(ByteTokenizer):
    vocab_size = 97  # the tiny model's


def _engine(model) -> LLMEngine:
    return LLMEngine(
        TorchModelRunner(model, progress=False),
        _Tok(),
        SchedulerConfig(max_num_batched_tokens=256, max_num_seqs=4, max_model_len=128),
        CacheConfig(block_size=4, num_device_blocks=64, num_host_blocks=0),
        detokenize=False,
    )


def _reference(model) -> list[int]:
    engine = _engine(model)
    engine.add_request(PROMPT, PARAMS)
    got: list[int] = []
    while engine.has_unfinished_requests():
        for out in engine.step():
            got.extend(out.new_token_ids)
    return got


async def _generate(cp, peer, request_id: str) -> list[int]:
    msg = GenerateRequest(request_id=request_id, prompt_token_ids=PROMPT, sampling=PARAMS, arrival_ns=1, routed_ns=2)
    await cp.send(peer=peer, msg=msg)
    tokens: list[int] = []
    while True:
        _, chunk = await cp.expect(TokenChunk, timeout_s=60, where=lambda m: m.request_id == request_id)
        tokens += chunk.token_ids
        if chunk.finished:
            return tokens


async def test_paired_by_the_control_plane_the_agent_drafts_remotely_and_back(router_peer, tiny):
    config, _sd, model = tiny
    cp = router_peer
    reference = _reference(model)
    runner = TorchModelRunner(model)
    proposer = DraftModelProposer(runner, config.vocab_size, num_blocks=64, block_size=4, sample_drafts=False)
    drafter = DraftServer(proposer, config.vocab_size)
    other_vocab = DraftServer(proposer, 1000)  # says another vocabulary: refuses the verifier at pairing
    async with anyio.create_task_group() as tg:
        endpoint = await tg.start(drafter.run)
        other_endpoint = await tg.start(other_vocab.run)
        agent = NodeAgent(
            cp.endpoint,
            _engine(model),
            AgentConfig(node_id="v", model_name="tiny", hello_timeout_s=0.3, profile_at_start=False),
            hardware=cpu_test_hardware(),
        )
        await tg.start(agent.run)
        peer, hello = await cp.expect(NodeHello)
        assert hello.vocab_id == vocab_id(_Tok()) and hello.draft_endpoint == "" and hello.draft_models == []
        await cp.send(peer=peer, msg=Welcome(node_id="v", heartbeat_interval_s=0.05, report_interval_s=0.05))

        await cp.send(peer=peer, msg=SpecPair(node_id="v", drafter_node_id="d", draft_endpoint=endpoint,
                                              num_spec_tokens=3, reason="test"))  # fmt: skip
        await cp.expect(LoadReport, where=lambda r: r.spec_drafter == "d")
        assert await _generate(cp, peer, "r1") == reference
        _, report = await cp.expect(LoadReport, where=lambda r: r.spec_acceptance_rate >= 0)
        assert report.spec_drafter == "d" and report.spec_acceptance_rate > 0.5  # the same model drafts: accepted
        assert drafter.num_rounds > 0

        await cp.send(peer=peer, msg=SpecPair(node_id="v", reason="unpaired: test"))
        await cp.expect(LoadReport, where=lambda r: r.spec_drafter == "")
        with anyio.fail_after(10):  # told at the unpairing: the drafter forgets the node's requests (their KV)
            while proposer._seqs:
                await anyio.sleep(0.01)
        rounds = drafter.num_rounds
        assert await _generate(cp, peer, "r2") == reference
        assert drafter.num_rounds == rounds  # plain decoding: the drafter is asked nothing
        assert agent._thread.core.engine.speculator is None  # the node had no proposer of its own

        await cp.send(peer=peer, msg=SpecPair(node_id="v", drafter_node_id="o", draft_endpoint=other_endpoint))
        with anyio.fail_after(10):
            while "o" not in agent.pairing.refused:
                await anyio.sleep(0.01)
        assert "vocabulary of 97 tokens" in agent.pairing.refused["o"]
        assert agent.pairing.drafter_node_id == "" and agent._thread.core.engine.speculator is None
        tg.cancel_scope.cancel()


async def test_an_agent_that_can_draft_advertises_its_draft_server(router_peer, tiny):
    config, _sd, model = tiny
    cp = router_peer

    def load():
        proposer = DraftModelProposer(TorchModelRunner(model), config.vocab_size, num_blocks=16, block_size=4)
        return proposer, config.vocab_size, vocab_id(_Tok())

    drafter = DraftServer(None, 0, draft_models=("tiny-draft",), load=load)
    async with anyio.create_task_group() as tg:
        agent = NodeAgent(
            cp.endpoint,
            _engine(model),
            AgentConfig(node_id="d", model_name="tiny", hello_timeout_s=0.3, profile_at_start=False),
            hardware=cpu_test_hardware("L4"),
            drafter=drafter,
        )
        await tg.start(agent.run)
        _, hello = await cp.expect(NodeHello)
        tg.cancel_scope.cancel()
    assert hello.draft_models == ["tiny-draft"] and hello.draft_endpoint.startswith("tcp://127.0.0.1:")
    assert hello.draft_vocab_id == hello.vocab_id == vocab_id(_Tok()) and hello.draft_step_ms > 0  # measured
