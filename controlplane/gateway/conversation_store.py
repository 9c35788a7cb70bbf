"""The gateway's conversations (OpenAI's Conversations API, ``/v1/conversations``): each an ordered list of items
that a ``/v1/responses`` request naming it (``conversation``) continues, and to which that response's input and
output items are added once it ends.

In memory and bounded, as the response store is (gateway/response_store.py): at most ``max_conversations`` conversations
and ``max_bytes`` bytes of items and metadata in all, the least recently used conversation dropped first (counted in
``num_evicted``). Fair between owners: when the store is full and its largest owner holds more than ``max_share`` of the
bound exceeded, that owner's least recently used go first, so one tenant's flood evicts its own conversations, not the
others' (a lone owner, an open gateway's, still has the whole store: gateway/owner_lru.py). A single conversation may
not grow past ``max_bytes``: adding items that would is refused (``ConversationFull``), and the conversation stays as it
was. A conversation is its owner's (the request's API key's tenant, or the key: gateway/api_keys.py); another owner's
lookup finds nothing. In memory only, a gateway restart forgets them, as it forgets stored responses; with a ``journal``
(``--files-dir``: gateway/conversation_journal.py) every change is written to disk too, and ``load`` takes them back
after a restart.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import msgspec

from controlplane.frontend import invalid_param
from controlplane.gateway.owner_lru import OwnerLRU, OwnerLRUStore

log = logging.getLogger(__name__)

MAX_METADATA_PAIRS = 16  # OpenAI's bounds on an object's metadata
MAX_METADATA_KEY_CHARS = 64
MAX_METADATA_VALUE_CHARS = 512
_OVERHEAD_BYTES = 64  # a conversation's own fields, counted against the bound beside its items


class ConversationFull(Exception):
    """Adding the items would make one conversation larger than the store's byte bound."""


@dataclass(slots=True)
class Conversation:
    id: str
    created_at: int
    metadata: dict[str, str]
    items: list[dict] = field(default_factory=list)  # oldest first, each with its ``id``
    item_bytes: list[int] = field(default_factory=list)  # each item's encoded size, in the same order
    num_bytes: int = _OVERHEAD_BYTES

    def object(self) -> dict:
        """The Conversation object OpenAI returns."""
        return {"id": self.id, "object": "conversation", "created_at": self.created_at, "metadata": self.metadata}

    def item(self, item_id: str) -> dict | None:
        for item in self.items:
            if item["id"] == item_id:
                return item
        return None


class ConversationStore(OwnerLRUStore[Conversation]):
    """Conversations by (owner, id), least recently used first (gateway/owner_lru.py)."""

    def __init__(self, max_conversations: int, max_bytes: int, journal=None, max_share: float = 1.0) -> None:
        self._kept: OwnerLRU[Conversation] = OwnerLRU(max_conversations, max_bytes, max_share)
        self.max_conversations = max_conversations
        self.max_bytes = max_bytes
        self.journal = journal  # gateway/conversation_journal.py, or None: in memory only
        self.num_unrecorded = 0  # responses whose items could not be added (their conversation deleted, or full)

    def create(self, owner: str | None, conversation: Conversation, items: tuple[dict, ...] = ()) -> None:
        """Keep a new conversation holding ``items``; ConversationFull when they alone are over the byte bound."""
        if self.max_conversations == 0:
            raise ConversationFull("this gateway keeps no conversations (its conversation store is turned off)")
        conversation.num_bytes = _OVERHEAD_BYTES + _metadata_bytes(conversation.metadata)
        self._add(conversation, items)
        key = (owner, conversation.id)
        self._kept.put(key, conversation, conversation.num_bytes)
        if self.journal is not None:
            self.journal.create(owner, conversation.id, conversation.created_at, conversation.metadata, items)
        self._evict(keep=key)

    def load(self) -> int:
        """The journal's conversations back in the store (a restart), within its bounds; how many."""
        if self.journal is None or self.max_conversations == 0:
            return 0
        journal, self.journal = self.journal, None  # replayed, not written again (load rewrote them compacted)
        try:
            for owner, conversation_id, created_at, metadata, items in journal.load():
                try:
                    self.create(owner, Conversation(conversation_id, created_at, metadata), tuple(items))
                except ConversationFull:  # the bound was lowered since: it does not fit any more
                    log.warning("conversations: %s is over the store's bound now; dropped", conversation_id)
                    journal.drop(conversation_id)
        finally:
            self.journal = journal
        journal.keep_only({conversation_id for _, conversation_id in self._kept})  # within the bounds
        return len(self._kept)

    def get(self, owner: str | None, conversation_id: str) -> Conversation | None:
        return self._kept.get((owner, conversation_id))

    def add_items(self, owner: str | None, conversation_id: str, items: tuple[dict, ...]) -> Conversation | None:
        """Append ``items`` to the conversation (None: its owner has none of that id); ConversationFull when it would
        then be over the byte bound (nothing added)."""
        conversation = self.get(owner, conversation_id)
        if conversation is None:
            return None
        before = conversation.num_bytes
        self._add(conversation, items)
        self._kept.resize((owner, conversation_id), conversation.num_bytes - before)
        if self.journal is not None:
            self.journal.items(conversation_id, items)
        self._evict(keep=(owner, conversation_id))
        return conversation

    def set_metadata(self, owner: str | None, conversation_id: str, metadata: dict[str, str]) -> Conversation | None:
        conversation = self.get(owner, conversation_id)
        if conversation is None:
            return None
        change = _metadata_bytes(metadata) - _metadata_bytes(conversation.metadata)
        if conversation.num_bytes + change > self.max_bytes:
            raise ConversationFull(f"the conversation would be over the gateway's bound of {self.max_bytes} bytes")
        conversation.metadata = metadata
        conversation.num_bytes += change
        self._kept.resize((owner, conversation_id), change)
        if self.journal is not None:
            self.journal.metadata(conversation_id, metadata)
        self._evict(keep=(owner, conversation_id))
        return conversation

    def delete_item(self, owner: str | None, conversation_id: str, item_id: str) -> Conversation | bool | None:
        """The conversation without the item; None: no such conversation; False: it has no such item."""
        conversation = self.get(owner, conversation_id)
        if conversation is None:
            return None
        for i, item in enumerate(conversation.items):
            if item["id"] == item_id:
                del conversation.items[i]
                size = conversation.item_bytes.pop(i)
                conversation.num_bytes -= size
                self._kept.resize((owner, conversation_id), -size)
                if self.journal is not None:
                    self.journal.delete_item(conversation_id, item_id)
                return conversation
        return False

    def delete(self, owner: str | None, conversation_id: str) -> bool:
        if self._kept.pop((owner, conversation_id)) is None:
            return False
        if self.journal is not None:
            self.journal.drop(conversation_id)
        return True

    def _add(self, conversation: Conversation, items: tuple[dict, ...]) -> None:
        sizes = [len(msgspec.json.encode(item)) for item in items]
        if conversation.num_bytes + sum(sizes) > self.max_bytes:
            raise ConversationFull(
                f"the conversation would hold {conversation.num_bytes + sum(sizes)} bytes, over the gateway's bound "
                f"of {self.max_bytes}: start a new conversation, or delete some of its items"
            )
        conversation.items += items
        conversation.item_bytes += sizes
        conversation.num_bytes += sum(sizes)

    def _evict(self, keep: tuple[str | None, str]) -> None:
        """Within the bounds again (gateway/owner_lru.py's rule), each one dropped from the journal too."""
        for _, dropped in self._kept.evict(keep):
            if self.journal is not None:
                self.journal.drop(dropped.id)


def _metadata_bytes(metadata: dict[str, str]) -> int:
    return sum(len(k) + len(v) for k, v in metadata.items())


def check_metadata(metadata: dict[str, str] | None, param: str = "metadata") -> dict[str, str]:
    """OpenAI's metadata rules (at most 16 pairs, keys of at most 64 characters, values of at most 512);
    FrontendError naming the one broken."""
    metadata = metadata or {}
    if len(metadata) > MAX_METADATA_PAIRS:
        raise invalid_param(param, f"holds at most {MAX_METADATA_PAIRS} pairs, got {len(metadata)}")
    for key, value in metadata.items():
        if len(key) > MAX_METADATA_KEY_CHARS:
            raise invalid_param(param, f"a key is at most {MAX_METADATA_KEY_CHARS} characters, got {len(key)}")
        if len(value) > MAX_METADATA_VALUE_CHARS:
            raise invalid_param(f"{param}.{key}", f"is at most {MAX_METADATA_VALUE_CHARS} characters, got {len(value)}")
    return dict(metadata)
