"""Live migration with real agent processes on the real model (torch → torch): `zoo drain NODE` moves a running
request's KV and state to the peer over the KV data plane, the client's stream continues, and the greedy
tokens equal an unmigrated run's; a migration whose transfer fails resumes the request by re-prefill."""

from __future__ import annotations

import signal

import anyio
import pytest

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

JOIN_TIMEOUT_S = 180.0
NUM_TOKENS = 24
DATA = ("--data-endpoint", "tcp://127.0.0.1:0", "--max-model-len", "512", "--no-profile", "--num-threads", "1",
        "--num-device-blocks", "128", "--num-host-blocks", "16")  # fmt: skip


async def _fleet(cp, spawn_agent):
    for node_id in ("a", "b"):
        spawn_agent(cp.agent_endpoint, node_id, *DATA, fake=False)
    await cp.wait_until(lambda: len(cp.registry) == 2, JOIN_TIMEOUT_S)
    assert all(cp.registry.hello(n).data_endpoint for n in ("a", "b"))


async def test_drain_migrates_a_running_request_and_its_tokens_are_identical(
    controlplane, spawn_agent, client, smollm2_checkpoint
):
    tok = smollm2_checkpoint.tokenizer
    prompt = tok.encode("The history of the printing press begins in 1440, when Johannes Gutenberg")
    greedy = dict(prompt_token_ids=prompt, max_tokens=NUM_TOKENS, temperature=0.0, ignore_eos=True)
    async with controlplane("round_robin", tokenizer=tok) as cp:
        await _fleet(cp, spawn_agent)
        async with client(cp, timeout_s=60) as c:
            reference = await c.generate(**greedy)
            stream = await c.generate(**greedy, stream=True)
            first = await stream.__anext__()
            source = first.node_id
            target = "b" if source == "a" else "a"
            assert await c.drain(source) == 1
            with anyio.fail_after(60):
                chunks = [first, *[chunk async for chunk in stream]]
        tokens = [t for ch in chunks for t in ch.token_ids]
        assert tokens == reference.token_ids
        assert [ch.num_output_tokens for ch in chunks][-1] == NUM_TOKENS
        assert chunks[-1].node_id == target and chunks[-1].finish_reason == "length"
        assert cp.migrations == {"drain:ok": 1}
        requests = cp.stats()["requests"]
        assert requests["failed"] == 0 and requests["migrated"] == 1
        assert cp.registry.inflight_request_ids(source) == []  # the drained node is empty


async def test_a_target_that_dies_before_the_kv_arrives_loses_nothing(
    controlplane, spawn_agent, client, smollm2_checkpoint
):
    """The target hangs (SIGSTOP), then the source is drained before the control plane notices: the source's transfer
    gets no acks and fails at its timeout; the request resumes by re-prefill (here on the source: the only node
    left) and the client's stream completes with the same greedy tokens. Hung, not killed: a killed target's sockets
    close, and a send to it the control plane makes meanwhile fails and takes it out of routing first (then no
    migration is asked at all: another path, which a loaded host raced into)."""
    tok = smollm2_checkpoint.tokenizer
    text = "Photosynthesis is the process by which green plants, algae and some bacteria turn light into chemical "
    prompt = tok.encode(text + "energy. It takes place in the chloroplasts, which hold the pigment chlorophyll, and")
    assert len(prompt) > 32  # two full blocks of 16: there is KV to ship
    greedy = dict(prompt_token_ids=prompt, max_tokens=NUM_TOKENS, temperature=0.0, ignore_eos=True)
    async with controlplane("round_robin", tokenizer=tok, heartbeat_timeout_s=3.0) as cp:
        agents = {n: spawn_agent(cp.agent_endpoint, n, *DATA, "--kv-transfer-timeout-s", "2", fake=False)
                  for n in ("a", "b")}  # fmt: skip
        await cp.wait_until(lambda: len(cp.registry) == 2, JOIN_TIMEOUT_S)
        async with client(cp, timeout_s=90) as c:
            reference = await c.generate(**greedy)
            stream = await c.generate(**greedy, stream=True)
            first = await stream.__anext__()
            source = first.node_id
            target = "b" if source == "a" else "a"
            agents[target].proc.send_signal(signal.SIGSTOP)
            assert await c.drain(source) == 1
            with anyio.fail_after(90):
                chunks = [first, *[chunk async for chunk in stream]]
        assert [t for ch in chunks for t in ch.token_ids] == reference.token_ids
        assert chunks[-1].node_id == source and chunks[-1].num_output_tokens == NUM_TOKENS
        assert cp.migrations == {"drain:failed": 1}
        assert cp.stats()["requests"]["failed"] == 0
        agents[target].kill()
