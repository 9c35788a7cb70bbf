"""Records kept per owner, least recently used first, within a count and a byte bound that one owner cannot take from
the others (the gateway's stored responses and conversations: gateway/response_store.py, conversation_store.py).

An owner is a request's API key's tenant, or the key (gateway/api_keys.py); None on an open gateway. Past a bound,
records are dropped oldest first; but while the largest owner (by the bound exceeded) holds more than ``max_share``
of it, that owner's own go first. So one tenant's flood evicts its own records, not a quiet tenant's, and a lone
owner (an open gateway) still has the whole store. Sans-IO: the store writes (or drops) its journal's files for
what ``evict`` returns.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

V = TypeVar("V")
Key = tuple[Hashable, str]  # (owner, record id)


class OwnerLRU(Generic[V]):
    """Values by (owner, id) with their sizes; ``evict`` says what goes to be within the bounds."""

    def __init__(self, max_records: int, max_bytes: int, max_share: float = 1.0) -> None:
        if max_records < 0 or max_bytes < 0:
            raise ValueError(f"the bounds must be >= 0, got {max_records} records and {max_bytes} bytes")
        if not 0 < max_share <= 1:
            raise ValueError(f"max_share must be in (0, 1], got {max_share}")
        self.max_records = max_records
        self.max_bytes = max_bytes
        self.max_owner_records = max(1, int(max_records * max_share))
        self.max_owner_bytes = max(1, int(max_bytes * max_share))
        self._values: OrderedDict[Key, V] = OrderedDict()
        self._sizes: dict[Key, int] = {}
        self._owned: dict[Hashable, OrderedDict[Key, None]] = {}  # owner → its keys, least recently used first
        self._owned_bytes: dict[Hashable, int] = {}
        self.num_bytes = 0
        self.num_evicted = 0  # dropped to stay within the bounds (a deletion is not counted)

    def __len__(self) -> int:
        return len(self._values)

    def __iter__(self):
        return iter(self._values)

    def get(self, key: Key) -> V | None:
        """The value, now the most recently used (None: no such key)."""
        value = self._values.get(key)
        if value is not None:
            self._values.move_to_end(key)
            self._owned[key[0]].move_to_end(key)
        return value

    def values_of(self, owner: Hashable) -> list[V]:
        """One owner's values, least recently used first (not a use: the order stays)."""
        return [self._values[key] for key in self._owned.get(owner, ())]

    def put(self, key: Key, value: V, size: int) -> None:
        """Keep ``value`` (replacing one of the same key) as the most recently used; ``evict`` next."""
        self.pop(key)
        self._values[key] = value
        self._sizes[key] = size
        self._owned.setdefault(key[0], OrderedDict())[key] = None
        self._owned_bytes[key[0]] = self._owned_bytes.get(key[0], 0) + size
        self.num_bytes += size

    def resize(self, key: Key, change: int) -> None:
        """A kept value grew (or shrank) by ``change`` bytes; ``evict`` next."""
        self._sizes[key] += change
        self._owned_bytes[key[0]] += change
        self.num_bytes += change

    def pop(self, key: Key) -> V | None:
        """The value, no longer kept (None: no such key)."""
        value = self._values.pop(key, None)
        if value is None:
            return None
        size = self._sizes.pop(key)
        owner = key[0]
        owned = self._owned[owner]
        del owned[key]
        self._owned_bytes[owner] -= size
        if not owned:
            del self._owned[owner], self._owned_bytes[owner]
        self.num_bytes -= size
        return value

    def evict(self, keep: Key | None = None) -> list[tuple[Key, V]]:
        """Drop the least recently used (never ``keep``) until within the bounds: the largest owner's (by the bound
        exceeded) while it holds more than its share of it, else anyone's; what was dropped, in order."""
        dropped: list[tuple[Key, V]] = []
        while len(self._values) > self.max_records or self.num_bytes > self.max_bytes:
            if self.num_bytes > self.max_bytes:
                largest = max(self._owned_bytes, key=self._owned_bytes.__getitem__)
                over = self._owned_bytes[largest] > self.max_owner_bytes
            else:
                largest = max(self._owned, key=lambda owner: len(self._owned[owner]))
                over = len(self._owned[largest]) > self.max_owner_records
            key = _oldest(self._owned[largest], keep) if over else None
            if key is None:
                key = _oldest(self._values, keep)
            if key is None:
                break  # ``keep`` alone
            dropped.append((key, self.pop(key)))
            self.num_evicted += 1
        return dropped


class OwnerLRUStore(Generic[V]):
    """A store over an OwnerLRU (``_kept``) and, optionally, a journal on disk (``journal``: ``forget(owner, id)``
    and ``keep_keys(keys)``; what it saves is the store's): a record read, kept, deleted, the journal's records read
    back after a restart, and the store's size, bytes and evictions, as /metrics reads them."""

    _kept: OwnerLRU[V]
    journal = None

    def get(self, owner: Hashable, record_id: str) -> V | None:
        return self._kept.get((owner, record_id))

    def delete(self, owner: Hashable, record_id: str) -> bool:
        if self._kept.pop((owner, record_id)) is None:
            return False
        if self.journal is not None:
            self.journal.forget(owner, record_id)
        return True

    def _keep(self, key: Key, value: V, size: int, save) -> None:
        """Keep ``value`` (``save(journal)`` writes it to the journal, if any), then evict to the bounds."""
        self._kept.put(key, value, size)
        if self.journal is not None:
            save(self.journal)
        for (owner, record_id), _ in self._kept.evict(keep=key):
            if self.journal is not None:
                self.journal.forget(owner, record_id)

    def load(self) -> int:
        """The journal's records back in the store (a restart), within its bounds; how many."""
        if self.journal is None:
            return 0
        journal, self.journal = self.journal, None  # read back, not written again
        try:
            for owner, record_id, kept in self._replay(journal):
                if not kept:
                    journal.forget(owner, record_id)  # alone over the bounds now (they were lowered)
        finally:
            self.journal = journal
        journal.keep_keys(set(self._kept))  # within the bounds
        return len(self._kept)

    def _replay(self, journal):
        """(owner, record id, whether it was kept) for each of the journal's records, put back in order."""
        raise NotImplementedError

    def __len__(self) -> int:
        return len(self._kept)

    @property
    def num_bytes(self) -> int:
        return self._kept.num_bytes

    @property
    def num_evicted(self) -> int:
        """Records dropped to stay within the bounds (a deletion is not counted)."""
        return self._kept.num_evicted


def _oldest(keys, keep: Key | None) -> Key | None:
    """The first of ``keys`` that is not ``keep`` (at most the second one looked at)."""
    for key in keys:
        if key != keep:
            return key
    return None
