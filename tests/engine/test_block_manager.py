from __future__ import annotations

import pytest
from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from engine.kv import KVCacheManager, NoFreeBlocksError, Tier, hash_full_blocks
from engine.request import Request
from engine.sampling_params import SamplingParams

BLOCK_SIZE = 4


def _request(req_id: str, tokens: list[int], lora_id: int | None = None) -> Request:
    return Request(req_id, tokens, SamplingParams(), 0.0, lora_id=lora_id)


def _manager(num_device_blocks: int = 8, num_host_blocks: int = 8, caching: bool = True) -> KVCacheManager:
    return KVCacheManager(BLOCK_SIZE, num_device_blocks, num_host_blocks, enable_prefix_caching=caching)


def _prefill(manager: KVCacheManager, request: Request) -> None:
    """Admit a request whole and pretend the runner computed it."""
    hit = manager.get_computed_blocks(request)
    manager.allocate_slots(request, request.num_tokens - hit.num_tokens, hit)
    request.num_computed_tokens = request.num_tokens
    manager.cache_computed_blocks(request)


# -- examples ------------------------------------------------------------------------------------


def test_allocate_grows_table_one_block_per_block_size_tokens():
    manager = _manager()
    r = _request("a", list(range(5)))
    assert manager.can_allocate(r, 5)
    assert manager.allocate_slots(r, 5) == []
    assert len(manager.get_block_ids("a")) == 2
    r.num_computed_tokens = 5
    manager.allocate_slots(r, 3)  # positions 5..7 fit in block 1
    assert len(manager.get_block_ids("a")) == 2
    r.num_computed_tokens = 8
    manager.allocate_slots(r, 1)
    assert len(manager.get_block_ids("a")) == 3
    manager.free(r)
    assert manager.num_free_device_blocks == 8


def test_allocate_without_room_raises_and_changes_nothing():
    manager = _manager(num_device_blocks=2)
    r = _request("a", list(range(12)))
    assert not manager.can_allocate(r, 12)
    with pytest.raises(NoFreeBlocksError):
        manager.allocate_slots(r, 12)
    assert manager.get_block_ids("a") == [] and manager.num_free_device_blocks == 2


def test_prefix_hit_shares_full_blocks_and_leaves_one_token_to_compute():
    manager = _manager()
    a = _request("a", list(range(12)))
    _prefill(manager, a)
    b = _request("b", list(range(12)))  # identical prompt: 3 full blocks, but the last must be computed
    hit = manager.get_computed_blocks(b)
    assert hit.num_tokens == 8 and hit.block_ids == tuple(manager.get_block_ids("a")[:2])
    manager.allocate_slots(b, 4, hit)
    shared = manager.get_block_ids("a")[:2]
    assert manager.get_block_ids("b")[:2] == shared
    assert all(manager.pool(Tier.DEVICE).ref_count(blk) == 2 for blk in shared)
    c = _request("c", [*range(8), 99, 98])
    assert manager.get_computed_blocks(c).num_tokens == 8
    d = _request("d", [5, *range(1, 12)])
    assert manager.get_computed_blocks(d).num_tokens == 0


def test_lora_id_separates_prefix_cache_entries():
    manager = _manager()
    _prefill(manager, _request("a", list(range(9)), lora_id=1))
    assert manager.get_computed_blocks(_request("b", list(range(9)), lora_id=2)).num_tokens == 0
    assert manager.get_computed_blocks(_request("c", list(range(9)), lora_id=1)).num_tokens == 8


def test_freed_cached_blocks_are_reused_then_evicted_lru():
    manager = _manager(num_device_blocks=4)
    a = _request("a", list(range(9)))
    _prefill(manager, a)
    manager.free(a)
    assert manager.num_free_device_blocks == 4
    assert manager.pool(Tier.DEVICE).num_cached_blocks == 2
    assert manager.get_computed_blocks(_request("b", list(range(9)))).num_tokens == 8
    # a request that needs every block evicts the cached ones
    c = _request("c", [50 + i for i in range(16)])
    _prefill(manager, c)
    assert manager.get_computed_blocks(_request("d", list(range(9)))).num_tokens == 0


def test_evictable_hit_blocks_count_against_free_blocks():
    manager = _manager(num_device_blocks=3)
    a = _request("a", list(range(9)))
    _prefill(manager, a)
    manager.free(a)  # 2 cached evictable + 1 free
    b = _request("b", list(range(9)))
    hit = manager.get_computed_blocks(b)
    assert hit.num_tokens == 8
    assert manager.can_allocate(b, 1, hit)  # 2 revived + 1 new == 3
    assert not manager.can_allocate(b, 5, hit)  # would need a 4th


def test_fork_shares_blocks_and_copy_on_write_on_the_partial_block():
    manager = _manager()
    parent = _request("p", list(range(6)))
    _prefill(manager, parent)
    child = _request("c", list(range(6)))
    child.num_computed_tokens = 6
    manager.fork(parent, child)
    table = manager.get_block_ids("p")
    assert manager.get_block_ids("c") == table
    assert all(manager.pool(Tier.DEVICE).ref_count(blk) == 2 for blk in table)
    parent.append_output_token_ids(1)
    copies = manager.allocate_slots(parent, 1)  # writes position 6 into the shared block 1
    assert len(copies) == 1 and copies[0][0] == table[1]
    new_table = manager.get_block_ids("p")
    assert new_table[0] == table[0] and new_table[1] == copies[0][1]
    assert manager.pinned_block_ids == [table[1]]  # the source survives until the runner copied it
    manager.begin_step()
    assert manager.pinned_block_ids == []
    assert manager.pool(Tier.DEVICE).ref_count(table[1]) == 1  # the child's


def test_swap_out_and_in_move_only_computed_blocks():
    manager = _manager()
    r = _request("a", list(range(6)))
    manager.allocate_slots(r, 6)
    r.num_computed_tokens = 6
    manager.allocate_slots(r, 6)  # reserve 3 blocks (e.g. for drafts), only 2 hold computed KV
    device_table = manager.get_block_ids("a")
    assert len(device_table) == 3
    assert manager.can_swap_out(r)
    out_pairs = manager.swap_out(r)
    assert [d for d, _ in out_pairs] == device_table[:2]
    assert manager.tier_of("a") is Tier.HOST and manager.num_free_device_blocks == 8
    host_table = manager.get_block_ids("a", Tier.HOST)
    assert [h for _, h in out_pairs] == host_table
    assert manager.can_swap_in(r, num_new_tokens=1)
    in_pairs = manager.swap_in(r)
    assert [h for h, _ in in_pairs] == host_table
    assert manager.tier_of("a") is Tier.DEVICE and manager.num_free_host_blocks == 8


def test_swap_needs_room_in_the_destination_tier():
    manager = _manager(num_device_blocks=4, num_host_blocks=1)
    r = _request("a", list(range(8)))
    _prefill(manager, r)
    assert not manager.can_swap_out(r)
    with pytest.raises(NoFreeBlocksError):
        manager.swap_out(r)
    assert manager.tier_of("a") is Tier.DEVICE


def test_free_releases_every_tier():
    manager = _manager()
    r = _request("a", list(range(8)))
    _prefill(manager, r)
    manager.swap_out(r)
    manager.free(r)
    assert manager.tier_of("a") is None
    assert manager.num_free_device_blocks == 8 and manager.num_free_host_blocks == 8


# -- property: random operation sequences ----------------------------------------------------------


class KVCacheMachine(RuleBasedStateMachine):
    """Drives a manager with random allocate/compute/append/fork/swap/free sequences while keeping a
    shadow copy of the KV content (a token-prefix tuple per slot) that the manager's moves update."""

    def __init__(self) -> None:
        super().__init__()
        self.manager = _manager(num_device_blocks=10, num_host_blocks=6)
        self.requests: dict[str, Request] = {}
        self.content: dict[Tier, list[list[tuple[int, ...] | None]]] = {
            Tier.DEVICE: [[None] * BLOCK_SIZE for _ in range(10)],
            Tier.HOST: [[None] * BLOCK_SIZE for _ in range(6)],
        }
        self.num_ids = 0

    def _pick(self, index: int, tier: Tier | None) -> Request | None:
        candidates = [r for r in self.requests.values() if self.manager.tier_of(r.req_id) is tier]
        return candidates[index % len(candidates)] if candidates else None

    def _move(self, pairs, src: Tier, dst: Tier) -> None:
        for src_id, dst_id in pairs:
            self.content[dst][dst_id] = list(self.content[src][src_id])

    def _compute(self, request: Request, num_tokens: int, prefix_hit=None) -> None:
        """One step for one request: allocate, apply copies, write KV, commit, maybe sample."""
        if prefix_hit is None:
            copies = self.manager.allocate_slots(request, num_tokens)
        else:
            copies = self.manager.allocate_slots(request, num_tokens, prefix_hit)
            request.num_computed_tokens = prefix_hit.num_tokens
        self._move(copies, Tier.DEVICE, Tier.DEVICE)
        if copies:
            event("copy-on-write")
        if prefix_hit is not None and prefix_hit.num_tokens:
            event("prefix hit")
        table = self.manager.get_block_ids(request.req_id)
        device = self.manager.pool(Tier.DEVICE)
        tokens = request.all_token_ids
        for pos in range(request.num_computed_tokens, request.num_computed_tokens + num_tokens):
            block_id = table[pos // BLOCK_SIZE]
            # a block being written is private and not in the prefix cache
            assert device.ref_count(block_id) == 1 and device.block_hash(block_id) is None
            self.content[Tier.DEVICE][block_id][pos % BLOCK_SIZE] = tuple(tokens[: pos + 1])
        request.num_computed_tokens += num_tokens
        if request.num_computed_tokens == request.num_tokens:
            request.append_output_token_ids(request.num_tokens % 3)
        self.manager.cache_computed_blocks(request)

    @rule(length=st.integers(1, 14), alphabet=st.integers(1, 3), lora=st.sampled_from([None, None, 1]))
    def add(self, length, alphabet, lora):
        # a tiny alphabet makes shared prefixes (and prefix-cache hits) common
        tokens = [(i * i) % alphabet for i in range(length)]
        req_id = f"r{self.num_ids}"
        self.num_ids += 1
        self.requests[req_id] = _request(req_id, tokens, lora)

    @rule(index=st.integers(0, 50), length=st.integers(1, 14), extra=st.integers(0, 3))
    def add_sharing_prefix(self, index, length, extra):
        """A request that starts like an existing one (a prefix-cache hit when admitted)."""
        if not self.requests:
            return
        other = list(self.requests.values())[index % len(self.requests)]
        req_id = f"r{self.num_ids}"
        self.num_ids += 1
        tokens = other.all_token_ids[:length] + [7] * extra
        self.requests[req_id] = _request(req_id, tokens, other.lora_id)

    @rule(index=st.integers(0, 50), chunk=st.integers(1, 16))
    def admit(self, index, chunk):
        request = self._pick(index, None)
        if request is None:
            return
        hit = self.manager.get_computed_blocks(request)
        assert hit.num_tokens < request.num_tokens and hit.num_tokens % BLOCK_SIZE == 0
        num_tokens = min(chunk, request.num_tokens - hit.num_tokens)
        if self.manager.can_allocate(request, num_tokens, hit):
            self._compute(request, num_tokens, hit)

    @rule(index=st.integers(0, 50), chunk=st.integers(1, 16))
    def step(self, index, chunk):
        request = self._pick(index, Tier.DEVICE)
        if request is None:
            return
        num_tokens = min(chunk, request.num_tokens - request.num_computed_tokens)
        if self.manager.can_allocate(request, num_tokens):
            self._compute(request, num_tokens)

    @rule(index=st.integers(0, 50), num_draft=st.integers(1, 6))
    def reserve_drafts(self, index, num_draft):
        """Slots for speculative drafts beyond the known tokens; rejected, so never committed."""
        request = self._pick(index, Tier.DEVICE)
        if request is None:
            return
        num_tokens = request.num_tokens - request.num_computed_tokens + num_draft
        if self.manager.can_allocate(request, num_tokens):
            self._move(self.manager.allocate_slots(request, num_tokens), Tier.DEVICE, Tier.DEVICE)

    @rule(index=st.integers(0, 50))
    def fork(self, index):
        parent = self._pick(index, Tier.DEVICE)
        if parent is None:
            return
        req_id = f"r{self.num_ids}"
        self.num_ids += 1
        child = _request(req_id, list(parent.all_token_ids), parent.lora_id)
        child.num_computed_tokens = parent.num_computed_tokens
        self.manager.fork(parent, child)
        self.requests[req_id] = child

    @rule(index=st.integers(0, 50))
    def swap_out(self, index):
        request = self._pick(index, Tier.DEVICE)
        if request is not None and self.manager.can_swap_out(request):
            self._move(self.manager.swap_out(request), Tier.DEVICE, Tier.HOST)
            event("swap out")

    @rule(index=st.integers(0, 50))
    def swap_in(self, index):
        request = self._pick(index, Tier.HOST)
        if request is not None and self.manager.can_swap_in(request, 1):
            self._move(self.manager.swap_in(request), Tier.HOST, Tier.DEVICE)
            event("swap in")

    @rule(index=st.integers(0, 50), keep=st.booleans())
    def free(self, index, keep):
        """Finish a request, or (keep) preempt it by recompute: it stays alive with nothing computed."""
        live = [r for r in self.requests.values() if self.manager.tier_of(r.req_id) is not None]
        if not live:
            return
        request = live[index % len(live)]
        self.manager.free(request)
        if keep:
            request.num_computed_tokens = 0
        else:
            del self.requests[request.req_id]

    @rule()
    def begin_step(self):
        self.manager.begin_step()

    @invariant()
    def blocks_are_accounted_for(self):
        for tier in (Tier.DEVICE, Tier.HOST):
            pool = self.manager.pool(tier)
            holders = [0] * pool.num_blocks
            for table in self.manager.block_tables(tier).values():
                for block_id in table:
                    holders[block_id] += 1
            if tier is Tier.DEVICE:
                for block_id in self.manager.pinned_block_ids:
                    holders[block_id] += 1
            free = pool.free_block_ids()
            evictable = pool.evictable_block_ids()
            assert len(free) + len(evictable) + sum(1 for h in holders if h) == pool.num_blocks
            assert pool.num_free_blocks + pool.num_used_blocks == pool.num_blocks
            for block_id in range(pool.num_blocks):
                assert pool.ref_count(block_id) == holders[block_id]
            assert not set(free) & set(evictable)
            assert all(holders[b] == 0 for b in free + evictable)

    @invariant()
    def requests_read_back_their_kv(self):
        for request in self.requests.values():
            tier = self.manager.tier_of(request.req_id)
            if tier is None:
                continue
            table = self.manager.get_block_ids(request.req_id, tier)
            assert len(table) >= -(-request.num_computed_tokens // BLOCK_SIZE)
            for pos in range(request.num_computed_tokens):
                kv = self.content[tier][table[pos // BLOCK_SIZE]][pos % BLOCK_SIZE]
                assert kv == tuple(request.all_token_ids[: pos + 1])

    @invariant()
    def prefix_cache_entries_match_their_blocks(self):
        device = self.manager.pool(Tier.DEVICE)
        for block_hash, block_id in device.cached_blocks().items():
            assert device.block_hash(block_id) == block_hash
            prefix = self.content[Tier.DEVICE][block_id][BLOCK_SIZE - 1]
            assert prefix is not None and len(prefix) % BLOCK_SIZE == 0
            assert hash_full_blocks(prefix, BLOCK_SIZE, block_hash.lora_id)[-1] == block_hash
            for slot in range(BLOCK_SIZE):
                assert self.content[Tier.DEVICE][block_id][slot] == prefix[: len(prefix) - BLOCK_SIZE + slot + 1]


TestKVCacheMachine = KVCacheMachine.TestCase
TestKVCacheMachine.settings = settings(max_examples=300, stateful_step_count=40, deadline=None)
