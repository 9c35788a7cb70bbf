"""The scheduler's REMOTE-tier verbs: swap a victim's KV out to a peer, fetch it back, swap it in, and fall back
to recompute when a move fails. Sans-IO, like the scheduler it is mixed into (engine/scheduler.py).

    preempt (SWAP mode) ── "prefer", or host RAM full with "fallback" ──► swap_out_remote: RemoteMove out
    SWAPPED + entry HELD, the device has room ─────────────────────────► RemoteFetch (entry FETCHING)
    SWAPPED + entry READY, fits, no host swap-out this step ───────────► swap_in_remote: RemoteMove in
    the mover reports: remote_stored / remote_fetched / remote_failed (move failed, peer dead → recompute)

A remote request stays in the swapped list (status SWAPPED) all along; it is skipped there while its bytes are
in flight, so it never blocks the host-swapped requests behind it. Nothing is lost on a failure: the request
keeps its tokens and recomputes their KV (``num_computed_tokens`` = 0, requeued at the front).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.batch import RemoteFetch, RemoteMove, SchedulerOutput
from engine.config import PreemptionMode
from engine.kv.remote_tier import IN_FLIGHT, RemoteState
from engine.request import Request, RequestStatus
from engine.scheduler_stats import SchedulerEventKind

if TYPE_CHECKING:
    from engine.kv import KVCacheManager


class RemoteSwapMixin:
    """Needs the scheduler's ``kv_cache_manager``, ``cache_config``, ``scheduler_config``, ``_requests``,
    ``_swapped``, ``_counters``, ``_emit``, ``_insort``, ``_queue_waiting``."""

    kv_cache_manager: KVCacheManager
    remote_available: bool = False  # a mover executes the moves (LLMEngine.set_remote_kv); else recompute

    # -- decisions inside schedule() ----------------------------------------------------------------

    def _swap_out(self, victim: Request, output: SchedulerOutput) -> bool:
        """Swap the victim's KV out (host RAM or a peer, per ``remote_swap``); False: it must recompute."""
        manager = self.kv_cache_manager
        if self.scheduler_config.preemption_mode is not PreemptionMode.SWAP:
            return False
        mode = self.cache_config.remote_swap if self.remote_available else "off"
        if mode == "prefer" and manager.can_swap_out_remote(victim):
            return self._swap_out_remote(victim, output)
        if manager.can_swap_out(victim):
            pairs = manager.swap_out(victim)
            output.blocks_to_swap_out.extend(pairs)
            self._counters.num_swapped_out_blocks_total += len(pairs)
            self._emit(SchedulerEventKind.SWAPPED_OUT, victim, num_blocks=len(pairs))
            return True
        if mode == "fallback" and manager.can_swap_out_remote(victim):
            return self._swap_out_remote(victim, output)
        return False

    def _swap_out_remote(self, victim: Request, output: SchedulerOutput) -> bool:
        block_ids = self.kv_cache_manager.swap_out_remote(victim)
        output.remote_swap_out.append(RemoteMove(victim.req_id, block_ids, victim.num_computed_tokens))
        self._counters.num_swapped_out_blocks_total += len(block_ids)
        self._emit(SchedulerEventKind.SWAPPED_OUT, victim, num_blocks=len(block_ids), tier="remote")
        return True

    def _plan_remote_fetches(self, output: SchedulerOutput) -> None:
        """Ask back the held KV of swapped requests, oldest first, while the device's free blocks cover them
        (counting the ones already on their way back)."""
        remote = self.kv_cache_manager.remote
        room = self.kv_cache_manager.num_free_device_blocks
        for e in remote.entries():
            if e.state in (RemoteState.FETCHING, RemoteState.READY):
                room -= e.num_blocks
        for request in self._swapped:
            entry = remote.get(request.req_id)
            if entry is None or entry.state is not RemoteState.HELD or entry.num_blocks > room:
                continue
            remote.begin_fetch(request.req_id)
            room -= entry.num_blocks
            output.remote_fetch.append(RemoteFetch(request.req_id, entry.peer_id, entry.handle))

    def _swap_in_remote(self, request: Request, num_new_tokens: int, output: SchedulerOutput) -> bool:
        """Swap in a swapped request whose KV is remote, if it is back and fits; False: not this step."""
        manager = self.kv_cache_manager
        if output.blocks_to_swap_out or not manager.can_swap_in_remote(request, num_new_tokens):
            return False
        entry, block_ids = manager.swap_in_remote(request)
        output.remote_swap_in.append(RemoteMove(request.req_id, block_ids, entry.num_tokens))
        self._counters.num_swapped_in_blocks_total += len(block_ids)
        self._emit(SchedulerEventKind.SWAPPED_IN, request, num_blocks=len(block_ids), tier="remote")
        return True

    def _remote_blocked(self, request: Request) -> bool:
        """A swapped request whose KV is remote and not back yet (skipped by the swap-in loop)."""
        entry = self.kv_cache_manager.remote.get(request.req_id)
        return entry is not None and entry.state is not RemoteState.READY

    # -- the mover's reports ------------------------------------------------------------------------

    def remote_stored(self, req_id: str, peer_id: str, handle: str) -> bool:
        """Peer ``peer_id`` holds the request's KV under ``handle``. False: the request no longer waits for it
        (aborted or finished meanwhile; the caller tells the peer to drop it)."""
        return self.kv_cache_manager.remote.stored(req_id, peer_id, handle)

    def remote_fetched(self, req_id: str) -> bool:
        """The request's KV is back in this node's memory (the mover keeps it until ``remote_swap_in``). False:
        the request no longer waits for it (the caller drops the bytes)."""
        return self.kv_cache_manager.remote.fetched(req_id)

    def remote_failed(self, req_id: str) -> bool:
        """A move of the request's KV failed (refused, timed out, the peer died or lost it): the request
        recomputes its tokens. False for a request without remote KV (nothing to do)."""
        request = self._requests.get(req_id)
        if request is None or request.status is not RequestStatus.SWAPPED or req_id not in self.kv_cache_manager.remote:
            return False
        self.kv_cache_manager.drop_remote(request)
        self._swapped.remove(request)
        self._counters.num_recomputed_tokens_total += request.num_computed_tokens
        request.num_computed_tokens = 0
        request.status = RequestStatus.WAITING
        self._queue_waiting(request, front=True)
        self._emit(SchedulerEventKind.PREEMPTED, request, mode=PreemptionMode.RECOMPUTE.value, tier="remote")
        return True

    def remote_req_ids(self, *states: RemoteState) -> list[str]:
        """Requests whose remote KV is in one of ``states`` (all remote requests when none is given)."""
        return [e.req_id for e in self.kv_cache_manager.remote.entries() if not states or e.state in states]

    def is_waiting_on_remote(self) -> bool:
        """Nothing to run until a remote move completes: no running or waiting request, and every swapped one
        has its KV on the network (a driver may sleep until the mover reports)."""
        if self._running or self._waiting or not self._swapped:
            return False
        remote = self.kv_cache_manager.remote
        return all((e := remote.get(r.req_id)) is not None and e.state in IN_FLIGHT for r in self._swapped)
