"""A draft agent over loopback: exact greedy output through it, a dead drafter never stalls a request,
a vocabulary mismatch is refused at pairing, and bad input gets an error reply (the loop goes on)."""

from __future__ import annotations

import anyio
import pytest
import torch

from agent.draft_server import DraftServer
from backends.torch import TorchModelRunner
from backends.torch.draft_proposer import DraftModelProposer
from engine.config import CacheConfig, SchedulerConfig
from engine.llm_engine import LLMEngine
from engine.sampling_params import SamplingParams
from engine.spec import SpecDecodeConfig, Speculator
from transport.remote_drafter import RemoteProposer

pytestmark = pytest.mark.anyio

PROMPT = [5, 17, 33, 2, 8, 44]
PARAMS = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)


class _Tok:
    eos_token_id = None
    vocab_size = 97

    def decode(self, ids, skip_special_tokens=True):
        return ""


def _engine(model) -> LLMEngine:
    return LLMEngine(
        TorchModelRunner(model),
        _Tok(),
        SchedulerConfig(max_num_batched_tokens=256, max_num_seqs=4, max_model_len=128),
        CacheConfig(block_size=4, num_device_blocks=64, num_host_blocks=0),
        detokenize=False,
    )


def _step_until(engine: LLMEngine, got: list[int], num_tokens: int | None = None) -> None:
    while engine.has_unfinished_requests() and (num_tokens is None or len(got) < num_tokens):
        for out in engine.step():
            got.extend(out.new_token_ids)


@pytest.fixture
def anyio_backend():
    return "asyncio"


async def test_remote_drafts_are_exact_and_a_dead_drafter_never_stalls_the_request(tiny):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        await _remote_round_trip(tiny)
    finally:
        torch.set_num_threads(threads)


async def _remote_round_trip(tiny) -> None:
    config, _sd, model = tiny
    plain = _engine(model)
    plain.add_request(PROMPT, PARAMS)
    reference: list[int] = []
    _step_until(plain, reference)

    drafter = DraftModelProposer(
        TorchModelRunner(model), config.vocab_size, num_blocks=64, block_size=4, sample_drafts=False
    )
    server = DraftServer(drafter, config.vocab_size)
    async with anyio.create_task_group() as tg:
        endpoint = await tg.start(server.run)
        remote = RemoteProposer(endpoint, timeout_s=0.2)
        try:
            assert await anyio.to_thread.run_sync(remote.pair, config.vocab_size) == config.vocab_size
            with pytest.raises(ValueError, match="refused the pair: vocabulary of 1000 tokens"):
                await anyio.to_thread.run_sync(remote.pair, 1000)
            engine = _engine(model)
            spec = SpecDecodeConfig(method="ngram", num_spec_tokens=3, adaptive=False, max_batch_size=0)
            engine.speculator = Speculator(remote, spec)
            engine.add_request(PROMPT, PARAMS)
            got: list[int] = []
            await anyio.to_thread.run_sync(_step_until, engine, got, 8)
            accepted_live = engine.make_spec_stats().num_accepted_tokens_total
            assert accepted_live > 0 and server.num_rounds > 0

            tg.cancel_scope.cancel()  # the drafter dies mid-request
            await anyio.lowlevel.checkpoint()
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(_step_until, engine, got)
            assert got == reference  # completed, token-identical, decoding plainly after the drafter died
            assert remote.num_timeouts > 0
            assert engine.make_spec_stats().num_accepted_tokens_total == accepted_live
        finally:
            remote.close()
