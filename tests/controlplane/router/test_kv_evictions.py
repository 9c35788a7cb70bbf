"""hardware_aware_kv_evictions (an experiment, off by default): the nodes' KV cache events correct hardware_aware's
prefix index, an evicted block or a cleared cache leaving it; off, the policy asks for no events. And
hardware_aware_prefix_snapshot (on): a node's cached blocks, sent once at its Welcome, enter the index."""

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


def test_cached_blocks_without_positions_are_found_by_their_hashes_within_the_bound():
    index = PrefixIndex(max_blocks_per_node=40, num_dense_blocks=4, sparse_stride=4)
    chain = list(range(1000, 1048))  # 48 blocks: indexed at 0..3, then 7, 11, ..., 47
    index.insert_cached("a", list(reversed(chain)))  # a snapshot in no particular order: the last 40 given kept
    assert index.num_blocks("a") == 40
    assert index.match(chain) == {"a": 40}  # the first 40 were given last: kept; blocks 43 and 47 were not
    index.insert_cached("b", chain[:8])
    assert index.match(chain) == {"a": 40, "b": 4}  # b credited a lower bound, as match credits the others
    index.insert_cached("c", [])
    assert "c" not in index.node_ids


def test_hardware_aware_takes_a_nodes_cache_at_its_welcome(make_node_view, make_snapshot, make_route_request):
    policy = make_policy("hardware_aware", RouterConfig())
    assert policy.wants_kv_snapshot and not policy.wants_kv_events
    blind = make_policy("hardware_aware", RouterConfig())
    chain = tuple(range(100, 164))  # 64 blocks = 1024 tokens
    request = make_route_request(num_prompt_tokens=1024, max_tokens=1, block_hashes=chain)
    nodes = make_snapshot(make_node_view("a"), make_node_view("b"))
    policy.on_kv_events("b", [AllBlocksCleared(), BlockStored(list(chain[:40]), None, [], None)])
    assert policy.choose(request, nodes) == "b"  # 24 blocks to prefill there, 64 on a
    assert blind.choose(request, nodes) == "a"  # the same nodes, the index empty: a tie, the first one
    policy.on_kv_events("b", [BlockRemoved(list(chain))])  # removals are the evictions experiment's, not this
    assert policy.choose(request, nodes) == "b"
    policy.on_kv_events("b", [AllBlocksCleared()])  # a node's next Welcome starts from its cache again
    assert policy.choose(request, nodes) == "a"
    off = make_policy("hardware_aware", RouterConfig(hardware_aware_prefix_snapshot=False))
    assert not off.wants_kv_snapshot
    off.on_kv_events("b", [BlockStored(list(chain), None, [], None)])
    assert off.choose(request, nodes) == "a"
