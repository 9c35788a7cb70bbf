"""KVCacheManager's per-row fast paths against its general rule: ``try_allocate_slots`` (a decoding request writing
into its own last block, or past its table) gives what ``_num_blocks_needed`` + ``_allocate`` give, and
``cache_computed_blocks`` (one block, or a run through ``BlockPool.cache_blocks``) registers what a per-block
``cache_block`` loop registers; two managers, one driven through each, stay block for block the same."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.kv import KVCacheManager
from engine.kv.block_manager import NO_PREFIX_HIT as _NO_HIT
from engine.kv.block_pool import NoFreeBlocksError
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


def _full_tables(num_blocks: int, prompts: list[list[int]], done: list[bool]) -> tuple[KVCacheManager, list[Request]]:
    """A manager whose requests each fill their blocks exactly (prompts cut to whole blocks), every block cached;
    the ``done`` ones freed (their blocks evictable, so a later allocation may evict), the others returned, each with
    one sampled token whose position lies past its table."""
    manager = KVCacheManager(BLOCK_SIZE, num_blocks, 0)
    live = []
    for i, (prompt, finished) in enumerate(zip(prompts, done)):
        tokens = prompt[: len(prompt) // BLOCK_SIZE * BLOCK_SIZE] or prompt[:1] * BLOCK_SIZE
        request = Request(f"r{i}", list(tokens), SamplingParams(), 0.0)
        if manager.try_allocate_slots(request, request.num_tokens) is None:
            continue
        request.num_computed_tokens = request.num_tokens
        manager.cache_computed_blocks(request)
        if finished:
            manager.free(request)
        else:
            request.append_output_token_ids(7)
            live.append(request)
    return manager, live


@settings(max_examples=60, deadline=None)
@given(
    prompts=st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=13), min_size=1, max_size=6),
    done=st.lists(st.booleans(), min_size=6, max_size=6),
    num_blocks=st.integers(2, 14),
)
def test_append_fresh_blocks_equals_one_allocation_at_a_time(prompts, done, num_blocks):
    """A decode cohort's step: one fresh block for each row, in order, in one pool call, gives the same tables, free
    list and evictions as ``try_allocate_slots(request, 1)`` for each row in turn (evicting cached blocks where the
    plain free ones run out); where they do not all fit it raises and changes nothing."""
    bulk, rows = _full_tables(num_blocks, prompts, done)
    single, single_rows = _full_tables(num_blocks, prompts, done)
    before = _state(bulk)
    if len(rows) > bulk.num_free_device_blocks:
        with pytest.raises(NoFreeBlocksError):
            bulk.append_fresh_blocks([r.req_id for r in rows])
        assert _state(bulk) == before
        return
    bulk.append_fresh_blocks([r.req_id for r in rows])
    for request in single_rows:
        assert single.try_allocate_slots(request, 1) == []
    assert _state(bulk) == _state(single)


@settings(max_examples=60, deadline=None)
@given(
    prompt=st.lists(st.integers(0, 3), min_size=1, max_size=13),
    token=st.sampled_from([0, 3, 5]),
    steps=st.integers(1, 3 * BLOCK_SIZE),
    lag=st.booleans(),
    algo=st.sampled_from(["sha256", "xxhash"]),
)
def test_cache_repeated_block_equals_cache_computed_blocks(prompt, token, steps, lag, algo):
    """A decode row sampling ``token``: each block it fills, named by ``cache_repeated_block`` without its tokens
    where it is the next to register, is what ``cache_computed_blocks`` registers from the tokens; where it is not
    the next (registrations lagging: ``lag``), it says so and changes nothing."""
    managers = [KVCacheManager(BLOCK_SIZE, 16, 0, hash_algo=algo) for _ in range(2)]
    rows = [Request("r", list(prompt), SamplingParams(), 0.0) for _ in range(2)]
    for manager, request in zip(managers, rows):
        assert manager.try_allocate_slots(request, request.num_tokens) == []
        request.num_computed_tokens = request.num_tokens
        if not lag:
            manager.cache_computed_blocks(request)
        request.append_output_token_ids(token)
    fast, plain = managers
    for _ in range(steps):
        for manager, request in zip(managers, rows):
            assert manager.try_allocate_slots(request, 1) is not None
            request.num_computed_tokens += 1
            request.append_output_token_ids(token)
        if rows[0].num_computed_tokens % BLOCK_SIZE:
            continue
        block = rows[0].num_computed_tokens // BLOCK_SIZE - 1
        # every position of the block holds a sampled token (the cohort's test: past the tokens at its joining)
        if block * BLOCK_SIZE >= len(prompt) + 1:
            behind = fast._num_cached_blocks.get("r", 0) != block
            assert fast.cache_repeated_block(rows[0], block, token) is not behind
            if behind:
                fast.cache_computed_blocks(rows[0])
        else:
            fast.cache_computed_blocks(rows[0])
        plain.cache_computed_blocks(rows[1])
        assert _state(fast) == _state(plain)
        assert fast._block_hashes["r"][: block + 1] == plain._block_hashes["r"][: block + 1]
