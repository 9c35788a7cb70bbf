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
