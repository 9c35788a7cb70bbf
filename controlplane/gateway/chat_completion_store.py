"""The gateway's stored chat completions (``/v1/chat/completions`` with ``store: true``, OpenAI's): what ``GET
/v1/chat/completions`` lists, ``GET``/``POST``/``DELETE /v1/chat/completions/{id}`` read, re-label and delete, and
``GET .../messages`` pages through (gateway/chat_completion_routes.py).

A completion is kept once it ends (whole or streamed: the same ``chat.completion`` object a whole reply carries, with
its ``metadata``), beside its request's messages, listed each with an id ``<completion id>-<index>`` as OpenAI's are.
Bounded twice, as the stored responses are (gateway/response_store.py): at most ``max_completions`` completions and
``max_bytes`` bytes of them (the object's JSON and the messages'), the least recently used dropped first, the
largest owner's first while it holds more than ``max_share`` of the bound exceeded (gateway/owner_lru.py). A
completion is its owner's (the request's API key's tenant, or the key: gateway/api_keys.py): another owner's lookup
finds nothing, and a list shows the owner's own only, in the order they were kept (OpenAI's list is by time). With a
``journal`` (``--files-dir``: gateway/chat_completion_journal.py) each one kept is on disk too and ``load`` takes
them back after a restart. Sans-IO.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, replace

import msgspec

from controlplane.gateway.cursor_page import cursor_page
from controlplane.gateway.owner_lru import OwnerLRU, OwnerLRUStore

MAX_LIST = 100  # a page's most completions (or messages); 20 when the query says nothing, as OpenAI's
METADATA_QUERY = ("metadata[", "]")  # a list's filter: ``metadata[key]=value``, every pair given must match


@dataclass(frozen=True, slots=True)
class StoredChatCompletion:
    object: dict  # the ChatCompletion, as a whole reply carries it, with its ``metadata``
    messages: tuple[dict, ...]  # its request's messages (their ids are derived: ``messages_page``)
    num_bytes: int
    seq: int  # the order it was kept in (a list's order)


class ChatCompletionStore(OwnerLRUStore[StoredChatCompletion]):
    """Chat completions by (owner, id), least recently used first (gateway/owner_lru.py)."""

    def __init__(self, max_completions: int, max_bytes: int, journal=None, max_share: float = 1.0) -> None:
        self._kept: OwnerLRU[StoredChatCompletion] = OwnerLRU(max_completions, max_bytes, max_share)
        self.max_completions = max_completions
        self.max_bytes = max_bytes
        self.journal = journal  # gateway/chat_completion_journal.py, or None: in memory only
        self._seq = itertools.count()

    def put(self, owner: str | None, obj: dict, messages: tuple[dict, ...]) -> bool:
        """Keep an ended completion (one of the same id and owner is replaced: a caller reused its X-Request-Id);
        False when it alone is over the bounds (then it is not kept)."""
        size = len(msgspec.json.encode(obj)) + len(msgspec.json.encode(messages))
        if self.max_completions == 0 or size > self.max_bytes:
            return False
        stored = StoredChatCompletion(obj, messages, size, next(self._seq))
        self._keep((owner, obj["id"]), stored, size, lambda journal: journal.save(owner, obj, messages))
        return True

    def _replay(self, journal):
        for owner, obj, messages in journal.load():
            yield owner, obj["id"], self.put(owner, obj, messages)

    def set_metadata(self, owner: str | None, completion_id: str, metadata: dict[str, str]) -> dict | None:
        """Replace a completion's metadata (OpenAI's only update); the object after, or None: no such completion."""
        key = (owner, completion_id)
        stored = self._kept.get(key)
        if stored is None:
            return None
        obj = {**stored.object, "metadata": dict(metadata)}
        size = stored.num_bytes + len(msgspec.json.encode(obj)) - len(msgspec.json.encode(stored.object))
        self._keep(
            key, replace(stored, object=obj, num_bytes=size), size, lambda j: j.save(owner, obj, stored.messages)
        )
        return obj

    def page(self, owner: str | None, query: Mapping[str, str]) -> dict:
        """One cursor page of the owner's completions (oldest first unless ``order=desc``), those of the query's
        ``model`` and ``metadata[key]=value`` pairs only; FrontendError naming a bad parameter. A list does not count
        as a use (the LRU order stays)."""
        model = query.get("model")
        wanted = {
            name[len(METADATA_QUERY[0]) : -len(METADATA_QUERY[1])]: value
            for name, value in query.items()
            if name.startswith(METADATA_QUERY[0]) and name.endswith(METADATA_QUERY[1])
        }
        kept = sorted(self._kept.values_of(owner), key=lambda stored: stored.seq)
        objects = [
            s.object
            for s in kept
            if (model is None or s.object.get("model") == model)
            and all(s.object.get("metadata", {}).get(k) == v for k, v in wanted.items())
        ]
        return cursor_page(
            objects, query, default_limit=20, max_limit=MAX_LIST, what="stored chat completion", default_order="asc"
        )


def messages_page(stored: StoredChatCompletion, query: Mapping[str, str]) -> dict:
    """One cursor page of a stored completion's messages (in the request's order unless ``order=desc``), each with
    its id ``<completion id>-<index>``, as OpenAI's."""
    listed = [{"id": f"{stored.object['id']}-{i}", **m} for i, m in enumerate(stored.messages)]
    return cursor_page(listed, query, default_limit=20, max_limit=MAX_LIST, what="message of it", default_order="asc")
