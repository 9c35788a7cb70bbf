"""KV cache events from a node agent in a fleet: a subscriber to `zoo agent --kv-events-config`'s socket
(agent/kv_events.py), as a KV-aware router outside the fleet, knows exactly which blocks the node caches, a
prefix-cache reset reaching it as AllBlocksCleared; a control plane whose policy indexes them (Dynamo's KV router)
hears them over the agent link (KvEvents), starting from the node's whole cache."""

from __future__ import annotations

import contextlib

import anyio
import msgspec
import pytest
import zmq

from agent.agent_config import AgentConfig
from agent.kv_events import KVEventsConfig
from agent.node_agent import NodeAgent
from backends.fake import FAKE_MODEL_NAME, build_trivial_engine, cpu_test_hardware
from client import AsyncZooClient
from engine.kv.block_pool import Tier
from engine.sampling_params import SamplingParams

pytestmark = pytest.mark.anyio

PREFIX = "A shared system prompt, long enough for two blocks of sixteen. "


def _apply(index: dict[int, list[int]], payload: bytes) -> list[str]:
    """Apply one batch to ``index`` (block hash → its tokens); the types of its events."""
    _, events, _ = msgspec.msgpack.decode(payload)
    for event in events:
        if event["type"] == "BlockStored":
            size = event["block_size"]
            for i, block_hash in enumerate(event["block_hashes"]):
                index[block_hash] = event["token_ids"][size * i : size * (i + 1)]
        elif event["type"] == "BlockRemoved":
            for block_hash in event["block_hashes"]:
                index.pop(block_hash, None)
        else:
            index.clear()
    return [event["type"] for event in events]


async def test_a_subscriber_knows_what_the_node_caches(controlplane):
    events = KVEventsConfig(enable_kv_cache_events=True, endpoint="tcp://127.0.0.1:*", topic="kv")
    engine = build_trivial_engine(step_s=0.001, num_device_blocks=64)
    config = AgentConfig(node_id="n0", model_name=FAKE_MODEL_NAME, kv_events=events)
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.linger = 0
    sub.setsockopt(zmq.SUBSCRIBE, b"kv")
    index: dict[int, list[int]] = {}
    async with controlplane() as cp, anyio.create_task_group() as tg:
        agent = NodeAgent(cp.agent_endpoint, engine, config, hardware=cpu_test_hardware())
        await tg.start(agent.run)
        await cp.wait_until(lambda: len(cp.registry) == 1, 10)
        sub.connect(agent.kv_events.endpoint)
        async with AsyncZooClient(cp.client_endpoint, timeout_s=20) as zoo:
            for i in range(100):  # ZeroMQ's slow joiner: requests until a batch reaches the subscriber
                await zoo.generate(f"warm-up prompt number {i:03d}", max_tokens=1)
                if sub.poll(20):
                    break
            else:
                raise AssertionError("no KV event reached the subscriber")
            answers = await cp.reset_prefix_cache(10.0)  # from here on the subscriber's view starts empty
            assert answers["n0"]["ok"]
            seen: list[str] = []
            while "AllBlocksCleared" not in seen:
                assert sub.poll(10_000), "the reset's event never came"
                seen = _apply(index, sub.recv_multipart()[2])
            assert index == {}
            for tail in ("first question?", "second question, a longer one?", "third?"):
                await zoo.generate(PREFIX + tail, max_tokens=20, ignore_eos=True)
        pool = engine.scheduler.kv_cache_manager.pool(Tier.DEVICE)
        cached = {h.hash_value: list(h.token_ids) for h in pool.cached_blocks()}
        while index != cached and sub.poll(10_000):  # the last steps' batches, in flight
            _apply(index, sub.recv_multipart()[2])
        assert index == cached and len(cached) >= 6
        prefix_tokens = [b + 3 for b in PREFIX.encode()]  # the byte tokenizer's ids
        assert prefix_tokens[:16] in index.values() and prefix_tokens[16:32] in index.values()
        tg.cancel_scope.cancel()
    with contextlib.suppress(Exception):
        sub.close()
        ctx.term()
    assert agent.kv_events.num_sent > 0 and agent.kv_events.num_dropped == 0


async def _wait_for(predicate, what: str, num_polls: int = 2000) -> None:
    for _ in range(num_polls):  # bounded: the agent's messages are in flight
        if predicate():
            return
        await anyio.sleep(0.005)
    raise AssertionError(what)


async def test_the_control_plane_hears_the_nodes_events_when_its_policy_indexes_them(fleet_with_agents):
    """Dynamo's KV router in the real control plane: the Welcome asks for the nodes' KV events, the first message
    is the node's whole cache (blocks cached before it joined included), then every change, over the agent link."""
    engine = build_trivial_engine(step_s=0.001, num_device_blocks=64)
    engine.add_request([b + 3 for b in PREFIX.encode()], SamplingParams(max_tokens=1))
    while engine.has_unfinished_requests():
        engine.step()  # blocks cached before the node joins: the snapshot must carry them
    pool = engine.scheduler.kv_cache_manager.pool(Tier.DEVICE)
    assert pool.num_cached_blocks >= 3

    def cached() -> set[int]:
        return {h.hash_value for h in pool.cached_blocks()}

    async with fleet_with_agents("n0", engines=[engine], policy="dynamo_kv") as cp:
        tree = cp.policy.kv_tree
        await _wait_for(lambda: set(tree.block_hashes("n0")) == cached(), "the snapshot never matched the cache")
        async with AsyncZooClient(cp.client_endpoint, timeout_s=20) as zoo:
            for tail in ("one?", "two, a longer question than the first?", "three?"):
                await zoo.generate(PREFIX + tail, max_tokens=20, ignore_eos=True)
        await _wait_for(lambda: set(tree.block_hashes("n0")) == cached(), "the index lags the node's cache")
        assert cp.policy._evented == {"n0"} and len(cached()) >= 6


async def test_a_policy_that_does_not_index_events_gets_none(fleet_with_agents):
    engine = build_trivial_engine(step_s=0.001, num_device_blocks=64)
    async with fleet_with_agents("n0", engines=[engine], policy="round_robin") as cp:
        async with AsyncZooClient(cp.client_endpoint, timeout_s=20) as zoo:
            await zoo.generate(PREFIX, max_tokens=2)
        assert engine.scheduler.kv_cache_manager.pool(Tier.DEVICE).kv_events is None  # never logged


async def test_hardware_aware_learns_what_warm_nodes_cache_when_they_join(fleet_with_agents):
    """A control plane that starts while a node's cache is warm (as after a restart): hardware_aware asks each node
    for its cached blocks once, at its Welcome, so a prompt a node holds goes there; no events follow."""
    warm = build_trivial_engine(step_s=0.001, num_device_blocks=64)
    warm.add_request([b + 3 for b in PREFIX.encode()], SamplingParams(max_tokens=1))
    while warm.has_unfinished_requests():
        warm.step()
    cold = build_trivial_engine(step_s=0.001, num_device_blocks=64)
    pools = [engine.scheduler.kv_cache_manager.pool(Tier.DEVICE) for engine in (cold, warm)]
    async with fleet_with_agents("a", "b", engines=[cold, warm], policy="hardware_aware") as cp:
        index = cp.policy._index

        def known() -> bool:  # each node's cache (the agent's start-up profile's blocks too), nothing else
            return all(
                set(index._lru.get(n, ())) == {h.hash_value for h in p.cached_blocks()} for n, p in zip("ab", pools)
            )

        await _wait_for(known, "the nodes' caches never reached the index")
        async with AsyncZooClient(cp.client_endpoint, timeout_s=20) as zoo:
            done = await zoo.generate(PREFIX + "and a question?", max_tokens=2)
        assert done.node_id == "b"
        assert pools[1].kv_events is None  # a snapshot, not a stream of events: the engine logs none


async def test_a_router_reload_asks_the_nodes_already_there_for_its_kv_events(fleet_with_agents):
    """hardware_aware's evictions experiment turned on by a reload: the nodes that joined before it get their Welcome
    again and send their KV events from then on (their cache first); turned off, the events stop."""
    from controlplane.router_reload import reload_router

    engine = build_trivial_engine(step_s=0.001, num_device_blocks=64)
    pool = engine.scheduler.kv_cache_manager.pool(Tier.DEVICE)
    async with fleet_with_agents("n0", engines=[engine], policy="hardware_aware") as cp:
        assert not cp.policy.wants_kv_events and pool.kv_events is None
        reload_router(cp, {"hardware_aware_kv_evictions": True})
        assert cp.policy.wants_kv_events
        await _wait_for(lambda: pool.kv_events is not None, "the node was never asked for its events")
        async with AsyncZooClient(cp.client_endpoint, timeout_s=20) as zoo:
            await zoo.generate(PREFIX + "first?", max_tokens=2)
        reload_router(cp, {})
        await _wait_for(lambda: pool.kv_events is None, "the node's events never stopped")
