"""A pool of fixed-size KV blocks in one memory tier: free list, reference counts, prefix cache.

Integers only: a block is named by its index into the runner's KV tensors of that tier. Every block
is in exactly one of three states::

    free        ref_count == 0, no hash           in ``_free_block_ids`` (FIFO)
    evictable   ref_count == 0, hash registered   in ``_evictable_block_ids`` (LRU, oldest first)
    in use      ref_count >= 1                    held by block tables (and pinned copy sources)

    num_free_blocks = len(free) + len(evictable);  num_free_blocks + num_used_blocks == num_blocks

A hash is registered for a block only once its KV is computed and the block is full; the prefix cache
maps ``BlockHash -> block_id`` for every hashed block (in use or evictable), at most one block per hash.
``allocate`` takes plain free blocks first and evicts the least recently freed cached block only when
the free list is empty, dropping its hash.
"""

from __future__ import annotations

import enum
from collections import OrderedDict, deque
from collections.abc import Iterable, Sequence

from engine.kv.block_hash import BlockHash


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
        self._evictable_block_ids: OrderedDict[int, None] = OrderedDict()
        # the prefix cache, by chain value (an int hashes at once; a BlockHash would hash its block's tokens at every
        # lookup): the block it names, whose registered BlockHash (``_block_hashes``) a lookup also compares, so a
        # 64-bit collision cannot alias two blocks with different tokens (the second is simply not cached)
        self._cached_block_ids: dict[int, int] = {}

    # -- capacity -------------------------------------------------------------------------------

    @property
    def num_free_blocks(self) -> int:
        """Blocks ``allocate`` can hand out now (plain free + evictable cached)."""
        return len(self._free_block_ids) + len(self._evictable_block_ids)

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
        if num_blocks > num_free + len(self._evictable_block_ids):
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
            popitem = self._evictable_block_ids.popitem
            block_hashes, cached = self._block_hashes, self._cached_block_ids
            for _ in range(num_blocks - num_free):
                block_id = popitem(last=False)[0]
                block_hash = block_hashes[block_id]
                if block_hash is not None:  # always (an evictable block is cached): _uncache inlined
                    del cached[block_hash.hash_value]
                    block_hashes[block_id] = None
                block_ids.append(block_id)
        for block_id in block_ids:
            ref_counts[block_id] = 1
        return block_ids

    def touch(self, block_ids: Iterable[int]) -> None:
        """Add one reference to each block (sharing, or reviving an evictable cached block)."""
        for block_id in block_ids:
            if self._ref_counts[block_id] == 0:
                if block_id not in self._evictable_block_ids:
                    raise ValueError(f"{self.tier.value}: block {block_id} is free and not cached")
                del self._evictable_block_ids[block_id]
            self._ref_counts[block_id] += 1

    def free(self, block_ids: Iterable[int]) -> None:
        """Drop one reference from each block, in order. A block reaching zero becomes free, or, when
        it holds a registered hash, the most recently used evictable block (so callers free a table
        tail-first: its last blocks, the least likely to be shared, get evicted first)."""
        ref_counts, block_hashes = self._ref_counts, self._block_hashes
        evictable, free_ids = self._evictable_block_ids, self._free_block_ids
        for block_id in block_ids:
            ref_count = ref_counts[block_id]
            if ref_count == 1:
                ref_counts[block_id] = 0
                if block_hashes[block_id] is not None:
                    evictable[block_id] = None
                else:
                    free_ids.append(block_id)
            elif ref_count > 1:
                ref_counts[block_id] = ref_count - 1
            else:
                raise ValueError(f"{self.tier.value}: block {block_id} freed more often than allocated")

    # -- prefix cache ---------------------------------------------------------------------------

    def cache_block(self, block_id: int, block_hash: BlockHash) -> bool:
        """Register a full, computed, in-use block under its hash. Returns False (and registers
        nothing) when caching is off or another block already holds that hash (a duplicate)."""
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
        return True

    def cache_blocks(self, block_ids: Sequence[int], block_hashes: Sequence[BlockHash]) -> None:
        """``cache_block`` for each pair of ``block_ids`` and ``block_hashes``, in order (the same blocks
        registered, the same duplicates skipped, the same errors, raised at the same pair)."""
        if not self.enable_caching:
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

    def _uncache(self, block_id: int) -> None:
        block_hash = self._block_hashes[block_id]
        if block_hash is not None:
            del self._cached_block_ids[block_hash.hash_value]
            self._block_hashes[block_id] = None

    # -- introspection (tests, stats) -----------------------------------------------------------

    def ref_count(self, block_id: int) -> int:
        return self._ref_counts[block_id]

    def block_hash(self, block_id: int) -> BlockHash | None:
        return self._block_hashes[block_id]

    def free_block_ids(self) -> list[int]:
        return list(self._free_block_ids)

    def evictable_block_ids(self) -> list[int]:
        """Oldest (next to evict) first."""
        return list(self._evictable_block_ids)

    def cached_blocks(self) -> dict[BlockHash, int]:
        hashes = self._block_hashes
        return {hashes[block_id]: block_id for block_id in self._cached_block_ids.values()}
