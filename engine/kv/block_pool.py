"""A pool of fixed-size KV blocks in one memory tier: free list, reference counts, prefix cache.

Integers only: a block is named by its index into the runner's KV tensors of that tier. Every block
is in exactly one of three states::

    free        ref_count == 0, no hash           in ``_free_block_ids`` (FIFO)
    evictable   ref_count == 0, hash registered   last in ``_lru`` (LRU, oldest first; see below)
    in use      ref_count >= 1                    held by block tables (and pinned copy sources)

    num_free_blocks = len(free) + num evictable;  num_free_blocks + num_used_blocks == num_blocks

The LRU order of the evictable blocks is a deque of block ids, appended to when a block becomes evictable and
popped from its head by ``allocate``; a block revived (``touch``) keeps its entry there, now stale, and skipped
when popped: an entry is live when it is its block's last (``_lru_entries``) and the block is evictable. So
freeing, reviving and evicting are a deque append, nothing, and a deque pop (an OrderedDict costs ~2x, in
memory spread over its nodes); the deque is rebuilt from its live entries when stale ones make it twice the pool.

A hash is registered for a block only once its KV is computed and the block is full; the prefix cache
maps ``BlockHash -> block_id`` for every hashed block (in use or evictable), at most one block per hash.
``allocate`` takes plain free blocks first and evicts the least recently freed cached block only when
the free list is empty, dropping its hash.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Iterable, Sequence

from engine.kv.block_hash import BlockHash
from engine.kv.kv_events import KVEventLog


class Tier(enum.Enum):
    """Where a block's KV bytes live. Each tier has its own pool and its own block id space."""

    DEVICE = "device"  # accelerator memory; the only tier a forward pass reads
    HOST = "host"  # host RAM of the same node (swap space)
    REMOTE = "remote"  # reserved: KV held by another node, moved over the transport


class NoFreeBlocksError(RuntimeError):
    """An allocation was attempted without checking the paired ``can_*`` verb first."""


class BlockPool:
    """The blocks of one tier. ``enable_caching`` turns on the prefix cache (device tier only)."""

    def __init__(self, tier: Tier, num_blocks: int, enable_caching: bool = False) -> None:
        if num_blocks < 0:
            raise ValueError(f"num_blocks must be >= 0, got {num_blocks}")
        self.tier = tier
        self.num_blocks = num_blocks
        self.enable_caching = enable_caching
        self._ref_counts = [0] * num_blocks
        self._block_hashes: list[BlockHash | None] = [None] * num_blocks
        self._free_block_ids: deque[int] = deque(range(num_blocks))
        self._lru: deque[int] = deque()  # evictable blocks, oldest first, with stale entries (module docstring)
        self._lru_entries = [0] * num_blocks  # each block's entries in _lru
        self._num_evictable = 0
        # the prefix cache, by chain value (an int hashes at once; a BlockHash would hash its block's tokens at every
        # lookup): the block it names, whose registered BlockHash (``_block_hashes``) a lookup also compares, so a
        # 64-bit collision cannot alias two blocks with different tokens (the second is simply not cached)
        self._cached_block_ids: dict[int, int] = {}
        self.kv_events: KVEventLog | None = None  # set: every registration, eviction and reset logged (kv_events.py)

    # -- capacity -------------------------------------------------------------------------------

    @property
    def num_free_blocks(self) -> int:
        """Blocks ``allocate`` can hand out now (plain free + evictable cached)."""
        return len(self._free_block_ids) + self._num_evictable

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - self.num_free_blocks

    @property
    def num_cached_blocks(self) -> int:
        """Blocks with a registered hash (in use or evictable)."""
        return len(self._cached_block_ids)

    @property
    def usage(self) -> float:
        """Fraction of blocks in use, 0..1 (0 for an empty pool)."""
        return self.num_used_blocks / self.num_blocks if self.num_blocks else 0.0

    # -- paired verbs -----------------------------------------------------------------------------

    def can_allocate(self, num_blocks: int) -> bool:
        return num_blocks <= self.num_free_blocks

    def allocate(self, num_blocks: int) -> list[int]:
        """Take ``num_blocks`` blocks, each with ref_count 1. Evicts LRU cached blocks if needed."""
        free_ids = self._free_block_ids
        num_free = len(free_ids)
        if num_blocks > num_free + self._num_evictable:
            raise NoFreeBlocksError(
                f"{self.tier.value}: need {num_blocks} blocks, {self.num_free_blocks} free of {self.num_blocks}"
            )
        ref_counts = self._ref_counts
        if num_blocks <= num_free:  # plain free blocks only
            if num_blocks == 1:
                block_id = free_ids.popleft()
                ref_counts[block_id] = 1
                return [block_id]
            popleft = free_ids.popleft
            block_ids = [popleft() for _ in range(num_blocks)]
        else:  # every plain free block, then the least recently freed cached ones, their hashes dropped
            block_ids = list(free_ids)
            free_ids.clear()
            popleft, entries = self._lru.popleft, self._lru_entries
            block_hashes, cached = self._block_hashes, self._cached_block_ids
            num_evicted = num_blocks - num_free
            self._num_evictable -= num_evicted
            while num_evicted:
                block_id = popleft()
                num_entries = entries[block_id] - 1
                entries[block_id] = num_entries
                if num_entries or ref_counts[block_id]:
                    continue  # stale: the block has a later entry, or was revived
                block_hash = block_hashes[block_id]  # evictable: its hash dropped
                del cached[block_hash.hash_value]
                block_hashes[block_id] = None
                if self.kv_events is not None:
                    self.kv_events.removed(block_hash.hash_value)
                block_ids.append(block_id)
                num_evicted -= 1
        for block_id in block_ids:
            ref_counts[block_id] = 1
        return block_ids

    def touch(self, block_ids: Iterable[int]) -> None:
        """Add one reference to each block (sharing, or reviving an evictable cached block)."""
        for block_id in block_ids:
            if self._ref_counts[block_id] == 0:
                if self._block_hashes[block_id] is None:
                    raise ValueError(f"{self.tier.value}: block {block_id} is free and not cached")
                self._num_evictable -= 1  # its entry in _lru is stale now
            self._ref_counts[block_id] += 1

    def free(self, block_ids: Iterable[int]) -> None:
        """Drop one reference from each block, in order. A block reaching zero becomes free, or, when
        it holds a registered hash, the most recently used evictable block (so callers free a table
        tail-first: its last blocks, the least likely to be shared, get evicted first)."""
        ref_counts, block_hashes, entries = self._ref_counts, self._block_hashes, self._lru_entries
        append_evictable, free_ids = self._lru.append, self._free_block_ids
        num_evictable = self._num_evictable
        try:
            for block_id in block_ids:
                ref_count = ref_counts[block_id]
                if ref_count == 1:
                    ref_counts[block_id] = 0
                    if block_hashes[block_id] is not None:
                        append_evictable(block_id)
                        entries[block_id] += 1
                        num_evictable += 1
                    else:
                        free_ids.append(block_id)
                elif ref_count > 1:
                    ref_counts[block_id] = ref_count - 1
                else:
                    raise ValueError(f"{self.tier.value}: block {block_id} freed more often than allocated")
        finally:
            self._num_evictable = num_evictable
        if len(self._lru) > 2 * self.num_blocks + 64:
            self._compact_lru()

    def _compact_lru(self) -> None:
        """Drop the stale entries of ``_lru`` (the same order of the live ones)."""
        live = self.evictable_block_ids()
        self._lru = deque(live)
        entries = self._lru_entries = [0] * self.num_blocks
        for block_id in live:
            entries[block_id] = 1

    # -- prefix cache ---------------------------------------------------------------------------

    def reset_prefix_cache(self) -> int | None:
        """Forget every cached block (vLLM's ``reset_prefix_cache``: after a weight update, or between benchmark
        runs); only while no block is in use, as vLLM's: None then, else the number of cached blocks dropped. Every
        block is plain free afterwards, in id order."""
        if self.num_used_blocks:
            return None
        num_dropped = len(self._cached_block_ids)
        self._block_hashes = [None] * self.num_blocks
        self._free_block_ids = deque(range(self.num_blocks))
        self._lru = deque()
        self._lru_entries = [0] * self.num_blocks
        self._num_evictable = 0
        self._cached_block_ids = {}
        if self.kv_events is not None:
            self.kv_events.cleared()
        return num_dropped

    def cache_block(self, block_id: int, block_hash: BlockHash, parent: int | None = None) -> bool:
        """Register a full, computed, in-use block under its hash. Returns False (and registers
        nothing) when caching is off or another block already holds that hash (a duplicate). ``parent``: the
        chain value of the block before it in its sequence (None: the first), for the KV events' log."""
        if not self.enable_caching:
            return False
        if self._ref_counts[block_id] <= 0:
            raise ValueError(f"{self.tier.value}: cannot cache block {block_id}: not in use")
        current = self._block_hashes[block_id]
        if current is not None:
            if current != block_hash:
                raise ValueError(f"{self.tier.value}: block {block_id} already cached under another hash")
            return True
        if block_hash.hash_value in self._cached_block_ids:
            return False  # a duplicate (or a chain-value collision: not cached)
        self._block_hashes[block_id] = block_hash
        self._cached_block_ids[block_hash.hash_value] = block_id
        if self.kv_events is not None:
            self.kv_events.stored(block_hash, parent)
        return True

    def cache_blocks(
        self, block_ids: Sequence[int], block_hashes: Sequence[BlockHash], parent: int | None = None
    ) -> None:
        """``cache_block`` for each pair of ``block_ids`` and ``block_hashes``, in order (the same blocks
        registered, the same duplicates skipped, the same errors, raised at the same pair); the hashes are one
        chain, ``parent`` the chain value before its first."""
        if not self.enable_caching:
            return
        if self.kv_events is not None:  # logged one by one (the log joins a chain's blocks into one event)
            for block_id, block_hash in zip(block_ids, block_hashes):
                self.cache_block(block_id, block_hash, parent)
                parent = block_hash.hash_value
            return
        ref_counts, registered, cached = self._ref_counts, self._block_hashes, self._cached_block_ids
        for block_id, block_hash in zip(block_ids, block_hashes):
            current = registered[block_id]
            if current is None and ref_counts[block_id] > 0:
                hash_value = block_hash.hash_value
                if hash_value not in cached:  # else a duplicate (or a chain-value collision): not cached
                    registered[block_id] = block_hash
                    cached[hash_value] = block_id
            else:
                self.cache_block(block_id, block_hash)  # in use under a hash already, or an error

    def get_cached_block(self, block_hash: BlockHash) -> int | None:
        block_id = self._cached_block_ids.get(block_hash.hash_value)
        if block_id is None or self._block_hashes[block_id] != block_hash:
            return None
        return block_id

    # -- introspection (tests, stats) -----------------------------------------------------------

    def ref_count(self, block_id: int) -> int:
        return self._ref_counts[block_id]

    def block_hash(self, block_id: int) -> BlockHash | None:
        return self._block_hashes[block_id]

    def free_block_ids(self) -> list[int]:
        return list(self._free_block_ids)

    def evictable_block_ids(self) -> list[int]:
        """Oldest (next to evict) first."""
        ref_counts, block_hashes, entries = self._ref_counts, self._block_hashes, self._lru_entries
        seen = [0] * self.num_blocks  # entries met so far, walking oldest first: the last one is live
        live = []
        for block_id in self._lru:
            seen[block_id] += 1
            if seen[block_id] == entries[block_id] and ref_counts[block_id] == 0 and block_hashes[block_id] is not None:
                live.append(block_id)
        return live

    def cached_blocks(self) -> dict[BlockHash, int]:
        hashes = self._block_hashes
        return {hashes[block_id]: block_id for block_id in self._cached_block_ids.values()}
