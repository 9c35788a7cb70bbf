"""AgentRemoteKV: the engine thread's half of the remote KV tier (engine/remote_kv.py's mover for an agent).

    engine thread (this)                                         event loop (agent/kv_remote_swap.py)
    swap_out: runner's cache read_blocks → host tensor ─ RemoteOut ──► pick a peer, "store" transfer
    fetch:                                             ─ RemoteFetchAsk ─► "fetch" command, await the return
    drop:     forget fetched bytes                     ─ RemoteDropAsk ─► "drop" command to the holder
    apply(RemoteReport) ◄── inbox ◄── stored(peer, handle) / fetched(kv) / failed ◄──┘
      → scheduler.remote_stored / remote_fetched (bytes kept) / remote_failed (the request recomputes)
    swap_in: the fetched bytes → runner's cache write_blocks, before the step that reads them

Only the engine thread calls these (the engine's hook during ``start_step``, ``apply`` between steps); the asks
go out through ``take_asks`` into the engine thread's outbox.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from engine.batch import RemoteFetch, RemoteMove
from engine.kv.remote_tier import RemoteDrop
from engine.llm_engine import LLMEngine, MigratedRequest
from transport.kv_transfer import ReceivedKV
from transport.messages import KVWireLayout

if TYPE_CHECKING:  # torch is imported by the methods that move bytes: this module is the engine thread's
    from agent.kv_migration import ExportedRequest

log = logging.getLogger(__name__)

BLOCK_DTYPES = ("bfloat16", "float16", "float32")  # what the caches' read_blocks / write_blocks move


@dataclass(slots=True)
class RemoteOut:
    """Ship a preempted request's KV (read off the device) to a peer's store."""

    req_id: str
    layout: KVWireLayout
    kv: ExportedRequest  # its kv_bytes() is what travels


@dataclass(slots=True, frozen=True)
class RemoteFetchAsk:
    req_id: str
    peer_id: str
    handle: str


@dataclass(slots=True, frozen=True)
class RemoteDropAsk:
    req_id: str
    peer_id: str
    handle: str


@dataclass(slots=True)
class RemoteReport:
    """Event loop → engine thread: how a move ended. kind "stored" (peer_id, handle), "fetched" (kv), "failed"."""

    kind: str
    req_id: str
    peer_id: str = ""
    handle: str = ""
    kv: ReceivedKV | None = None
    message: str = ""


def remote_capable(engine: LLMEngine) -> bool:
    """Whether the engine's runner can read and write KV blocks (the torch and JAX caches; not FP8, not fakes)."""
    cache = getattr(engine.runner, "kv_cache", None)
    return cache is not None and hasattr(cache, "read_blocks") and hasattr(cache, "write_blocks")


class AgentRemoteKV:
    """The mover installed with ``engine.set_remote_kv`` (``remote_capable`` engines only)."""

    def __init__(self, engine: LLMEngine) -> None:
        self.engine = engine
        self._asks: list[RemoteOut | RemoteFetchAsk | RemoteDropAsk] = []
        self._fetched: dict[str, ReceivedKV] = {}
        self.num_out = self.num_in = self.num_failed = 0

    def take_asks(self) -> list:
        asks, self._asks = self._asks, []
        return asks

    # -- the engine's hook (engine/remote_kv.py) ----------------------------------------------------

    def swap_out(self, moves: list[RemoteMove]) -> None:
        from agent.kv_migration import ExportedRequest, wire_layout_of

        cache = self.engine.runner.kv_cache
        for move in moves:
            try:
                kv = cache.read_blocks(move.block_ids)  # a host copy: the blocks may be reused after this
            except Exception as e:  # e.g. an FP8 cache: recompute instead
                log.warning("request %s: KV not readable for the remote tier: %s", move.req_id, e)
                self.engine.scheduler.remote_failed(move.req_id)
                continue
            layout = wire_layout_of(kv)
            state = MigratedRequest(move.req_id, [], 0, list(move.block_ids))
            self._asks.append(RemoteOut(move.req_id, layout, ExportedRequest(state, layout, kv)))
            self.num_out += 1

    def fetch(self, fetches: list[RemoteFetch]) -> None:
        self._asks.extend(RemoteFetchAsk(f.req_id, f.peer_id, f.handle) for f in fetches)

    def swap_in(self, moves: list[RemoteMove]) -> None:
        cache = self.engine.runner.kv_cache
        for move in moves:
            kv = self._fetched.pop(move.req_id)
            cache.write_blocks(move.block_ids, _as_blocks(cache, kv))
            self.num_in += 1

    def drop(self, drops: list[RemoteDrop]) -> None:
        for d in drops:
            self._fetched.pop(d.req_id, None)
            self._asks.append(RemoteDropAsk(d.req_id, d.peer_id, d.handle))

    # -- reports from the event loop ------------------------------------------------------------------

    def apply(self, report: RemoteReport) -> None:
        scheduler = self.engine.scheduler
        if report.kind == "stored":
            if not scheduler.remote_stored(report.req_id, report.peer_id, report.handle):
                self._asks.append(RemoteDropAsk(report.req_id, report.peer_id, report.handle))  # no longer wanted
        elif report.kind == "fetched":
            if report.req_id not in scheduler.kv_cache_manager.remote:
                pass  # aborted or finished meanwhile: the bytes are dropped here
            elif not _fits(self.engine, report.kv):
                log.warning("request %s: the KV that came back does not fit; recomputing", report.req_id)
                scheduler.remote_failed(report.req_id)
            elif scheduler.remote_fetched(report.req_id):
                self._fetched[report.req_id] = report.kv
        elif report.kind == "failed":
            log.info("request %s: remote KV move failed (%s); recomputing", report.req_id, report.message)
            if scheduler.remote_failed(report.req_id):
                self.num_failed += 1
        self.engine.flush_remote_drops()


def _fits(engine: LLMEngine, kv: ReceivedKV | None) -> bool:
    """The returned KV has the block count the request's entry expects and the cache's dtype."""
    entry = engine.scheduler.kv_cache_manager.remote.get(kv.request_id) if kv is not None else None
    return entry is not None and kv.layout.num_blocks == entry.num_blocks and kv.layout.dtype in BLOCK_DTYPES


def _as_blocks(cache, kv: ReceivedKV):
    """The transfer's bytes as the cache's array type ``[L, 2, n, block_size, Hkv, D]``."""
    import numpy as np
    import torch

    from agent.kv_migration import _TORCH_DTYPES

    layout = kv.layout
    shape = (layout.num_layers, 2, layout.num_blocks, layout.block_size, layout.num_kv_heads, layout.head_dim)
    raw = bytearray(kv.nbytes)
    kv.copy_into(memoryview(raw))
    if isinstance(getattr(cache, "host_kv", None), np.ndarray):  # a JAX cache
        return np.frombuffer(raw, dtype=cache.host_kv.dtype).reshape(shape)
    return torch.frombuffer(raw, dtype=_TORCH_DTYPES[layout.dtype]).view(shape)
