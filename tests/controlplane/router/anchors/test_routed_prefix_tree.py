from __future__ import annotations

from controlplane.router.policies.anchors.routed_prefix_tree import RoutedPrefixTree


def test_match_counts_leading_blocks_without_gaps_per_worker():
    tree = RoutedPrefixTree()
    tree.insert("a", (1, 2, 3, 4))
    tree.insert("b", (1, 2, 9))
    tree.insert("c", (5, 6))
    assert tree.match((1, 2, 3, 4, 5)) == {"a": 4, "b": 2}
    assert tree.match((1, 2, 9)) == {"a": 2, "b": 3}
    assert tree.match((7,)) == {} and tree.match(()) == {}
    assert tree.size("a") == 4 and tree.size("zzz") == 0


def test_eviction_drops_deepest_blocks_first_and_ttl_drops_old_ones():
    tree = RoutedPrefixTree()
    tree.insert("a", (1, 2, 3, 4), now_s=0.0)
    tree.evict_to(2)
    assert tree.match((1, 2, 3, 4)) == {"a": 2}
    tree.insert("b", (1,), now_s=10.0)
    tree.expire_before(5.0)
    assert tree.match((1, 2)) == {"b": 1}
    tree.remove_worker("b")
    assert tree.match((1,)) == {}
