"""The remote KV tier with real agent processes on the real model: node "a" has a small device cache and no host
RAM tier (``--num-host-blocks 0 --remote-swap fallback``); its peers lend host RAM. Under KV pressure a's
preempted request's KV goes to a peer and comes back, and every greedy output equals an unpressured run's; a
peer killed while it holds the KV loses nothing: the request recomputes its tokens and completes the same."""

from __future__ import annotations

import anyio
import pytest

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

JOIN_TIMEOUT_S = 180.0
COMMON = ("--data-endpoint", "tcp://127.0.0.1:0", "--max-model-len", "512", "--no-profile", "--num-threads", "1",
          "--kv-transfer-timeout-s", "3")  # fmt: skip
# 10 blocks of 16 tokens: the long request alone grows to 9 of them, so the second one is preempted
PRESSURED = (*COMMON, "--num-device-blocks", "10", "--num-host-blocks", "0", "--remote-swap", "fallback")
HOLDER = (*COMMON, "--num-device-blocks", "64", "--num-host-blocks", "0", "--kv-store-mib", "64")
LONG_TOKENS, SHORT_TOKENS = 100, 60  # the short one is preempted near its end, the long one keeps the room
STORE_BYTES = 64 << 20


async def _fleet(cp, spawn_agent, holders: tuple[str, ...]):
    agents = {"a": spawn_agent(cp.agent_endpoint, "a", *PRESSURED, fake=False)}
    for node_id in holders:
        agents[node_id] = spawn_agent(cp.agent_endpoint, node_id, *HOLDER, fake=False)
    await cp.wait_until(lambda: len(cp.registry) == 1 + len(holders), JOIN_TIMEOUT_S)
    for node_id in holders:  # the holders take no requests: every request runs on a, under pressure
        assert cp.drain(node_id)
    return agents


def _store_free(cp, node_id: str) -> int:
    report = cp.registry.last_report(node_id)
    return -1 if report is None else report.kv_store_free_bytes


def _prompts(tok):
    long = tok.encode("The history of the printing press begins in 1440, when Johannes Gutenberg, a goldsmith,")
    short = tok.encode("Photosynthesis is the process by which green plants turn light into chemical energy;")
    return (
        dict(prompt_token_ids=long, max_tokens=LONG_TOKENS, temperature=0.0, ignore_eos=True),
        dict(prompt_token_ids=short, max_tokens=SHORT_TOKENS, temperature=0.0, ignore_eos=True),
    )


async def _pressured(c, long, short):
    """Both at once: the short one arrives second and is the preemption victim."""
    results = {}

    async def run(name, params):
        results[name] = await c.generate(**params)

    async with anyio.create_task_group() as tg:
        tg.start_soon(run, "long", long)
        await anyio.sleep(0.05)
        tg.start_soon(run, "short", short)
    return results


def _moved_back(moves: dict) -> bool:
    return moves.get("out_ok", 0) >= 1 and moves.get("in_ok", 0) == moves["out_ok"]


async def test_remote_swap_out_and_in_keeps_greedy_output(controlplane, spawn_agent, client, smollm2_checkpoint):
    tok = smollm2_checkpoint.tokenizer
    long, short = _prompts(tok)
    async with controlplane("round_robin", tokenizer=tok) as cp:
        agents = await _fleet(cp, spawn_agent, ("b", "c"))
        async with client(cp, timeout_s=120) as c:
            reference = {"long": await c.generate(**long), "short": await c.generate(**short)}  # one at a time
            results = await _pressured(c, long, short)
            with anyio.fail_after(10):  # the holders' next reports: everything they held went back
                while any(_store_free(cp, n) != STORE_BYTES for n in ("b", "c")):
                    await anyio.sleep(0.02)
            deadline = anyio.current_time() + 10  # and the owner's own next report, which comes at its own time
            while not _moved_back(cp.registry.last_report("a").kv_remote_moves) and anyio.current_time() < deadline:
                await anyio.sleep(0.02)
        log = agents["a"].output()
        moves = cp.registry.last_report("a").kv_remote_moves
    for name in ("long", "short"):
        assert results[name].token_ids == reference[name].token_ids, name
        assert results[name].node_id == "a"
    assert _moved_back(moves), (moves, log[-3000:])
    assert not {"out_failed", "in_failed", "peer_lost"} & moves.keys()
    assert cp.stats()["requests"]["failed"] == 0


async def test_a_holder_killed_while_holding_the_kv_loses_nothing(
    controlplane, spawn_agent, client, smollm2_checkpoint
):
    tok = smollm2_checkpoint.tokenizer
    long, short = _prompts(tok)
    async with controlplane("round_robin", tokenizer=tok) as cp:
        agents = await _fleet(cp, spawn_agent, ("b",))
        async with client(cp, timeout_s=120) as c:
            reference = {"long": await c.generate(**long), "short": await c.generate(**short)}
            results = {}

            async def run(name, params):
                results[name] = await c.generate(**params)

            async with anyio.create_task_group() as tg:
                tg.start_soon(run, "long", long)
                await anyio.sleep(0.05)
                tg.start_soon(run, "short", short)
                with anyio.fail_after(60):
                    while _store_free(cp, "b") in (-1, STORE_BYTES):  # -1: no report yet
                        await anyio.sleep(0.01)
                agents["b"].kill()  # it holds the short request's KV now
        log = agents["a"].output()
    for name in ("long", "short"):
        assert results[name].token_ids == reference[name].token_ids, name
    moves = cp.registry.last_report("a").kv_remote_moves
    assert moves.get("out_ok", 0) >= 1 and moves.get("in_ok", 0) == 0, (moves, log[-3000:])
    assert moves.get("in_failed", 0) + moves.get("peer_lost", 0) >= 1
    assert cp.stats()["requests"]["failed"] == 0
