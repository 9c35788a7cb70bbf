"""KV cache events (engine/kv/kv_events.py): the device pool logs what it registers, evicts and clears, as vLLM's
block pool does; a consumer that applies the events holds exactly the pool's cached blocks after every step, under
eviction pressure, shared prefixes, decode-filled blocks and a reset; nothing is logged unless asked."""

from __future__ import annotations

import random

from backends.fake import build_trivial_engine
from engine.kv.block_hash import BlockHash, hash_block_tokens, hash_full_blocks
from engine.kv.block_pool import BlockPool, Tier
from engine.kv.kv_events import AllBlocksCleared, BlockRemoved, BlockStored, KVEventLog
from engine.sampling_params import SamplingParams

PROMPT = list(range(10, 74))  # four full blocks of 16


def _pool_with_log(num_blocks: int = 8) -> BlockPool:
    pool = BlockPool(Tier.DEVICE, num_blocks, enable_caching=True)
    pool.kv_events = KVEventLog()
    return pool


def test_a_chain_is_one_stored_event_and_a_duplicate_is_not_announced():
    pool = _pool_with_log()
    chain = hash_full_blocks(PROMPT[:48], 16)
    blocks = pool.allocate(3)
    pool.cache_blocks(blocks, chain)
    (stored,) = pool.kv_events.take()
    assert stored == BlockStored([h.hash_value for h in chain], None, PROMPT[:48], None)
    other = pool.allocate(1)  # a second block with the first block's hash: a duplicate, not registered
    assert not pool.cache_block(other[0], chain[0])
    assert pool.kv_events.take() == []
    more = hash_full_blocks(PROMPT, 16)  # the chain's fourth block, cached on its own later: its parent named
    (fourth,) = pool.allocate(1)
    pool.cache_block(fourth, more[3], more[2].hash_value)
    assert pool.kv_events.take() == [BlockStored([more[3].hash_value], more[2].hash_value, PROMPT[48:], None)]


def test_an_eviction_is_a_removed_event_and_a_reset_clears_all():
    pool = _pool_with_log(num_blocks=4)
    chain = hash_full_blocks(PROMPT, 16)
    blocks = pool.allocate(4)
    pool.cache_blocks(blocks, chain)
    pool.free(reversed(blocks))  # tail first: the last block is evicted first
    pool.kv_events.take()
    pool.allocate(2)
    assert pool.kv_events.take() == [BlockRemoved([chain[3].hash_value, chain[2].hash_value])]
    assert pool.reset_prefix_cache() is None  # two blocks in use: refused, nothing logged
    assert pool.kv_events.take() == []


def test_a_reset_logs_all_blocks_cleared():
    pool = _pool_with_log()
    blocks = pool.allocate(2)
    pool.cache_blocks(blocks, hash_full_blocks(PROMPT[:32], 16))
    pool.free(blocks)
    pool.kv_events.take()
    assert pool.reset_prefix_cache() == 2 and pool.kv_events.take() == [AllBlocksCleared()]


def test_nothing_is_logged_unless_asked():
    engine = build_trivial_engine(num_device_blocks=64)
    engine.add_request(PROMPT, SamplingParams(max_tokens=2, ignore_eos=True))
    while engine.has_unfinished_requests():
        engine.step()
    assert engine.take_kv_events() == []
    assert engine.scheduler.kv_cache_manager.pool(Tier.DEVICE).kv_events is None


def _apply(index: dict[int, tuple[int | None, tuple[int, ...]]], events) -> None:
    """A consumer's index of the node's cache (hash → parent, tokens), as an external router keeps it."""
    for event in events:
        if type(event) is BlockStored:
            parent = event.parent_block_hash
            for i, block_hash in enumerate(event.block_hashes):
                index[block_hash] = (parent, tuple(event.token_ids[16 * i : 16 * (i + 1)]))
                parent = block_hash
        elif type(event) is BlockRemoved:
            for block_hash in event.block_hashes:
                del index[block_hash]  # a removal the consumer never saw stored would raise here
        else:
            index.clear()


def test_a_consumer_applying_the_events_holds_exactly_the_cache_after_every_step():
    rng = random.Random(7)
    engine = build_trivial_engine(num_device_blocks=48, max_num_seqs=6)
    engine.enable_kv_events()
    pool = engine.scheduler.kv_cache_manager.pool(Tier.DEVICE)
    prefixes = [[rng.randrange(1, 250) for _ in range(40)] for _ in range(3)]  # shared heads: hits and chains
    index: dict[int, tuple[int | None, tuple[int, ...]]] = {}
    num_removed = num_stored = 0
    for step in range(400):
        if rng.random() < 0.3:
            prompt = rng.choice(prefixes) + [rng.randrange(1, 250) for _ in range(rng.randrange(0, 60))]
            engine.add_request(prompt, SamplingParams(max_tokens=rng.randrange(1, 40), ignore_eos=True))
        if step == 300:
            while engine.has_unfinished_requests():
                engine.step()
                _apply(index, engine.take_kv_events())
            assert engine.reset_prefix_cache() is not None
        engine.step()
        events = engine.take_kv_events()
        num_stored += sum(len(e.block_hashes) for e in events if type(e) is BlockStored)
        num_removed += sum(len(e.block_hashes) for e in events if type(e) is BlockRemoved)
        _apply(index, events)
        cached = pool.cached_blocks()
        assert set(index) == {h.hash_value for h in cached}
        for block_hash in cached:  # a consumer recomputes each block's chain value from its parent and tokens
            parent, tokens = index[block_hash.hash_value]
            assert tokens == block_hash.token_ids
            parent_hash = None if parent is None else BlockHash(parent, (), None)
            assert hash_block_tokens(parent_hash, tokens).hash_value == block_hash.hash_value
    assert num_stored > 100 and num_removed > 20  # the workload exercised both (48 blocks, evictions)
