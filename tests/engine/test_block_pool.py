from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.kv import BlockPool, NoFreeBlocksError, Tier, hash_block_tokens


def _hash(i: int):
    return hash_block_tokens(None, [i, i, i, i])


def _check(pool: BlockPool) -> None:
    free = pool.free_block_ids()
    evictable = pool.evictable_block_ids()
    assert len(set(free)) == len(free) and not set(free) & set(evictable)
    used = [b for b in range(pool.num_blocks) if pool.ref_count(b) > 0]
    assert len(free) + len(evictable) + len(used) == pool.num_blocks
    assert pool.num_free_blocks + pool.num_used_blocks == pool.num_blocks
    assert all(pool.block_hash(b) is None for b in free)
    assert all(pool.block_hash(b) is not None and pool.ref_count(b) == 0 for b in evictable)
    for block_hash, block_id in pool.cached_blocks().items():
        assert pool.block_hash(block_id) == block_hash


def test_allocate_and_free_round_trip():
    pool = BlockPool(Tier.HOST, 4)
    blocks = pool.allocate(3)
    assert len(set(blocks)) == 3 and pool.num_free_blocks == 1
    assert all(pool.ref_count(b) == 1 for b in blocks)
    pool.free(blocks)
    assert pool.num_free_blocks == 4
    _check(pool)


def test_allocate_without_room_raises_and_changes_nothing():
    pool = BlockPool(Tier.DEVICE, 2)
    pool.allocate(1)
    assert not pool.can_allocate(2)
    with pytest.raises(NoFreeBlocksError):
        pool.allocate(2)
    assert pool.num_free_blocks == 1


def test_double_free_raises():
    pool = BlockPool(Tier.DEVICE, 2)
    (b,) = pool.allocate(1)
    pool.free([b])
    with pytest.raises(ValueError):
        pool.free([b])


def test_shared_block_is_freed_after_last_reference():
    pool = BlockPool(Tier.DEVICE, 2)
    (b,) = pool.allocate(1)
    pool.touch([b])
    assert pool.ref_count(b) == 2
    pool.free([b])
    assert pool.num_free_blocks == 1
    pool.free([b])
    assert pool.num_free_blocks == 2


def test_cached_block_is_evictable_then_revived_by_touch():
    pool = BlockPool(Tier.DEVICE, 2, enable_caching=True)
    (b,) = pool.allocate(1)
    assert pool.cache_block(b, _hash(1))
    pool.free([b])
    assert pool.evictable_block_ids() == [b] and pool.num_free_blocks == 2
    assert pool.get_cached_block(_hash(1)) == b
    pool.touch([b])
    assert pool.ref_count(b) == 1 and pool.evictable_block_ids() == []
    _check(pool)


def test_allocation_prefers_free_blocks_then_evicts_least_recently_freed():
    pool = BlockPool(Tier.DEVICE, 3, enable_caching=True)
    a, b, c = pool.allocate(3)
    pool.cache_block(a, _hash(1))
    pool.cache_block(b, _hash(2))
    pool.free([b, a, c])  # evictable LRU order: b, a; c is plain free
    assert pool.allocate(1) == [c]
    assert pool.allocate(1) == [b]
    assert pool.get_cached_block(_hash(2)) is None  # evicted: hash dropped
    assert pool.get_cached_block(_hash(1)) == a
    _check(pool)


def test_duplicate_hash_is_not_registered_twice():
    pool = BlockPool(Tier.DEVICE, 2, enable_caching=True)
    a, b = pool.allocate(2)
    assert pool.cache_block(a, _hash(1))
    assert not pool.cache_block(b, _hash(1))
    assert pool.get_cached_block(_hash(1)) == a and pool.block_hash(b) is None


def test_a_chain_value_collision_never_aliases_blocks_with_other_tokens():
    """The cache is keyed by the 64-bit chain value; a lookup also compares the block's tokens, so a block whose
    value collides with a cached one's is neither found as it nor registered over it."""
    pool = BlockPool(Tier.DEVICE, 4, enable_caching=True)
    first = _hash(1)
    impostor = first._replace(token_ids=(9, 9, 9, 9))  # same chain value, other tokens
    a, b = pool.allocate(2)
    assert pool.cache_block(a, first)
    assert pool.get_cached_block(impostor) is None
    assert not pool.cache_block(b, impostor)  # not cached: the value names ``a``'s tokens
    assert pool.get_cached_block(first) == a and pool.block_hash(b) is None
    assert pool.cached_blocks() == {first: a}
    pool.free([a, b])
    pool.allocate(4)  # the plain free blocks first, then ``a`` evicted
    assert pool.get_cached_block(first) is None and pool.num_cached_blocks == 0
    _check(pool)


def test_caching_disabled_registers_nothing():
    pool = BlockPool(Tier.HOST, 1)
    (b,) = pool.allocate(1)
    assert not pool.cache_block(b, _hash(1))
    pool.free([b])
    assert pool.free_block_ids() == [b]


def test_touch_of_a_plain_free_block_raises():
    pool = BlockPool(Tier.DEVICE, 1, enable_caching=True)
    with pytest.raises(ValueError):
        pool.touch([0])


_ops = st.lists(
    st.one_of(
        st.tuples(st.just("allocate"), st.integers(0, 4)),
        st.tuples(st.just("free"), st.integers(0, 100)),
        st.tuples(st.just("touch"), st.integers(0, 100)),
        st.tuples(st.just("cache"), st.integers(0, 100)),
        st.tuples(st.just("hit"), st.integers(0, 5)),
    ),
    max_size=60,
)


@given(_ops)
def test_pool_invariants_under_random_operations(ops):
    pool = BlockPool(Tier.DEVICE, 6, enable_caching=True)
    held: list[int] = []  # one entry per reference we hold
    for op, arg in ops:
        if op == "allocate" and pool.can_allocate(arg):
            held.extend(pool.allocate(arg))
        elif op == "free" and held:
            pool.free([held.pop(arg % len(held))])
        elif op == "touch" and held:
            b = held[arg % len(held)]
            pool.touch([b])
            held.append(b)
        elif op == "cache" and held:
            b = held[arg % len(held)]
            if pool.block_hash(b) is None:
                pool.cache_block(b, _hash(arg % 5))
        elif op == "hit":
            b = pool.get_cached_block(_hash(arg))
            if b is not None:
                pool.touch([b])
                held.append(b)
        _check(pool)
        for b in range(pool.num_blocks):
            assert pool.ref_count(b) == held.count(b)
    pool.free(held)
    assert pool.num_free_blocks == pool.num_blocks
