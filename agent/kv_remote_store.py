"""RemoteKVStore: the KV a node holds in host RAM for its peers (the holder's half of the remote KV tier).
Sans-IO: no sockets, no clock of its own (callers pass ``now_s``).

    owner's "store" transfer ──► admit (chunk 0: room in the budget?) ── no ──► refused FULL (counted)
                                   │ yes: bytes reserved until the transfer completes or is given up
                                   ▼
                                 put ──► held[(owner, request id)] ──► take ("fetch": sent back) / drop
                                                                  └──► expire: its owner unseen for owner_timeout_s

A transfer admitted but never completed (the owner died mid-send) keeps its reservation until ``expire``
drops reservations older than ``owner_timeout_s``. Held KV is freed when the owner takes it back, drops it,
or has not been seen alive (``saw``, fed from the control plane's peer list) for ``owner_timeout_s``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from transport.kv_transfer import ReceivedKV


@dataclass(slots=True)
class StoreStats:
    num_stored: int = 0
    num_returned: int = 0
    num_dropped: int = 0
    num_expired: int = 0  # freed because their owner was gone for owner_timeout_s
    refused_full: int = 0  # transfers refused for want of room (KVRefusal.FULL)
    num_missing: int = 0  # fetches of nothing held (expired, or never arrived)


@dataclass(slots=True)
class _Held:
    kv: ReceivedKV
    nbytes: int
    stored_s: float


@dataclass(slots=True)
class RemoteKVStore:
    """budget_bytes: host RAM this node lends its peers; owner_timeout_s: how long KV of an owner not seen alive
    (and a reservation never completed) is kept."""

    budget_bytes: int
    owner_timeout_s: float = 30.0
    stats: StoreStats = field(default_factory=StoreStats)
    _held: dict[tuple[str, str], _Held] = field(default_factory=dict)
    _reserved: dict[tuple[str, str], tuple[int, float]] = field(default_factory=dict)  # key → (bytes, since)
    _last_seen_s: dict[str, float] = field(default_factory=dict)  # owner → when last seen alive

    def __post_init__(self) -> None:
        if self.budget_bytes < 0:
            raise ValueError(f"budget_bytes must be >= 0, got {self.budget_bytes}")
        if self.owner_timeout_s <= 0:
            raise ValueError(f"owner_timeout_s must be > 0, got {self.owner_timeout_s}")

    @property
    def used_bytes(self) -> int:
        return sum(h.nbytes for h in self._held.values()) + sum(n for n, _ in self._reserved.values())

    @property
    def free_bytes(self) -> int:
        return max(0, self.budget_bytes - self.used_bytes)

    @property
    def num_held(self) -> int:
        return len(self._held)

    def holds(self, owner: str, request_id: str) -> bool:
        return (owner, request_id) in self._held

    def admit(self, owner: str, request_id: str, nbytes: int, now_s: float) -> str | None:
        """Reserve room for an incoming transfer; the reason it is refused (counted), or None."""
        key = (owner, request_id)
        self._drop_key(key)  # a resend replaces what was held
        if nbytes > self.free_bytes:
            self.stats.refused_full += 1
            return f"{nbytes} bytes; this node's KV store has {self.free_bytes} of {self.budget_bytes} free"
        self._reserved[key] = (nbytes, now_s)
        self._last_seen_s[owner] = now_s
        return None

    def put(self, owner: str, kv: ReceivedKV, now_s: float) -> bool:
        """Hold a completed transfer (admitted before). False: it was not admitted (a reservation that expired
        meanwhile) and no longer fits; nothing is held then."""
        key = (owner, kv.request_id)
        reserved = self._reserved.pop(key, None)
        if reserved is None and kv.nbytes > self.free_bytes:
            self.stats.refused_full += 1
            return False
        self._held[key] = _Held(kv, kv.nbytes, now_s)
        self._last_seen_s[owner] = now_s
        self.stats.num_stored += 1
        return True

    def take(self, owner: str, request_id: str) -> ReceivedKV | None:
        """Hand back (and forget) what is held for the owner's request; None when nothing is."""
        held = self._held.pop((owner, request_id), None)
        if held is None:
            self.stats.num_missing += 1
            return None
        self.stats.num_returned += 1
        return held.kv

    def drop(self, owner: str, request_id: str) -> bool:
        if self._drop_key((owner, request_id)):
            self.stats.num_dropped += 1
            return True
        return False

    def saw(self, owners: Iterable[str], now_s: float) -> None:
        """These owners are alive now (the control plane lists them, or they sent something)."""
        for owner in owners:
            self._last_seen_s[owner] = now_s

    def expire(self, now_s: float) -> list[tuple[str, str]]:
        """Free what is held for owners unseen for ``owner_timeout_s``, and reservations that old; the keys freed."""
        before_s = now_s - self.owner_timeout_s
        gone = [k for k in self._held if self._last_seen_s.get(k[0], self._held[k].stored_s) < before_s]
        for key in gone:
            del self._held[key]
        self.stats.num_expired += len(gone)
        for key in [k for k, (_, since_s) in self._reserved.items() if since_s < before_s]:
            del self._reserved[key]
        return gone

    def _drop_key(self, key: tuple[str, str]) -> bool:
        found = self._held.pop(key, None) is not None
        return self._reserved.pop(key, None) is not None or found
