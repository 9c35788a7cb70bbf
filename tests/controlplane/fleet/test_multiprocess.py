"""Routing and streaming across real agent processes over tcp loopback."""

from __future__ import annotations

import anyio
import httpx
import pytest

from controlplane.gateway import create_app

pytestmark = pytest.mark.anyio

JOIN_TIMEOUT_S = 30.0


async def _fleet(cp, spawn_agent, *agents: tuple[str, tuple[str, ...]]):
    procs = [spawn_agent(cp.agent_endpoint, node_id, *flags) for node_id, flags in agents]
    await cp.wait_until(lambda: all(node_id in cp.registry for node_id, _ in agents), JOIN_TIMEOUT_S)
    return procs


async def test_round_robin_alternates_and_streams_every_token(controlplane, spawn_agent, client):
    async with controlplane("round_robin") as cp:
        await _fleet(cp, spawn_agent, ("a", ()), ("b", ()))
        async with client(cp) as c:
            served_by = []
            for _ in range(4):
                chunks = []
                async with await c.generate("hello zoo", max_tokens=5, stream=True) as stream:
                    async for chunk in stream:
                        chunks.append(chunk)
                assert [len(ch.token_ids) for ch in chunks] == [1] * 5  # one chunk per sampled token
                assert "".join(ch.text for ch in chunks) == "zzzzz"
                assert chunks[-1].finished and chunks[-1].finish_reason == "length"
                assert chunks[-1].num_prompt_tokens == len("hello zoo")
                served_by.append(chunks[-1].node_id)
        assert served_by in (["a", "b", "a", "b"], ["b", "a", "b", "a"])
        stats = cp.stats()
        assert stats["nodes"]["a"]["requests_served"] == stats["nodes"]["b"]["requests_served"] == 2
        assert stats["nodes"]["a"]["ttft_ms_p50"] is not None and stats["nodes"]["a"]["tpot_ms_p50"] is not None


async def test_least_requests_spreads_concurrent_requests(controlplane, spawn_agent, client):
    async with controlplane("least_requests") as cp:
        await _fleet(cp, spawn_agent, ("a", ("--fake-step-ms", "20")), ("b", ("--fake-step-ms", "20")))
        async with client(cp) as c:
            served_by: list[str] = []

            async def one() -> None:
                served_by.append((await c.generate("x", max_tokens=5)).node_id)

            async with anyio.create_task_group() as tg:
                for _ in range(4):
                    tg.start_soon(one)
        assert sorted(served_by) == ["a", "a", "b", "b"]


async def test_hardware_aware_prefers_the_stronger_node(controlplane, spawn_agent, client):
    async with controlplane("hardware_aware") as cp:
        await _fleet(cp, spawn_agent, ("small", ("--gpu-profile", "t4")), ("big", ("--gpu-profile", "h100-sxm")))
        assert cp.registry.hello("big").power_score > cp.registry.hello("small").power_score
        async with client(cp) as c:
            done = await c.generate("a prompt for an idle fleet", max_tokens=2)
        assert done.node_id == "big"


async def test_prefix_aware_keeps_a_shared_prefix_on_one_node(controlplane, spawn_agent, client):
    async with controlplane("prefix_aware") as cp:
        await _fleet(cp, spawn_agent, ("a", ()), ("b", ()))
        prefix = "You are a helpful zoo keeper. Answer briefly and kindly, please. " * 2  # > 4 KV blocks
        async with client(cp) as c:
            first = await c.generate(prefix + "Q1", max_tokens=2)
            again = [(await c.generate(prefix + f"Q{i}", max_tokens=2)).node_id for i in range(2, 5)]
        assert again == [first.node_id] * 3


@pytest.mark.slow
async def test_real_model_streams_a_chat_answer(controlplane, spawn_agent, client, smollm2_checkpoint):
    flags = ("--num-device-blocks", "64", "--num-host-blocks", "0", "--max-num-seqs", "4")
    async with controlplane("hardware_aware", tokenizer=smollm2_checkpoint.tokenizer) as cp:
        spawn_agent(cp.agent_endpoint, "torch-0", *flags, fake=False)  # one: the fake agents cover fleets
        await cp.wait_until(lambda: len(cp.registry) == 1, 180)
        assert cp.model_names == ["SmolLM2-135M-Instruct"]
        async with client(cp, timeout_s=120) as c:
            chunks = []
            stream = await c.generate(
                messages=[{"role": "user", "content": "What is the capital of France?"}],
                max_tokens=4,
                temperature=0.0,
                stream=True,
            )
            async for chunk in stream:
                chunks.append(chunk)
        assert sum(len(ch.token_ids) for ch in chunks) == chunks[-1].num_output_tokens <= 4
        assert chunks[-1].finished and chunks[-1].node_id == "torch-0"
        assert "".join(ch.text for ch in chunks).strip()
        # vLLM's beam search through the gateway, its steps on the real model: one beam is the greedy answer
        transport = httpx.ASGITransport(app=create_app(cp))
        async with httpx.AsyncClient(transport=transport, base_url="http://cp", timeout=120) as http:
            body = {"prompt": "The capital of France is", "max_tokens": 3, "temperature": 0.0}
            greedy = (await http.post("/v1/completions", json=body)).json()["choices"][0]["text"]
            one = (await http.post("/v1/completions", json={**body, "use_beam_search": True, "n": 1})).json()
            assert one["choices"][0]["text"] == greedy
            two = (await http.post("/v1/completions", json={**body, "use_beam_search": True, "n": 2})).json()
            assert len({c["text"] for c in two["choices"]}) == 2 and two["usage"]["completion_tokens"] <= 6
