"""vLLM's ``reset_prefix_cache`` on one engine (engine/kv/block_pool.py, LLMEngine.reset_prefix_cache): every cached
block forgotten, so the same prompt hits nothing afterwards; refused (None, the cache kept) while a block is in use."""

from __future__ import annotations

from backends.fake import build_trivial_engine
from engine.kv.block_hash import hash_full_blocks
from engine.kv.block_pool import BlockPool, Tier
from engine.sampling_params import SamplingParams

PROMPT = list(range(10, 74))  # 64 tokens: four full blocks of 16


def _cached(run_batch, engine) -> int:
    """Run the prompt to its end; the prompt tokens its admission found cached (conftest's run_batch)."""
    ((_, cached, _),) = run_batch(engine, [(PROMPT, SamplingParams(max_tokens=2, ignore_eos=True))], "finish_reason")
    return cached


def test_a_reset_forgets_every_cached_block_and_the_next_request_hits_nothing(run_batch):
    engine = build_trivial_engine(num_device_blocks=64)
    assert _cached(run_batch, engine) == 0
    assert _cached(run_batch, engine) == 48  # cached: the full blocks before the last token
    pool = engine.scheduler.kv_cache_manager.pool(Tier.DEVICE)
    num_cached = pool.num_cached_blocks
    assert num_cached >= 4 and engine.reset_prefix_cache() == num_cached
    assert pool.num_cached_blocks == 0 and pool.num_free_blocks == pool.num_blocks == 64
    assert _cached(run_batch, engine) == 0  # the same prompt: nothing cached any more
    assert _cached(run_batch, engine) == 48  # and the cache fills again


def test_a_reset_is_refused_while_a_request_holds_blocks(run_batch):
    engine = build_trivial_engine(num_device_blocks=64)
    _cached(run_batch, engine)
    engine.add_request(PROMPT, SamplingParams(max_tokens=1000, ignore_eos=True), req_id="running")
    engine.step()
    pool = engine.scheduler.kv_cache_manager.pool(Tier.DEVICE)
    cached = pool.num_cached_blocks
    assert engine.reset_prefix_cache() is None  # vLLM's rule: a running request's KV is not pulled from under it
    assert pool.num_cached_blocks == cached


def test_the_pool_counts_what_it_dropped_and_keeps_its_invariants():
    pool = BlockPool(Tier.DEVICE, 8, enable_caching=True)
    blocks = pool.allocate(3)
    for block_id, block_hash in zip(blocks, hash_full_blocks(list(range(48)), 16)):
        pool.cache_block(block_id, block_hash)
    pool.free(blocks)
    assert pool.num_cached_blocks == 3 and pool.num_free_blocks == 8
    assert pool.reset_prefix_cache() == 3
    assert pool.num_cached_blocks == 0 and pool.free_block_ids() == list(range(8)) and pool.evictable_block_ids() == []
    assert pool.allocate(8) == list(range(8))  # every block plain free again
