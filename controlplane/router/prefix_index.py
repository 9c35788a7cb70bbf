"""An approximate, bounded index of which node holds which prefix blocks.

The router cannot see the nodes' prefix caches; it remembers instead where it sent each prompt's block
hash chain (``RouteRequest.block_hashes``), and assumes the node still caches it::

    holders:  block hash ─► {node id: None}      (who was sent this block, least recently first; a lone
                                                  holder's id as a str)
    lru:      node id ─► OrderedDict[block hash]  (per-node LRU, at most max_blocks_per_node entries)

Invariant: ``node in holders[h]`` exactly when ``h in lru[node]``.

Only *indexed positions* of a chain are stored: every block below ``num_dense_blocks``, then every
``sparse_stride``-th (block i with (i + 1) % stride == 0). Prompts share mostly their first blocks (system
prompts, few-shot headers); a long shared document is still found, with its matched length rounded down
to a multiple of the stride. This bounds the cost of ``insert`` (~0.4 µs per stored block) for long
prompts: 500 blocks store 61 entries, not 500.

A chain is inserted deepest block first, so a prompt's first blocks are a node's most recently used and
are evicted last: like the engine's cache, the index forgets a chain from its tail, and a node that holds
block ``i`` almost always holds blocks ``0..i-1`` too. ``match`` relies on that (it binary-searches the
deepest held block), so it is approximate. Where more than ``max_candidates`` nodes hold a level, ``match``
takes the most recently sent ones (the likeliest to hold it still): an order that is the same in every
process, where a set's would follow the process's string-hash seed (PYTHONHASHSEED) and make a fixed-seed
simulation differ from run to run. Being approximate: a node's own cache may have evicted a block the index still
lists, or the other way round. A stronger anchor (SGLang's radix tree) is issue 4's work.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence
from itertools import islice


class PrefixIndex:
    def __init__(self, max_blocks_per_node: int = 65536, num_dense_blocks: int = 32, sparse_stride: int = 16) -> None:
        if max_blocks_per_node < 1:
            raise ValueError(f"max_blocks_per_node must be >= 1, got {max_blocks_per_node}")
        if num_dense_blocks < 1 or sparse_stride < 1:
            raise ValueError(
                f"num_dense_blocks and sparse_stride must be >= 1, got {num_dense_blocks}, {sparse_stride}"
            )
        self.max_blocks_per_node = max_blocks_per_node
        self.num_dense_blocks = num_dense_blocks
        self.sparse_stride = sparse_stride
        self._holders: dict[int, str | dict[str, None]] = {}  # one holder: its id (no dict per block)
        self._lru: dict[str, OrderedDict[int, None]] = {}
        self._sparse_positions: dict[int, list[int]] = {}  # chain length -> its indexed positions (read-only)

    def insert(self, node_id: str, block_hashes: Sequence[int]) -> None:
        """Record that ``node_id`` now caches the chain ``block_hashes`` (block 0 first)."""
        if block_hashes:
            self._add(node_id, reversed(self._indexed(block_hashes)[: self.max_blocks_per_node]))

    def insert_cached(self, node_id: str, block_hashes: Sequence[int]) -> None:
        """Record blocks ``node_id`` says it caches (its KV snapshot: hashes without their chain positions). Each is
        entered as held, so a prompt's block at an indexed position is found by its hash; at most
        ``max_blocks_per_node`` of them, the last ones given (the index keeps no more of a node)."""
        if block_hashes:
            self._add(node_id, block_hashes[-self.max_blocks_per_node :])

    def _add(self, node_id: str, block_hashes: Iterable[int]) -> None:
        """Enter ``block_hashes`` as ``node_id``'s, the last one given its most recently used."""
        lru = self._lru.get(node_id)
        if lru is None:
            lru = self._lru[node_id] = OrderedDict()
        holders = self._holders
        for block_hash in block_hashes:
            if block_hash in lru:
                lru.move_to_end(block_hash)
                nodes = holders[block_hash]
                if nodes.__class__ is not str and next(reversed(nodes)) != node_id:
                    del nodes[node_id]  # its most recent holder now
                    nodes[node_id] = None
                continue
            lru[block_hash] = None
            nodes = holders.get(block_hash)
            if nodes is None:
                holders[block_hash] = node_id  # its only holder: the id itself, no dict (most blocks have one)
            elif nodes.__class__ is str:
                holders[block_hash] = {nodes: None, node_id: None}
            else:
                nodes[node_id] = None
        while len(lru) > self.max_blocks_per_node:
            evicted, _ = lru.popitem(last=False)
            self._drop_holder(evicted, node_id)

    def remove(self, node_id: str, block_hashes: Sequence[int]) -> None:
        """Forget these blocks of ``node_id`` (it evicted them: a KV event); blocks not indexed are ignored."""
        lru = self._lru.get(node_id)
        if lru is None:
            return
        for block_hash in block_hashes:
            if block_hash in lru:
                del lru[block_hash]
                self._drop_holder(block_hash, node_id)

    def remove_node(self, node_id: str) -> None:
        """Forget everything about ``node_id`` (it died, left or restarted with an empty cache)."""
        lru = self._lru.pop(node_id, None)
        if lru is None:
            return
        for block_hash in lru:
            self._drop_holder(block_hash, node_id)

    def match(self, block_hashes: Sequence[int], max_candidates: int = 8) -> dict[str, int]:
        """Nodes holding a prefix of ``block_hashes`` → number of leading blocks matched (>= 1).

        Finds the deepest block any node holds (binary search, O(log n) lookups), then collects holders at
        levels d, d/2, d/4, ..., 0 until ``max_candidates`` nodes are found. A node first seen at level l is
        credited l + 1 blocks: exact for the holders of the deepest block, a lower bound for the others.
        """
        holders = self._holders
        if not block_hashes or block_hashes[0] not in holders:
            return {}
        positions = self._positions(len(block_hashes))
        lo, hi = 0, len(positions) - 1  # positions[lo] is held; find the last held indexed position
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if block_hashes[positions[mid]] in holders:
                lo = mid
            else:
                hi = mid - 1
        matched: dict[str, int] = {}
        level = lo
        while True:
            block = positions[level]
            # .get: held blocks need not be a contiguous prefix (a chain inserted under another chain's
            # tail, or evicted unevenly), so a level below the deepest held one may be held by nobody
            nodes = holders.get(block_hashes[block], ())
            for node_id in islice((nodes,) if nodes.__class__ is str else reversed(nodes), max_candidates):
                if node_id not in matched:
                    matched[node_id] = block + 1
                    if len(matched) >= max_candidates:
                        return matched
            if level == 0:
                return matched
            level //= 2

    def num_blocks(self, node_id: str) -> int:
        lru = self._lru.get(node_id)
        return 0 if lru is None else len(lru)

    def holds(self, node_id: str, block_hash: int) -> bool:
        lru = self._lru.get(node_id)
        return lru is not None and block_hash in lru

    @property
    def node_ids(self) -> list[str]:
        return list(self._lru)

    def _positions(self, num_blocks: int) -> range | list[int]:
        """Indexed block positions of a chain of ``num_blocks`` blocks, ascending."""
        dense = self.num_dense_blocks
        if num_blocks <= dense:
            return range(num_blocks)
        positions = self._sparse_positions.get(num_blocks)
        if positions is None:
            stride = self.sparse_stride
            first_sparse = (dense // stride + 1) * stride - 1  # the first i >= dense with (i + 1) % stride == 0
            positions = [*range(dense), *range(first_sparse, num_blocks, stride)]
            if len(self._sparse_positions) < 4096:  # prompt lengths seen; bounded
                self._sparse_positions[num_blocks] = positions
        return positions

    def _indexed(self, block_hashes: Sequence[int]) -> Sequence[int]:
        if len(block_hashes) <= self.num_dense_blocks:
            return block_hashes
        return [block_hashes[i] for i in self._positions(len(block_hashes))]

    def _drop_holder(self, block_hash: int, node_id: str) -> None:
        nodes = self._holders.get(block_hash)
        if nodes is None:
            return
        if nodes.__class__ is str:
            if nodes == node_id:
                del self._holders[block_hash]
            return
        nodes.pop(node_id, None)
        if not nodes:
            del self._holders[block_hash]
