"""BlockPool's bulk forms against the block-by-block rule: ``cache_blocks`` registers exactly what a loop of
``cache_block`` does (the same duplicates skipped, the same error at the same pair), and ``allocate`` / ``free``
(plain free blocks first, then LRU evictions; tail-first frees) keep the same free order, LRU order and cache
as the one-block-at-a-time reference below, through random sequences of operations."""

from __future__ import annotations

from collections import OrderedDict, deque

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.kv import BlockPool, NoFreeBlocksError, Tier, hash_block_tokens


class _Reference:
    """The pool's rule one block at a time (free FIFO, evictable LRU, cache by chain value)."""

    def __init__(self, num_blocks: int) -> None:
        self.ref = [0] * num_blocks
        self.hashes = [None] * num_blocks
        self.free_ids = deque(range(num_blocks))
        self.evictable = OrderedDict()
        self.cached = {}

    def allocate(self, n: int) -> list[int]:
        if n > len(self.free_ids) + len(self.evictable):
            raise NoFreeBlocksError
        out = []
        for _ in range(n):
            if self.free_ids:
                b = self.free_ids.popleft()
            else:
                b, _ = self.evictable.popitem(last=False)
                del self.cached[self.hashes[b].hash_value]
                self.hashes[b] = None
            self.ref[b] = 1
            out.append(b)
        return out

    def free(self, block_ids) -> None:
        for b in block_ids:
            self.ref[b] -= 1
            if self.ref[b] == 0:
                if self.hashes[b] is not None:
                    self.evictable[b] = None
                else:
                    self.free_ids.append(b)

    def cache_block(self, b: int, h) -> None:
        if self.hashes[b] is None and h.hash_value not in self.cached:
            self.hashes[b] = h
            self.cached[h.hash_value] = b

    def touch(self, block_ids) -> None:
        for b in block_ids:
            if self.ref[b] == 0:
                del self.evictable[b]
            self.ref[b] += 1


def _same(pool: BlockPool, ref: _Reference) -> None:
    assert [pool.ref_count(b) for b in range(pool.num_blocks)] == ref.ref
    assert [pool.block_hash(b) for b in range(pool.num_blocks)] == ref.hashes
    assert pool.free_block_ids() == list(ref.free_ids)
    assert pool.evictable_block_ids() == list(ref.evictable)
    assert {h.hash_value: b for h, b in pool.cached_blocks().items()} == ref.cached


def _hash(i: int):
    return hash_block_tokens(None, [i % 5, 0])  # fewer values than blocks: duplicates happen


@settings(max_examples=80, deadline=None)
@given(ops=st.lists(st.tuples(st.sampled_from("acfft"), st.integers(0, 12), st.integers(0, 30)), max_size=60))
def test_bulk_forms_equal_the_block_by_block_rule(ops):
    num_blocks = 12
    pool, ref = BlockPool(Tier.DEVICE, num_blocks, enable_caching=True), _Reference(num_blocks)
    tables: list[list[int]] = []
    for op, n, salt in ops:
        if op == "a":  # a table: new blocks
            if n > pool.num_free_blocks:
                with pytest.raises(NoFreeBlocksError):
                    pool.allocate(n)
                continue
            got = pool.allocate(n)
            assert got == ref.allocate(n)
            tables.append(got)
        elif op == "c" and tables:  # register a table's blocks (some duplicates, some registered already)
            table = tables[salt % len(tables)]
            hashes = [_hash(b) for b in table]
            pool.cache_blocks(table, hashes)
            for b, h in zip(table, hashes):
                ref.cache_block(b, h)
        elif op == "f" and tables:  # release a table, tail first
            table = tables.pop(salt % len(tables))
            pool.free(reversed(table))
            ref.free(reversed(table))
        elif op == "t" and tables:  # share a table's blocks (revives evictable ones)
            table = tables[salt % len(tables)]
            pool.touch(table)
            ref.touch(table)
            tables.append(list(table))
        _same(pool, ref)


def test_cache_blocks_raises_where_cache_block_would():
    pool = BlockPool(Tier.DEVICE, 4, enable_caching=True)
    a, b, c = pool.allocate(3)
    pool.cache_block(b, _hash(1))
    pool.cache_blocks([b], [_hash(1)])  # the same hash again: fine
    with pytest.raises(ValueError, match="already cached under another hash"):
        pool.cache_blocks([a, b, c], [_hash(2), _hash(3), _hash(4)])
    assert pool.block_hash(a) == _hash(2) and pool.block_hash(c) is None  # the pairs before it registered
    with pytest.raises(ValueError, match="not in use"):
        pool.cache_blocks([3], [_hash(5)])
    off = BlockPool(Tier.HOST, 2)
    off.cache_blocks(off.allocate(2), [_hash(0), _hash(1)])
    assert off.num_cached_blocks == 0


def test_free_of_an_unused_block_raises():
    pool = BlockPool(Tier.DEVICE, 2, enable_caching=True)
    (a,) = pool.allocate(1)
    pool.free([a])
    with pytest.raises(ValueError, match="freed more often than allocated"):
        pool.free([a])


def test_revived_blocks_leave_stale_lru_entries_that_compaction_drops():
    """Reviving and freeing cached blocks again and again (a shared prefix) grows the LRU deque by stale entries;
    past twice the pool it is rebuilt, and the order, the evictions and the counts stay the reference's."""
    pool, ref = BlockPool(Tier.DEVICE, 6, enable_caching=True), _Reference(6)
    table = pool.allocate(4)
    assert table == ref.allocate(4)
    pool.cache_blocks(table, [_hash(b) for b in table])
    for b in table:
        ref.cache_block(b, _hash(b))
    pool.free(reversed(table))
    ref.free(reversed(table))
    for k in range(100):
        shared = table[: 1 + k % 4]
        pool.touch(shared)
        ref.touch(shared)
        pool.free(reversed(shared))
        ref.free(reversed(shared))
        assert len(pool._lru) <= 2 * pool.num_blocks + 64 + len(shared)
        _same(pool, ref)
    assert pool.num_free_blocks == 6
    got = pool.allocate(6)
    assert got == ref.allocate(6)  # two plain free blocks, then the four cached ones in LRU order
    _same(pool, ref)
