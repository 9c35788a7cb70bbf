"""hardware_aware_kv_evictions (an experiment, off by default): the nodes' KV cache events correct hardware_aware's
prefix index, an evicted block or a cleared cache leaving it; off, the policy asks for no events."""

from __future__ import annotations

from controlplane.router.policies import make_policy
from controlplane.router.prefix_index import PrefixIndex
from controlplane.router.router_config import RouterConfig
from engine.kv.kv_events import AllBlocksCleared, BlockRemoved, BlockStored


def test_the_index_forgets_what_a_node_evicted():
    index = PrefixIndex()
    index.insert("a", [1, 2, 3])
    index.insert("b", [1, 2])
    index.remove("a", [3, 99])  # 99: never indexed, ignored
    assert index.match([1, 2, 3]) == {"a": 2, "b": 2}
    index.remove("b", [1, 2])
    assert index.match([1, 2, 3]) == {"a": 2} and index.num_blocks("b") == 0
    index.remove("nobody", [1])


def test_hardware_aware_asks_for_events_only_when_told_and_applies_removals():
    assert not make_policy("hardware_aware", RouterConfig()).wants_kv_events
    policy = make_policy("hardware_aware", RouterConfig(hardware_aware_kv_evictions=True))
    assert policy.wants_kv_events
    policy._index.insert("a", [1, 2, 3])
    policy.on_kv_events("a", [BlockStored([4], 3, [], None), BlockRemoved([3])])  # a store adds nothing here
    assert policy._index.match([1, 2, 3, 4]) == {"a": 2}
    policy.on_kv_events("a", [AllBlocksCleared()])
    assert policy._index.match([1, 2, 3]) == {}
