"""KVCacheManager's migration verbs (sans-IO): which blocks a move ships, and importing a peer's blocks into
the prefix cache so that a request with those tokens hits them."""

from __future__ import annotations

from engine.kv import KVCacheManager
from engine.request import Request
from engine.sampling_params import SamplingParams

BLOCK_SIZE = 4


def _request(req_id: str, tokens: list[int]) -> Request:
    return Request(req_id, tokens, SamplingParams(), 0.0)


def test_computed_full_block_ids_are_the_full_blocks_with_kv():
    manager = KVCacheManager(BLOCK_SIZE, 8, 0)
    r = _request("a", list(range(11)))
    manager.allocate_slots(r, 11)
    r.num_computed_tokens = 10  # blocks 0, 1 full and computed; block 2 partial
    assert manager.computed_full_block_ids(r) == manager.get_block_ids("a")[:2]
    assert manager.computed_full_block_ids(_request("unknown", [1])) == []


def test_imported_blocks_are_prefix_hits_for_a_request_with_those_tokens():
    manager = KVCacheManager(BLOCK_SIZE, 8, 0)
    tokens = list(range(100, 111))  # 2 full blocks + 3 tokens
    targets = manager.import_prefix_blocks(tokens, 2)
    assert len(targets) == 2 and all(t >= 0 for t in targets) and len(set(targets)) == 2
    assert manager.num_free_device_blocks == 8  # evictable, not held
    r = _request("r", tokens)
    hit = manager.get_computed_blocks(r)
    assert hit.block_ids == tuple(targets) and hit.num_tokens == 8
    # importing the same prefix again writes nothing: it is cached already
    assert manager.import_prefix_blocks(tokens, 2) == [-1, -1]


def test_import_takes_only_what_fits_and_nothing_without_prefix_caching():
    manager = KVCacheManager(BLOCK_SIZE, 3, 0)
    held = _request("held", list(range(8)))
    manager.allocate_slots(held, 8)  # 2 of 3 blocks in use
    targets = manager.import_prefix_blocks(list(range(50, 62)), 3)
    assert targets[0] >= 0 and targets[1:] == [-1, -1]  # one free block: the head of the prefix
    off = KVCacheManager(BLOCK_SIZE, 8, 0, enable_prefix_caching=False)
    assert off.import_prefix_blocks(list(range(8)), 2) == [-1, -1]
