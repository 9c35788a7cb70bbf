"""The agent's side of KvEvents (agent/engine_thread.py): a Welcome that asks gets the node's whole cache first (a
clear, then every cached block, those cached before it joined included); a Welcome that does not ask stops them and
the engine stops logging (nobody would take its events)."""

from __future__ import annotations

import anyio
import pytest

from agent.agent_config import AgentConfig
from agent.node_agent import NodeAgent
from backends.fake import build_trivial_engine, cpu_test_hardware
from engine.kv.block_pool import Tier
from engine.sampling_params import SamplingParams
from transport.messages import KV_CLEARED, KV_STORED, KvEvents, NodeHello, Welcome

pytestmark = pytest.mark.anyio


async def test_a_welcome_asks_for_the_cache_then_stops_it(router_peer):
    cp = router_peer
    engine = build_trivial_engine(num_device_blocks=64)
    engine.add_request(list(range(10, 74)), SamplingParams(max_tokens=1))
    while engine.has_unfinished_requests():
        engine.step()
    pool = engine.scheduler.kv_cache_manager.pool(Tier.DEVICE)
    cached = {h.hash_value for h in pool.cached_blocks()}
    assert len(cached) >= 3
    async with anyio.create_task_group() as tg:
        config = AgentConfig(node_id="n1", model_name="fake-bytes", hello_timeout_s=0.3, profile_at_start=False)
        await tg.start(NodeAgent(cp.endpoint, engine, config, hardware=cpu_test_hardware()).run)
        peer, _ = await cp.expect(NodeHello)
        welcome = Welcome(node_id="n1", heartbeat_interval_s=0.05, report_interval_s=0.05, kv_events=True)
        await cp.send(peer=peer, msg=welcome)
        _, first = await cp.expect(KvEvents)
        _, second = await cp.expect(KvEvents)
        assert first.node_id == "n1" and first.events == [(KV_CLEARED, [])]
        assert [kind for kind, _ in second.events] == [KV_STORED] and set(second.events[0][1]) == cached
        await cp.send(peer=peer, msg=Welcome(node_id="n1", heartbeat_interval_s=0.05, report_interval_s=0.05))
        for _ in range(2000):  # bounded: the engine thread applies the Welcome at its next pass
            if pool.kv_events is None:
                break
            await anyio.sleep(0.005)
        assert pool.kv_events is None  # nobody takes them: not logged any more
        tg.cancel_scope.cancel()
