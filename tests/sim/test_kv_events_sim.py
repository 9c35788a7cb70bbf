"""``zoo sim`` hands each node's KV cache events to a policy that wants them (Dynamo's KV router at its default): the
router's index never claims a block a node does not cache, and it holds the blocks the nodes cached since."""

from __future__ import annotations

from engine.kv.block_pool import Tier
from sim import des
from sim.des import FleetSimulator


def test_in_the_simulator_the_index_never_claims_a_block_a_node_does_not_cache(small_fleet, tiny_workload, monkeypatch):
    made: dict = {}
    nodes: list = []
    real_make_policy, real_init = des.make_policy, des.SimNode.__init__

    def make_policy_spy(name, config):
        made["policy"] = real_make_policy(name, config)
        return made["policy"]

    def init_spy(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        nodes.append(self)

    monkeypatch.setattr(des, "make_policy", make_policy_spy)
    monkeypatch.setattr(des.SimNode, "__init__", init_spy)
    workload = tiny_workload(num=60, prompt=1100, output=8, hash_ids=lambda i: (1 + i % 3, 10 + i % 5, 100 + i))
    result = FleetSimulator(small_fleet(), workload, "dynamo_kv", seed=3).run()
    assert result.drained
    tree = made["policy"].kv_tree
    num_indexed = 0
    for node in nodes:
        cached = {h.hash_value for h in node.core.engine.scheduler.kv_cache_manager.pool(Tier.DEVICE).cached_blocks()}
        indexed = set(tree.block_hashes(node.node_id))
        assert indexed <= cached  # every eviction reached the router
        num_indexed += len(indexed)
    assert num_indexed > 50 and made["policy"]._evented == {node.node_id for node in nodes if tree.size(node.node_id)}
