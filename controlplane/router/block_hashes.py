"""The router's view of a prompt's prefix-cache keys.

A node's KV manager names each full block of a sequence by the hash chain of
``engine/kv/block_hash.py``; the router computes the *same* chain from the prompt's token ids
(same function, same block size, same adapter, same algorithm: the one the nodes say in their hello,
``KVInfo.prefix_hash_algo``), so "node X holds block h" in the router's prefix index means the block
X's prefix cache would look up. Only full blocks get a name, so a prompt of
``num_prompt_tokens`` tokens has ``num_prompt_tokens // block_size`` of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import itemgetter

from engine.kv.block_hash import hash_full_blocks


def prompt_block_hashes(
    token_ids: Sequence[int], block_size: int, lora_id: int | None = None, algo: str = "sha256"
) -> tuple[int, ...]:
    """The 64-bit chain values of every full block of ``token_ids`` (``RouteRequest.block_hashes``), named by
    ``algo`` (the nodes' ``KVInfo.prefix_hash_algo``)."""
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    return tuple(map(_hash_value, hash_full_blocks(token_ids, block_size, lora_id, algo)))


_hash_value = itemgetter(0)  # BlockHash.hash_value, read in C
