"""What each worker was sent, as a tree of prompt blocks: the anchors' approximate view of worker caches.

SGLang's cache-aware router keeps a multi-tenant radix tree of the text it routed to each worker; llm-d's
prefix-cache scorer and Dynamo's KV router (without KV events) keep per-server indexes of routed prefix
blocks. Here the keys are the prompt's block hash chain (``RouteRequest.block_hashes``): a chain value
names the whole prefix up to its block, so a per-worker set of chain values *is* a radix tree over
blocks, with the tree's edges implied::

    holders:  block hash ─► {worker ids}                  (who was sent this block)
    lru:      worker id ─► OrderedDict[block hash, t_s]   (least recently touched first)

``match`` is exact over the recorded blocks: a worker's match is the number of leading blocks of the
prompt it holds without a gap. Entries leave by ``evict_to`` (keep the most recent ``max_blocks`` per
worker) and ``expire_before`` (drop entries older than a time). A chain is inserted deepest block first,
so a prompt's first blocks are its worker's most recently touched and are evicted last (leaves first).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence


class RoutedPrefixTree:
    def __init__(self) -> None:
        self._holders: dict[int, set[str]] = {}
        self._lru: dict[str, OrderedDict[int, float]] = {}

    def insert(self, worker_id: str, block_hashes: Sequence[int], now_s: float = 0.0) -> None:
        lru = self._lru.get(worker_id)
        if lru is None:
            lru = self._lru[worker_id] = OrderedDict()
        holders = self._holders
        for block_hash in reversed(block_hashes):
            if block_hash in lru:
                lru.move_to_end(block_hash)
            else:
                holders.setdefault(block_hash, set()).add(worker_id)
            lru[block_hash] = now_s

    def match(self, block_hashes: Sequence[int]) -> dict[str, int]:
        """Worker → leading blocks of ``block_hashes`` it holds (only workers with >= 1)."""
        holders = self._holders
        if not block_hashes:
            return {}
        first = holders.get(block_hashes[0])
        if not first:
            return {}
        alive = set(first)
        depth: dict[str, int] = {}
        i = 1
        for i in range(1, len(block_hashes)):
            nxt = holders.get(block_hashes[i])
            still = alive & nxt if nxt else set()
            if len(still) != len(alive):
                for worker in alive - still:
                    depth[worker] = i
                alive = still
                if not alive:
                    return depth
        else:
            i = len(block_hashes)
        for worker in alive:
            depth[worker] = i
        return depth

    def block_hashes(self, worker_id: str) -> list[int]:
        """The blocks recorded for ``worker_id``, least recently touched first."""
        return list(self._lru.get(worker_id, ()))

    def size(self, worker_id: str) -> int:
        """Blocks recorded for ``worker_id`` (SGLang's tree size)."""
        lru = self._lru.get(worker_id)
        return 0 if lru is None else len(lru)

    def evict_to(self, max_blocks: int) -> None:
        """Keep each worker's ``max_blocks`` most recently touched blocks."""
        for worker_id, lru in self._lru.items():
            while len(lru) > max_blocks:
                block_hash, _ = lru.popitem(last=False)
                self._drop(block_hash, worker_id)

    def expire_before(self, t_s: float) -> None:
        """Forget blocks last touched before ``t_s`` (a TTL)."""
        for worker_id, lru in self._lru.items():
            while lru:
                block_hash, touched_s = next(iter(lru.items()))
                if touched_s >= t_s:
                    break
                lru.popitem(last=False)
                self._drop(block_hash, worker_id)

    def remove(self, worker_id: str, block_hashes: Sequence[int]) -> None:
        """Forget these blocks of ``worker_id`` (a KV event's removal; blocks it does not hold are ignored)."""
        lru = self._lru.get(worker_id)
        if lru is None:
            return
        for block_hash in block_hashes:
            if block_hash in lru:
                del lru[block_hash]
                self._drop(block_hash, worker_id)

    def remove_worker(self, worker_id: str) -> None:
        lru = self._lru.pop(worker_id, None)
        for block_hash in lru or ():
            self._drop(block_hash, worker_id)

    def _drop(self, block_hash: int, worker_id: str) -> None:
        workers = self._holders.get(block_hash)
        if workers is not None:
            workers.discard(worker_id)
            if not workers:
                del self._holders[block_hash]
