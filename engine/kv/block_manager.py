"""KV cache manager: per-request block tables over tiered block pools. Integers only, never tensors.

A live request's KV sits in exactly one tier at a time::

    WAITING  ── allocate_slots ──►  DEVICE table  ── swap_out ──►  HOST table
       ▲                               │    ▲                          │
       └──────────── free ─────────────┘    └──────── swap_in ─────────┘

Block table of a request (device tier), block_size B::

    logical block i ──► physical block table[i], holding positions [i*B, (i+1)*B)
    table[: num_cached]       full, computed, registered in the prefix cache
    table[: cdiv(num_computed_tokens, B)]   hold computed KV
    the rest                  reserved for tokens being computed (incl. speculative drafts)

Block-move hazards. The runner applies one step's moves in the order swap-out, swap-in, copy, then writes
the new tokens' KV (see batch.py). A device block freed while scheduling a step may be handed out again in
the same step; that is safe because swap-out (the only reader of freed blocks) runs first. The exception
is a copy-on-write source, read in phase 3: it keeps one pinned reference until ``begin_step`` of the
next step, so a swap-in of this step can never overwrite it before it is copied.

Paired verbs: ``can_allocate``/``allocate_slots``, ``can_swap_out``/``swap_out``,
``can_swap_in``/``swap_in``; ``free`` releases everything a request holds in every tier. A ``*``
verb called without its ``can_*`` raises ``NoFreeBlocksError`` and changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from engine.kv.block_hash import BlockHash, check_hash_algo, extend_block_hashes, hash_repeated_block
from engine.kv.block_pool import BlockPool, NoFreeBlocksError, Tier
from engine.kv.remote_tier import RemoteEntry, RemoteState, RemoteTier

if TYPE_CHECKING:
    from collections.abc import Sequence

    from engine.config import CacheConfig
    from engine.request import Request


@dataclass(slots=True, frozen=True)
class PrefixHit:
    """The longest prefix of a request served by the device prefix cache (opaque to the scheduler
    beyond ``num_tokens``; pass it back to ``can_allocate``/``allocate_slots``)."""

    block_ids: tuple[int, ...] = ()
    num_tokens: int = 0  # len(block_ids) * block_size


NO_PREFIX_HIT = PrefixHit()

_DEVICE = Tier.DEVICE  # enum member lookups and hashes are slow; the hot paths use these and plain attributes
_HOST = Tier.HOST


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


class KVCacheManager:
    """Block tables of every request over a device pool (prefix-cached) and a host-RAM pool."""

    def __init__(
        self,
        block_size: int,
        num_device_blocks: int,
        num_host_blocks: int,
        enable_prefix_caching: bool = True,
        max_remote_requests: int = 0,
        hash_algo: str = "sha256",
    ) -> None:
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        self.block_size = block_size
        self.hash_algo = check_hash_algo(hash_algo)  # how its blocks are named (engine/kv/block_hash.py)
        self.enable_prefix_caching = enable_prefix_caching
        # A REMOTE pool slots in here; the generic paths (free, moves, lookups by tier) go through these
        # two tier-keyed dicts, the per-step paths through the attributes naming the same objects.
        self._device = BlockPool(Tier.DEVICE, num_device_blocks, enable_caching=enable_prefix_caching)
        self._host = BlockPool(Tier.HOST, num_host_blocks)
        self._device_tables: dict[str, list[int]] = {}
        self._host_tables: dict[str, list[int]] = {}
        self._pools: dict[Tier, BlockPool] = {Tier.DEVICE: self._device, Tier.HOST: self._host}
        self._block_tables: dict[Tier, dict[str, list[int]]] = {
            Tier.DEVICE: self._device_tables,
            Tier.HOST: self._host_tables,
        }
        self._block_hashes: dict[str, list[BlockHash]] = {}  # full-block hash chain of each request
        self._num_cached_blocks: dict[str, int] = {}  # leading device blocks already registered
        self._pinned_block_ids: list[int] = []  # copy-on-write sources: one reference each until begin_step
        self.remote = RemoteTier(max_remote_requests)  # engine/kv/remote_tier.py: entries, no blocks here

    @classmethod
    def from_config(cls, cache_config: CacheConfig) -> KVCacheManager:
        return cls(
            block_size=cache_config.block_size,
            num_device_blocks=cache_config.num_device_blocks,
            num_host_blocks=cache_config.num_host_blocks,
            enable_prefix_caching=cache_config.enable_prefix_caching,
            max_remote_requests=cache_config.max_remote_requests if cache_config.remote_swap != "off" else 0,
            hash_algo=cache_config.prefix_hash_algo,
        )

    # -- capacity and lookup ---------------------------------------------------------------------

    def pool(self, tier: Tier) -> BlockPool:
        return self._pools[tier]

    @property
    def tiers(self) -> tuple[Tier, ...]:
        return tuple(self._pools)

    @property
    def num_device_blocks(self) -> int:
        return self._device.num_blocks

    @property
    def num_host_blocks(self) -> int:
        return self._host.num_blocks

    @property
    def num_free_device_blocks(self) -> int:
        return self._device.num_free_blocks

    @property
    def num_free_host_blocks(self) -> int:
        return self._host.num_free_blocks

    @property
    def device_usage(self) -> float:
        """Fraction of device blocks in use, 0..1 (evictable cached blocks count as free)."""
        return self._device.usage

    def num_blocks_for_tokens(self, num_tokens: int) -> int:
        return cdiv(num_tokens, self.block_size)

    def get_block_ids(self, req_id: str, tier: Tier = Tier.DEVICE) -> list[int]:
        """A copy of the request's block table in ``tier`` (empty when it holds none there)."""
        table = (self._device_tables if tier is _DEVICE else self._block_tables[tier]).get(req_id)
        return [] if table is None else table.copy()

    def tier_of(self, req_id: str) -> Tier | None:
        """The tier holding the request's blocks, or None when it holds none."""
        for tier, tables in self._block_tables.items():
            if req_id in tables:
                return tier
        return Tier.REMOTE if req_id in self.remote else None

    def block_tables(self, tier: Tier) -> dict[str, list[int]]:
        """Copies of every table in ``tier`` (tests, debugging)."""
        return {req_id: list(table) for req_id, table in self._block_tables[tier].items()}

    @property
    def pinned_block_ids(self) -> list[int]:
        return list(self._pinned_block_ids)

    # -- step boundary ---------------------------------------------------------------------------

    def begin_step(self) -> None:
        """Called before scheduling a step: the previous step's copy-on-write sources have been
        read by the runner (it applies steps in order), so their pins are dropped."""
        if self._pinned_block_ids:
            self._device.free(self._pinned_block_ids)
            self._pinned_block_ids.clear()

    # -- prefix cache ----------------------------------------------------------------------------

    def get_computed_blocks(self, request: Request) -> PrefixHit:
        """Longest run of the request's leading full blocks already in the device prefix cache.

        At least one token is always left to compute (the forward pass must produce logits to sample
        from): the hit covers at most ``(num_tokens - 1) // block_size`` blocks. Takes no reference;
        pass the hit to ``allocate_slots`` in the same step. A request that asks for prompt logprobs gets no hit: a
        cached block's logits were never computed here (engine/prompt_logprobs.py; vLLM V1 skips it too).
        """
        if (
            not self.enable_prefix_caching
            or request.req_id in self._device_tables
            or request.prompt_logprobs is not None
        ):
            return NO_PREFIX_HIT
        max_blocks = (request.num_tokens - 1) // self.block_size
        chain = self._hashes(request, max_blocks)
        get_cached_block = self._device.get_cached_block
        block_ids = []
        for i in range(min(max_blocks, len(chain))):
            block_id = get_cached_block(chain[i])
            if block_id is None:
                break
            block_ids.append(block_id)
        if not block_ids:
            return NO_PREFIX_HIT
        return PrefixHit(tuple(block_ids), len(block_ids) * self.block_size)

    def cache_computed_blocks(self, request: Request) -> None:
        """Register the request's full blocks whose KV is computed (positions < num_computed_tokens)
        in the prefix cache. Call after the runner has computed a step; idempotent."""
        if not self.enable_prefix_caching:
            return
        req_id = request.req_id
        table = self._device_tables.get(req_id)
        if not table:
            return
        num_full = request.num_computed_tokens // self.block_size
        if num_full > len(table):
            num_full = len(table)
        start = self._num_cached_blocks.get(req_id, 0)
        if num_full <= start:
            return
        chain = self._hashes(request, num_full)
        parent = chain[start - 1].hash_value if start else None  # for the KV events (engine/kv/kv_events.py)
        if num_full - start == 1:  # a decoding request's block that just filled
            self._device.cache_block(table[start], chain[start], parent)
        else:
            self._device.cache_blocks(table[start:num_full], chain[start:num_full], parent)
        self._num_cached_blocks[req_id] = num_full

    def cache_repeated_block(self, request: Request, block_index: int, token_id: int) -> bool:
        """``cache_computed_blocks`` where the one block it would register is ``block_index``, holding ``token_id``
        at every position (a decode row's block, filled by a runner's fixed token: engine/decode_cohort.py), without
        reading the request's tokens or computed count, which may lag. False, with nothing done, where
        ``block_index`` is not the next block to register: the caller registers the plain way."""
        if not self.enable_prefix_caching:
            return True
        req_id = request.req_id
        table = self._device_tables.get(req_id)
        if not table or len(table) <= block_index or self._num_cached_blocks.get(req_id, 0) != block_index:
            return False
        chain = self._block_hashes.get(req_id)
        if chain is None:
            chain = self._block_hashes[req_id] = []
        if len(chain) > block_index:
            block_hash = chain[block_index]
        elif len(chain) == block_index:
            parent = chain[-1] if chain else None
            block_hash = hash_repeated_block(parent, token_id, self.block_size, request.cache_key, self.hash_algo)
            chain.append(block_hash)
        else:
            return False
        parent_value = chain[block_index - 1].hash_value if block_index else None  # for the KV events
        self._device.cache_block(table[block_index], block_hash, parent_value)
        self._num_cached_blocks[req_id] = block_index + 1
        return True

    def append_fresh_blocks(self, req_ids: Sequence[str]) -> None:
        """A fresh device block appended to each request's table, in the order given: what ``try_allocate_slots``
        does for each of them in turn when its next token lands past its table (a decode cohort's rows that open
        a block in one step, engine/decode_cohort.py). Raises NoFreeBlocksError, changing nothing, where they do
        not all fit."""
        tables = self._device_tables
        for req_id, block_id in zip(req_ids, self._device.allocate(len(req_ids)), strict=True):
            tables[req_id].append(block_id)

    def computed_full_block_ids(self, request: Request) -> list[int]:
        """The device blocks of the request's full blocks whose KV is computed (what a migration ships; the
        partial last block is recomputed by the receiver)."""
        table = self._device_tables.get(request.req_id, [])
        return table[: min(len(table), request.num_computed_tokens // self.block_size)]

    def import_prefix_blocks(self, token_ids: list[int], num_blocks: int, key: int | None = None) -> list[int]:
        """Take KV computed elsewhere (a migration, a peer's transfer) for the first ``num_blocks`` full blocks of
        ``token_ids`` into the device prefix cache, so a request with these tokens hits it like any cached prefix.

        Returns one entry per block: the device block id the caller must write that block's KV into before the
        next step, or -1 where the block is cached here already (skip it). Takes as many leading blocks as fit
        in the free blocks; the rest are -1 too and not cached (the request computes them). The new blocks
        end evictable (ref count 0, registered), the most recently used, so the next admission finds them. ``key``:
        what they are hashed under, a request's ``cache_key`` (its adapter, salted; engine/prefix_key.py)."""
        if not self.enable_prefix_caching:
            return [-1] * num_blocks
        chain = extend_block_hashes([], token_ids, self.block_size, key, num_blocks, self.hash_algo)
        out = [-1] * num_blocks
        new: list[int] = []
        get_cached_block = self._device.get_cached_block
        for i, block_hash in enumerate(chain):
            if get_cached_block(block_hash) is not None:
                continue
            if not self._device.can_allocate(1):
                break
            (block_id,) = self._device.allocate(1)
            if self._device.cache_block(block_id, block_hash, chain[i - 1].hash_value if i else None):
                out[i] = block_id
            new.append(block_id)
        self._device.free(reversed(new))  # evictable now; the prefix's head is evicted last
        return out

    def _hashes(self, request: Request, num_blocks: int) -> list[BlockHash]:
        """The request's hash chain, grown to cover its first ``num_blocks`` full blocks (it may hold
        more entries; callers index only below ``num_blocks`` and the number of full blocks)."""
        chain = self._block_hashes.get(request.req_id)
        if chain is None:
            chain = self._block_hashes[request.req_id] = []
        if len(chain) < num_blocks:
            tokens, key = request.all_token_ids, request.cache_key  # the adapter, salted (engine/prefix_key.py)
            extend_block_hashes(chain, tokens, self.block_size, key, num_blocks, self.hash_algo)
        return chain

    # -- device slots ----------------------------------------------------------------------------

    def can_allocate(self, request: Request, num_new_tokens: int, prefix_hit: PrefixHit = NO_PREFIX_HIT) -> bool:
        """Whether device blocks can hold ``num_new_tokens`` more tokens after the computed ones
        (and after ``prefix_hit``'s tokens, for a request that holds no device blocks yet)."""
        return self._num_blocks_needed(request, num_new_tokens, prefix_hit)[0] <= self._device.num_free_blocks

    def allocate_slots(
        self, request: Request, num_new_tokens: int, prefix_hit: PrefixHit = NO_PREFIX_HIT
    ) -> list[tuple[int, int]]:
        """Make the device table cover ``num_computed_tokens + prefix_hit.num_tokens + num_new_tokens``
        positions. Takes a reference on the hit blocks, appends fresh blocks, and replaces every shared
        block that the new tokens will be written into by a private copy (copy-on-write).

        Returns the (source, destination) device block copies the runner must apply before writing.
        The caller advances ``num_computed_tokens`` (by ``prefix_hit.num_tokens`` now, by the computed
        tokens once the step is done).
        """
        copies = self.try_allocate_slots(request, num_new_tokens, prefix_hit)
        if copies is None:
            num_needed = self._num_blocks_needed(request, num_new_tokens, prefix_hit)[0]
            raise NoFreeBlocksError(
                f"{request.req_id}: needs {num_needed} device blocks, {self._device.num_free_blocks} free"
            )
        return copies

    def try_allocate_slots(
        self, request: Request, num_new_tokens: int, prefix_hit: PrefixHit = NO_PREFIX_HIT
    ) -> list[tuple[int, int]] | None:
        """``allocate_slots`` when ``can_allocate`` holds, else None and nothing changes: both verbs in
        one pass (the scheduler's per-request, per-step call)."""
        if not prefix_hit.block_ids:
            table = self._device_tables.get(request.req_id)
            if table:
                # decode fast path: every new token lands in one existing block that no one else holds
                block_size = self.block_size
                start = request.num_computed_tokens
                first = start // block_size
                last = (start + num_new_tokens - 1) // block_size
                if first == last < len(table) and self._device.ref_count(table[first]) < 2:
                    return []
                if first >= len(table) and num_new_tokens > 0:
                    # every new token lands past the table (a decoding request filled its last block): fresh
                    # blocks only, nothing shared to copy; what _num_blocks_needed and _allocate would do
                    num_new_blocks = last + 1 - len(table)
                    if num_new_blocks > self._device.num_free_blocks:
                        return None
                    table.extend(self._device.allocate(num_new_blocks))
                    return []
        num_needed, num_new_blocks, cow_indices = self._num_blocks_needed(request, num_new_tokens, prefix_hit)
        if num_needed > self._device.num_free_blocks:
            return None
        return self._allocate(request, prefix_hit, num_new_blocks, cow_indices)

    def _allocate(
        self, request: Request, prefix_hit: PrefixHit, num_new_blocks: int, cow_indices: tuple[int, ...] | list[int]
    ) -> list[tuple[int, int]]:
        """The changes ``allocate_slots`` makes once ``_num_blocks_needed`` said they fit."""
        table = self._device_tables.get(request.req_id)
        if table is None:
            table = self._device_tables[request.req_id] = []
        device = self._device
        if prefix_hit.block_ids:
            device.touch(prefix_hit.block_ids)
            table.extend(prefix_hit.block_ids)
            self._num_cached_blocks[request.req_id] = len(prefix_hit.block_ids)
        copies = []
        for i in cow_indices:
            (private,) = device.allocate(1)
            shared = table[i]
            table[i] = private
            self._pinned_block_ids.append(shared)  # this table's reference becomes the pin
            copies.append((shared, private))
        if num_new_blocks:
            table.extend(device.allocate(num_new_blocks))
        return copies

    def _num_blocks_needed(
        self, request: Request, num_new_tokens: int, prefix_hit: PrefixHit
    ) -> tuple[int, int, tuple[int, ...] | list[int]]:
        """(free blocks consumed, fresh blocks appended, table indices to copy-on-write)."""
        req_id = request.req_id
        hit_block_ids = prefix_hit.block_ids
        table = self._device_tables.get(req_id)
        if table is None:
            if req_id in self._host_tables or req_id in self.remote:
                raise ValueError(f"{req_id}: blocks are swapped out; swap_in first")
            table = []
        elif hit_block_ids and table:
            raise ValueError(f"{req_id}: a prefix hit applies only to a request without device blocks")
        block_size = self.block_size
        start = request.num_computed_tokens + prefix_hit.num_tokens
        num_blocks_end = -(-(start + num_new_tokens) // block_size)
        num_new_blocks = max(0, num_blocks_end - len(table) - len(hit_block_ids))
        # blocks written this step: positions [start, end) -> table indices [start // B, cdiv(end, B))
        cow_indices: tuple[int, ...] | list[int] = ()
        first, stop = start // block_size, min(len(table), num_blocks_end)
        if first < stop:
            ref_count = self._device.ref_count
            cow_indices = [i for i in range(first, stop) if ref_count(table[i]) > 1]
        num_needed = num_new_blocks + len(cow_indices)
        if hit_block_ids:
            ref_count = self._device.ref_count
            num_needed += sum(1 for b in hit_block_ids if ref_count(b) == 0)  # evictable -> in use
        return num_needed, num_new_blocks, cow_indices

    def pool_ref_count(self, block_id: int) -> int:
        """A device block's reference count (0: free or evictable)."""
        return self._device.ref_count(block_id)

    def decode_extent(self, request: Request) -> int | None:
        """The request's device table length when the decode steps ahead can only append fresh blocks to it
        (every block from the one its next token is written into onwards is held by it alone); None when it
        holds no device blocks or would need a copy-on-write (engine/multi_step.py)."""
        table = self._device_tables.get(request.req_id)
        if not table or len(table) * self.block_size < request.num_computed_tokens:
            return None
        ref_count = self._device.ref_count
        for i in range(request.num_computed_tokens // self.block_size, len(table)):
            if ref_count(table[i]) > 1:
                return None
        return len(table)

    def rollback_slots(self, request: Request) -> None:
        """Release the device blocks past the request's computed tokens: after a verification step, the
        blocks that only held rejected drafts' KV. Afterwards the table is exactly
        ``cdiv(num_computed_tokens, block_size)`` long. Rejected slots inside a kept block are simply
        overwritten later; no block past the computed tokens is ever in the prefix cache (only full
        computed blocks are registered), so nothing cached is lost."""
        table = self._device_tables.get(request.req_id)
        if not table:
            return
        keep = cdiv(request.num_computed_tokens, self.block_size)
        if len(table) > keep:
            released = table[keep:]
            del table[keep:]
            self._device.free(reversed(released))

    # -- release and sharing ---------------------------------------------------------------------

    def free(self, request: Request) -> None:
        """Release the request's blocks in every tier. Full computed device blocks stay in the prefix
        cache (evictable); tables are freed tail-first so their tails are evicted first."""
        for tier, tables in self._block_tables.items():
            table = tables.pop(request.req_id, None)
            if table:
                self._pools[tier].free(reversed(table))
        self.remote.remove(request.req_id, notify_peer=True)
        self._block_hashes.pop(request.req_id, None)
        self._num_cached_blocks.pop(request.req_id, None)

    def fork(self, parent: Request, child: Request) -> None:
        """Share the parent's device blocks with ``child`` (reference counts +1). Contract: the child's
        first ``parent.num_computed_tokens`` tokens equal the parent's and it has computed exactly
        those. Either one writing into a shared block later gets a private copy (copy-on-write)."""
        if self.tier_of(child.req_id) is not None:
            raise ValueError(f"{child.req_id}: already holds blocks")
        table = self._block_tables[Tier.DEVICE].get(parent.req_id)
        if table is None:
            raise ValueError(f"{parent.req_id}: holds no device blocks")
        self._pools[Tier.DEVICE].touch(table)
        self._block_tables[Tier.DEVICE][child.req_id] = list(table)
        num_full = parent.num_computed_tokens // self.block_size
        self._block_hashes[child.req_id] = self._block_hashes.get(parent.req_id, [])[:num_full]
        self._num_cached_blocks[child.req_id] = min(self._num_cached_blocks.get(parent.req_id, 0), num_full)

    # -- host tier -------------------------------------------------------------------------------

    def can_swap_out(self, request: Request) -> bool:
        table = self._block_tables[Tier.DEVICE].get(request.req_id)
        return table is not None and self._pools[Tier.HOST].can_allocate(self._num_live_blocks(request, table))

    def swap_out(self, request: Request) -> list[tuple[int, int]]:
        """Move the request's computed device blocks to fresh host blocks; frees all its device blocks
        (blocks reserved beyond ``num_computed_tokens`` are just dropped). Returns (device, host) pairs."""
        return self._move(request, Tier.DEVICE, Tier.HOST)

    def can_swap_in(self, request: Request, num_new_tokens: int = 0) -> bool:
        """Whether the request's host blocks fit on the device together with ``num_new_tokens`` more."""
        table = self._block_tables[Tier.HOST].get(request.req_id)
        if table is None:
            return False
        num_blocks = max(len(table), cdiv(request.num_computed_tokens + num_new_tokens, self.block_size))
        return self._pools[Tier.DEVICE].can_allocate(num_blocks)

    def swap_in(self, request: Request) -> list[tuple[int, int]]:
        """Move the request's host blocks to fresh device blocks. Returns (host, device) pairs. Call
        ``allocate_slots`` afterwards for the tokens of the step."""
        return self._move(request, Tier.HOST, Tier.DEVICE)

    def _num_live_blocks(self, request: Request, table: list[int]) -> int:
        return min(len(table), cdiv(request.num_computed_tokens, self.block_size))

    def _move(self, request: Request, src_tier: Tier, dst_tier: Tier) -> list[tuple[int, int]]:
        src_tables = self._block_tables[src_tier]
        table = src_tables.get(request.req_id)
        if table is None:
            raise ValueError(f"{request.req_id}: holds no {src_tier.value} blocks")
        live = table[: self._num_live_blocks(request, table)]
        dst_block_ids = self._pools[dst_tier].allocate(len(live))  # raises before any change
        del src_tables[request.req_id]
        self._pools[src_tier].free(reversed(table))
        self._block_tables[dst_tier][request.req_id] = dst_block_ids
        self._num_cached_blocks[request.req_id] = 0  # re-registered from the new device blocks
        return list(zip(live, dst_block_ids))

    # -- remote tier (engine/kv/remote_tier.py) ----------------------------------------------------------

    def can_swap_out_remote(self, request: Request) -> bool:
        """Whether the request's computed device blocks can go to a peer (the tier has room for an entry and
        there is computed KV to move)."""
        table = self._device_tables.get(request.req_id)
        return table is not None and self.remote.can_add() and self._num_live_blocks(request, table) > 0

    def swap_out_remote(self, request: Request) -> list[int]:
        """Give up the request's device blocks for a REMOTE entry (SENDING). Returns the device block ids whose KV
        must be read before this step's runner writes anything (the engine's remote I/O hook does)."""
        if not self.can_swap_out_remote(request):
            raise NoFreeBlocksError(f"{request.req_id}: cannot swap out to the remote tier")
        table = self._device_tables.pop(request.req_id)
        live = table[: self._num_live_blocks(request, table)]
        self._device.free(reversed(table))
        self.remote.add(request.req_id, len(live), request.num_computed_tokens)
        self._num_cached_blocks[request.req_id] = 0
        return live

    def can_swap_in_remote(self, request: Request, num_new_tokens: int = 0) -> bool:
        """Whether the request's remote KV is back here (READY) and fits the device with ``num_new_tokens`` more."""
        entry = self.remote.get(request.req_id)
        if entry is None or entry.state is not RemoteState.READY:
            return False
        num_blocks = max(entry.num_blocks, cdiv(request.num_computed_tokens + num_new_tokens, self.block_size))
        return self._device.can_allocate(num_blocks)

    def swap_in_remote(self, request: Request) -> tuple[RemoteEntry, list[int]]:
        """Fresh device blocks for a READY entry's KV (the hook writes it there before this step's runner).
        Call ``allocate_slots`` afterwards for the tokens of the step."""
        entry = self.remote.get(request.req_id)
        if entry is None or not self._device.can_allocate(entry.num_blocks):
            raise NoFreeBlocksError(f"{request.req_id}: no remote KV ready, or no room for it")
        entry = self.remote.take(request.req_id)
        block_ids = self._device.allocate(entry.num_blocks)
        self._device_tables[request.req_id] = block_ids
        self._num_cached_blocks[request.req_id] = 0
        return entry, list(block_ids)

    def drop_remote(self, request: Request) -> RemoteEntry | None:
        """Forget a request's remote entry (its move failed or its peer died); the request recomputes."""
        return self.remote.remove(request.req_id, notify_peer=True)
