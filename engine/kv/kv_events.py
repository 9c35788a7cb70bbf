"""KV cache events: what a node's device prefix cache gained and lost, in order (vLLM's KV cache events).

A router outside the node (llm-d's precise prefix-cache scorer, Dynamo's KV router) keeps an exact index of which
node caches which blocks by listening to these instead of guessing from what it routed. vLLM's scheduler emits
them from its block pool (vllm-project/vllm, vllm/v1/core/block_pool.py: ``BlockStored`` when full blocks are
cached, ``BlockRemoved`` when a cached block is evicted, ``AllBlocksCleared`` at ``reset_prefix_cache``); here
BlockPool does the same (engine/kv/block_pool.py, when its ``kv_events`` log is set), and agent/kv_events.py
publishes them in vLLM's wire format.

    BlockStored(block_hashes, parent_block_hash, token_ids, cache_key)  blocks newly registered, a chain: each
        block's parent is the one before it, the first one's ``parent_block_hash`` (None: a sequence's first
        block); ``cache_key``: what they were hashed under besides their tokens (an adapter, a salt:
        engine/prefix_key.py; None: nothing)
    BlockRemoved(block_hashes)                                         cached blocks evicted (their hashes dropped)
    AllBlocksCleared()                                                  the whole prefix cache forgotten

The log coalesces as it records: a block stored right after its parent joins that event (a prompt's blocks, or a
decode's blocks as they fill, are one event per step), consecutive removals one event. A block that is a
duplicate of one already cached (another block holds its hash) is not registered, so not announced. The hashes are
this engine's chain values (engine/kv/block_hash.py); ``token_ids`` lets a consumer with its own hash recompute it.

Sans-IO: the engine's owner takes the events after each step (``LLMEngine.take_kv_events``); nothing here
bounds them beyond one step's changes to the cache.
"""

from __future__ import annotations

from typing import NamedTuple

from engine.kv.block_hash import BlockHash

__all__ = ["AllBlocksCleared", "BlockRemoved", "BlockStored", "KVEvent", "KVEventLog"]


class BlockStored(NamedTuple):
    block_hashes: list[int]
    parent_block_hash: int | None
    token_ids: list[int]
    cache_key: int | None


class BlockRemoved(NamedTuple):
    block_hashes: list[int]


class AllBlocksCleared(NamedTuple):
    pass


KVEvent = BlockStored | BlockRemoved | AllBlocksCleared


class KVEventLog:
    """The events since the last ``take``, coalesced (module docstring)."""

    __slots__ = ("_events",)

    def __init__(self) -> None:
        self._events: list[KVEvent] = []

    def stored(self, block_hash: BlockHash, parent: int | None) -> None:
        """``block_hash``'s block was registered; ``parent``: the chain value of the block before it (None: none)."""
        events = self._events
        last = events[-1] if events else None
        if (
            type(last) is BlockStored
            and parent is not None
            and last.block_hashes[-1] == parent
            and last.cache_key == block_hash.lora_id  # BlockHash.lora_id: the request's cache key
        ):
            last.block_hashes.append(block_hash.hash_value)
            last.token_ids.extend(block_hash.token_ids)
            return
        events.append(BlockStored([block_hash.hash_value], parent, list(block_hash.token_ids), block_hash.lora_id))

    def removed(self, hash_value: int) -> None:
        events = self._events
        if events and type(events[-1]) is BlockRemoved:
            events[-1].block_hashes.append(hash_value)
        else:
            events.append(BlockRemoved([hash_value]))

    def cleared(self) -> None:
        self._events.append(AllBlocksCleared())

    def take(self) -> list[KVEvent]:
        """The events since the last call, oldest first; the log is empty afterwards."""
        events, self._events = self._events, []
        return events

    def __len__(self) -> int:
        return len(self._events)
