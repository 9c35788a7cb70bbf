"""KVCacheManager's per-row fast paths against its general rule: ``try_allocate_slots`` (a decoding request writing
into its own last block, or past its table) gives what ``_num_blocks_needed`` + ``_allocate`` give, and
``cache_computed_blocks`` (one block, or a run through ``BlockPool.cache_blocks``) registers what a per-block
``cache_block`` loop registers; two managers, one driven through each, stay block for block the same."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from engine.kv import KVCacheManager
from engine.kv.block_manager import NO_PREFIX_HIT as _NO_HIT
from engine.request import Request
from engine.sampling_params import SamplingParams

BLOCK_SIZE = 4


def _general_try_allocate(manager: KVCacheManager, request: Request, num_new_tokens: int):
    num_needed, num_new_blocks, cow_indices = manager._num_blocks_needed(request, num_new_tokens, _NO_HIT)
    if num_needed > manager.num_free_device_blocks:
        return None
    return manager._allocate(request, _NO_HIT, num_new_blocks, cow_indices)


def _general_cache(manager: KVCacheManager, request: Request) -> None:
    table = manager._device_tables.get(request.req_id)
    if not table:
        return
    num_full = min(request.num_computed_tokens // BLOCK_SIZE, len(table))
    start = manager._num_cached_blocks.get(request.req_id, 0)
    if num_full <= start:
        return
    chain = manager._hashes(request, num_full)
    for i in range(start, num_full):
        manager._device.cache_block(table[i], chain[i])
    manager._num_cached_blocks[request.req_id] = num_full


def _state(manager: KVCacheManager):
    pool = manager._device
    return (
        manager.block_tables(manager.tiers[0]),
        [pool.ref_count(b) for b in range(pool.num_blocks)],
        [pool.block_hash(b) for b in range(pool.num_blocks)],
        pool.free_block_ids(),
        pool.evictable_block_ids(),
        dict(manager._num_cached_blocks),
    )


@settings(max_examples=60, deadline=None)
@given(
    prompts=st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=14), min_size=1, max_size=4),
    steps=st.lists(st.tuples(st.integers(0, 3), st.integers(1, 6), st.booleans()), max_size=40),
    num_blocks=st.integers(4, 16),
)
def test_fast_paths_equal_the_general_rule(prompts, steps, num_blocks):
    fast = KVCacheManager(BLOCK_SIZE, num_blocks, 0)
    general = KVCacheManager(BLOCK_SIZE, num_blocks, 0)
    pairs = [
        (Request(f"r{i}", list(p), SamplingParams(), 0.0), Request(f"r{i}", list(p), SamplingParams(), 0.0))
        for i, p in enumerate(prompts)
    ]
    for which, num_new_tokens, finish in steps:
        a, b = pairs[which % len(pairs)]
        if finish:
            fast.free(a)
            general.free(b)
            for r in (a, b):
                r.num_computed_tokens = 0
            continue
        got = fast.try_allocate_slots(a, num_new_tokens)
        assert got == _general_try_allocate(general, b, num_new_tokens)
        if got is not None:  # the runner computed them (decode: one token more each; a prompt: its tokens)
            for r in (a, b):
                while r.num_tokens < r.num_computed_tokens + num_new_tokens:
                    r.append_output_token_ids(1)
                r.num_computed_tokens += num_new_tokens
            fast.cache_computed_blocks(a)
            _general_cache(general, b)
        assert _state(fast) == _state(general)
