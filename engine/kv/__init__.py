"""Paged KV cache bookkeeping: tiered block pools, prefix hash chains, per-request block tables."""

from engine.kv.block_hash import BlockHash, extend_block_hashes, hash_block_tokens, hash_full_blocks
from engine.kv.block_manager import NO_PREFIX_HIT, KVCacheManager, PrefixHit
from engine.kv.block_pool import BlockPool, NoFreeBlocksError, Tier

__all__ = [
    "NO_PREFIX_HIT",
    "BlockHash",
    "BlockPool",
    "KVCacheManager",
    "NoFreeBlocksError",
    "PrefixHit",
    "Tier",
    "extend_block_hashes",
    "hash_block_tokens",
    "hash_full_blocks",
]
