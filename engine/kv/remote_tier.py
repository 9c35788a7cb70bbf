"""The REMOTE tier: KV of preempted requests held by another node. Integers and names only, no I/O.

This node keeps no blocks for a remote request, only an entry: how many blocks (of its computed tokens) left,
and where they are. The moves themselves are asynchronous (the agent's data plane executes them,
agent/kv_remote_swap.py), so an entry walks through states, and the request is schedulable only in READY::

    swap_out_remote ─► SENDING ─ stored(peer, handle) ─► HELD ─ begin_fetch ─► FETCHING ─ fetched ─► READY
                          │                                │                      │                    │
                          └──────────── fail (the move failed, the peer died) ───┴──► recompute   take ─► device

``SENDING``: the blocks were read off the device before the step that reuses them (the engine's remote I/O
hook runs before the runner); the bytes are on their way. ``HELD``: peer ``peer_id`` holds them under
``handle``. ``FETCHING``: asked back. ``READY``: back in this node's memory, waiting for device blocks.
A request freed while it has an entry (abort, finish, a failed move) leaves a drop notice (``take_drops``): its
peer may forget the bytes, the mover the ones it fetched.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class RemoteState(enum.Enum):
    SENDING = "sending"
    HELD = "held"
    FETCHING = "fetching"
    READY = "ready"


IN_FLIGHT = frozenset({RemoteState.SENDING, RemoteState.FETCHING})  # waiting on the network: not schedulable


@dataclass(slots=True)
class RemoteEntry:
    """One request's KV at a peer: ``num_blocks`` full-or-partial blocks covering ``num_tokens`` computed tokens."""

    req_id: str
    num_blocks: int
    num_tokens: int
    state: RemoteState = RemoteState.SENDING
    peer_id: str = ""
    handle: str = ""


@dataclass(slots=True, frozen=True)
class RemoteDrop:
    """A peer may forget what it holds for a request this node no longer needs."""

    req_id: str
    peer_id: str
    handle: str


class RemoteTier:
    """Entries of the requests whose KV is remote. ``max_requests`` caps them (0: the tier is off)."""

    def __init__(self, max_requests: int = 1024) -> None:
        if max_requests < 0:
            raise ValueError(f"max_requests must be >= 0, got {max_requests}")
        self.max_requests = max_requests
        self._entries: dict[str, RemoteEntry] = {}
        self._drops: list[RemoteDrop] = []

    def __contains__(self, req_id: object) -> bool:
        return req_id in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, req_id: str) -> RemoteEntry | None:
        return self._entries.get(req_id)

    def entries(self) -> list[RemoteEntry]:
        return list(self._entries.values())

    @property
    def num_blocks(self) -> int:
        """Blocks of this node's requests held (or moving) remotely."""
        return sum(e.num_blocks for e in self._entries.values())

    def can_add(self) -> bool:
        return len(self._entries) < self.max_requests

    def add(self, req_id: str, num_blocks: int, num_tokens: int) -> RemoteEntry:
        if req_id in self._entries:
            raise ValueError(f"{req_id}: already has remote KV")
        if not self.can_add():
            raise ValueError(f"the remote tier holds {self.max_requests} requests already")
        entry = self._entries[req_id] = RemoteEntry(req_id, num_blocks, num_tokens)
        return entry

    def stored(self, req_id: str, peer_id: str, handle: str) -> bool:
        """SENDING → HELD. False (nothing changes) for an unknown request or one in another state."""
        entry = self._entries.get(req_id)
        if entry is None or entry.state is not RemoteState.SENDING:
            return False
        entry.state, entry.peer_id, entry.handle = RemoteState.HELD, peer_id, handle
        return True

    def begin_fetch(self, req_id: str) -> RemoteEntry:
        """HELD → FETCHING (ValueError in another state)."""
        entry = self._entries[req_id]
        if entry.state is not RemoteState.HELD:
            raise ValueError(f"{req_id}: remote KV is {entry.state.value}, not held")
        entry.state = RemoteState.FETCHING
        return entry

    def fetched(self, req_id: str) -> bool:
        """FETCHING → READY. False (nothing changes) for an unknown request or one in another state."""
        entry = self._entries.get(req_id)
        if entry is None or entry.state is not RemoteState.FETCHING:
            return False
        entry.state = RemoteState.READY
        return True

    def take(self, req_id: str) -> RemoteEntry:
        """Remove a READY entry (its bytes go to device blocks now)."""
        entry = self._entries[req_id]
        if entry.state is not RemoteState.READY:
            raise ValueError(f"{req_id}: remote KV is {entry.state.value}, not ready")
        return self._entries.pop(req_id)

    def remove(self, req_id: str, *, notify_peer: bool) -> RemoteEntry | None:
        """Forget the request's entry (a failure, a free); with ``notify_peer`` a peer that may hold its bytes
        gets a drop notice (``take_drops``)."""
        entry = self._entries.pop(req_id, None)
        if entry is not None and notify_peer:
            self._drops.append(RemoteDrop(req_id, entry.peer_id, entry.handle))
        return entry

    def take_drops(self) -> list[RemoteDrop]:
        drops, self._drops = self._drops, []
        return drops
