"""A fleet whose agent sends an engine pass's chunks as one TokenChunks (agent/chunk_batches.py): the control plane
relays each as if it came alone, and every request gets all its tokens, in fewer messages than tokens."""

from __future__ import annotations

import collections

import anyio
import pytest

from engine.sampling_params import SamplingParams
from transport import sockets


@pytest.mark.anyio
async def test_a_fleet_relays_batched_chunks_and_every_request_gets_all_its_tokens(fleet_with_agents, monkeypatch):
    sent = collections.Counter()
    send = sockets.Channel.send

    def counting(self, msg, *args, **kwargs):
        sent[type(msg).__name__] += 1
        return send(self, msg, *args, **kwargs)

    monkeypatch.setattr(sockets.Channel, "send", counting)
    async with fleet_with_agents("a") as cp:
        sent.clear()
        got: dict[str, list[int]] = {}

        async def one(i: int) -> None:
            params = SamplingParams(max_tokens=20, ignore_eos=True)
            async for chunk in cp.generate(f"r{i}", model=None, prompt="hi", sampling=params):
                got.setdefault(f"r{i}", []).extend(chunk.token_ids)

        async with anyio.create_task_group() as tg:
            for i in range(16):
                tg.start_soon(one, i)
    assert {rid: len(ids) for rid, ids in got.items()} == {f"r{i}": 20 for i in range(16)}
    assert sent["TokenChunks"] > 0 and sent["TokenChunks"] + sent["TokenChunk"] < 16 * 20  # fewer messages than tokens


@pytest.mark.anyio
async def test_a_batch_past_the_bound_is_refused_whole_and_unknown_chunks_are_cancelled(controlplane):
    from transport.dispatch import Incoming
    from transport.messages import MAX_TOKEN_CHUNKS, CancelRequest, ErrorReply, TokenChunk, TokenChunks

    async with controlplane() as cp:
        sent = []
        cp._agents.send_nowait = lambda msg, peer=None: sent.append((msg, peer))
        chunks = [TokenChunk(request_id=f"r{i}", token_ids=[1], text="a") for i in range(MAX_TOKEN_CHUNKS + 1)]
        cp.handle_token_chunks(Incoming(b"n", TokenChunks(chunks=chunks), [], 0))
        ((refusal, peer),) = sent
        assert peer == b"n" and isinstance(refusal, ErrorReply) and f"at most {MAX_TOKEN_CHUNKS}" in refusal.message
        cp.handle_token_chunks(Incoming(b"n", TokenChunks(chunks=chunks[:2]), [], 0))  # requests it does not know
        assert sent[1:] == [(CancelRequest(request_id="r0"), b"n"), (CancelRequest(request_id="r1"), b"n")]
