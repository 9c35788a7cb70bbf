"""PrefixIndex keeps a block's lone holder as its id (no dict per block): the index answers exactly as with an
ordered dict of holders per block (the rule below: a holder moves last each time it is sent the block), through
inserts, evictions and node removals; ``match`` gives the same candidates in the same order, the most recently
sent first, whatever the process's string-hash seed."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import OrderedDict
from itertools import islice
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from controlplane.router.prefix_index import PrefixIndex


class _SetPerBlock(PrefixIndex):
    """The index with an ordered dict of holders (least recently sent first) for every block."""

    def insert(self, node_id, block_hashes):
        if not block_hashes:
            return
        lru = self._lru.setdefault(node_id, OrderedDict())
        for block_hash in reversed(self._indexed(block_hashes)[: self.max_blocks_per_node]):
            nodes = self._holders.setdefault(block_hash, {})
            nodes.pop(node_id, None)
            nodes[node_id] = None
            if block_hash in lru:
                lru.move_to_end(block_hash)
                continue
            lru[block_hash] = None
        while len(lru) > self.max_blocks_per_node:
            evicted, _ = lru.popitem(last=False)
            self._drop_holder(evicted, node_id)

    def _drop_holder(self, block_hash, node_id):
        nodes = self._holders.get(block_hash)
        if nodes is not None:
            nodes.pop(node_id, None)
            if not nodes:
                del self._holders[block_hash]

    def match(self, block_hashes, max_candidates=8):
        holders = self._holders
        if not block_hashes or block_hashes[0] not in holders:
            return {}
        positions = self._positions(len(block_hashes))
        lo, hi = 0, len(positions) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if block_hashes[positions[mid]] in holders:
                lo = mid
            else:
                hi = mid - 1
        matched, level = {}, lo
        while True:
            block = positions[level]
            for node_id in islice(reversed(holders.get(block_hashes[block], {})), max_candidates):
                if node_id not in matched:
                    matched[node_id] = block + 1
                    if len(matched) >= max_candidates:
                        return matched
            if level == 0:
                return matched
            level //= 2


def _holders(index: PrefixIndex) -> dict[int, list[str]]:
    return {h: [nodes] if isinstance(nodes, str) else list(nodes) for h, nodes in index._holders.items()}


NODES = [f"node-{i}" for i in range(12)]


@settings(max_examples=80, deadline=None)
@given(
    ops=st.lists(
        st.tuples(st.sampled_from(NODES), st.lists(st.integers(0, 30), max_size=24), st.booleans()), max_size=40
    ),
    max_blocks=st.integers(1, 30),
    max_candidates=st.integers(1, 10),
)
def test_answers_as_a_set_per_block(ops, max_blocks, max_candidates):
    index = PrefixIndex(max_blocks_per_node=max_blocks, num_dense_blocks=4, sparse_stride=2)
    reference = _SetPerBlock(max_blocks_per_node=max_blocks, num_dense_blocks=4, sparse_stride=2)
    for node_id, chain, remove in ops:
        for ix in (index, reference):
            ix.remove_node(node_id) if remove else ix.insert(node_id, tuple(chain))
        assert _holders(index) == _holders(reference)
        assert {n: list(lru) for n, lru in index._lru.items()} == {n: list(lru) for n, lru in reference._lru.items()}
        got, want = index.match(tuple(chain), max_candidates), reference.match(tuple(chain), max_candidates)
        assert list(got.items()) == list(want.items())


def test_a_lone_holder_is_its_id_and_a_second_makes_a_dict_most_recent_last():
    index = PrefixIndex(num_dense_blocks=4)
    index.insert("a", (1, 2))
    assert index._holders[1] == "a"
    index.insert("b", (1,))
    assert list(index._holders[1]) == ["a", "b"] and index._holders[2] == "a"
    index.insert("a", (1,))  # sent again: a is its most recent holder
    assert list(index._holders[1]) == ["b", "a"] and list(index.match((1,), max_candidates=1)) == ["a"]
    index.remove_node("a")
    assert index._holders == {1: {"b": None}} and index.match((1, 2)) == {"b": 1}
    index.remove_node("b")
    assert index._holders == {} and index.match((1,)) == {}


_MATCH_IN_A_CHILD = """
from controlplane.router.prefix_index import PrefixIndex
index = PrefixIndex(num_dense_blocks=4)
for i in range(12):
    index.insert(f"node-{i}", (7, 8))
print(list(index.match((7, 8), max_candidates=5)))
"""


def test_the_candidates_do_not_depend_on_the_string_hash_seed():
    """12 holders, 5 candidates: the 5 most recently sent, in every process (a set's order followed
    PYTHONHASHSEED, and a fixed-seed simulation of the Mooncake trace differed between processes)."""
    root = Path(__file__).resolve().parents[3]
    outputs = set()
    for seed in ("1", "2", "3", "4"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(root)}
        run = subprocess.run([sys.executable, "-c", _MATCH_IN_A_CHILD], env=env, capture_output=True, text=True)
        assert run.returncode == 0, run.stderr
        outputs.add(run.stdout.strip())
    assert outputs == {str([f"node-{i}" for i in (11, 10, 9, 8, 7)])}
