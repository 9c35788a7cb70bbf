from __future__ import annotations

import pytest

from controlplane.router.prefix_index import PrefixIndex


def test_match_counts_leading_blocks_per_node():
    index = PrefixIndex()
    index.insert("a", (1, 2, 3, 4))
    index.insert("b", (1, 2, 9))
    assert index.match((1, 2, 3, 4, 5)) == {"a": 4, "b": 2}
    assert index.match((1, 2, 9)) == {"b": 3, "a": 2}
    assert index.match((7, 1)) == {}
    assert index.match(()) == {}


def test_lru_bound_evicts_the_tail_of_old_chains_first():
    index = PrefixIndex(max_blocks_per_node=4)
    index.insert("a", (1, 2, 3))
    index.insert("a", (10, 11))  # 5 blocks: the oldest chain loses its last block
    assert index.num_blocks("a") == 4
    assert index.holds("a", 1) and index.holds("a", 2) and not index.holds("a", 3)
    assert index.match((1, 2, 3)) == {"a": 2}


def test_remove_node_and_candidate_bound():
    index = PrefixIndex()
    for i in range(10):
        index.insert(f"n{i}", (1, 2))
    assert len(index.match((1, 2), max_candidates=3)) == 3
    index.remove_node("n0")
    assert "n0" not in index.match((1, 2)) and index.num_blocks("n0") == 0
    with pytest.raises(ValueError):
        PrefixIndex(0)


def test_long_chains_are_indexed_sparsely_beyond_the_dense_head():
    index = PrefixIndex(num_dense_blocks=32, sparse_stride=16)
    chain = tuple(range(1000, 1100))  # 100 blocks: 0..31, then 47, 63, 79, 95 are stored
    index.insert("a", chain)
    assert index.num_blocks("a") == 36
    assert index.match(chain) == {"a": 96}  # rounded down to an indexed position
    assert index.match((*chain[:40], 7, 8)) == {"a": 32}
    assert index.match(chain[:20]) == {"a": 20}


def test_match_survives_held_blocks_that_are_not_a_contiguous_prefix():
    # block 0 held by a, blocks 2 and 3 by b (another chain's blocks), block 1 by nobody: the binary search
    # lands on block 3, and halving the level visits block 1, which no node holds (used to raise KeyError)
    index = PrefixIndex()
    index.insert("a", (1,))
    index.insert("b", (3, 4))
    assert index.match((1, 2, 3, 4)) == {"b": 4, "a": 1}
