"""The gateway's stored responses (``/v1/responses`` with ``store``): what ``GET /v1/responses/{id}`` returns and
what a later request's ``previous_response_id`` continues.

In memory and bounded twice, as vLLM's in-memory store is not (vllm/entrypoints/openai/serving_responses.py keeps
every stored response until the process ends): at most ``max_responses`` responses and ``max_bytes`` bytes of them
(a response's JSON, its conversation's text, its input items), the least recently used dropped first, the largest
owner's first while it holds more than ``max_share`` of the bound exceeded (gateway/owner_lru.py: one tenant's
flood evicts its own responses, and another tenant's ``previous_response_id`` still finds theirs). A response is
its owner's (the request's API key's tenant, or the key itself: gateway/api_keys.py): another owner's lookup finds
nothing. ``input_items_page`` lists a response's input items as OpenAI's cursor page. In memory only, a gateway
restart forgets them all, as vLLM's does; with a ``journal`` (``--files-dir``: gateway/response_journal.py) each one
kept is written to disk too, and ``load`` takes them back after a restart.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec

from controlplane.gateway.cursor_page import cursor_page
from controlplane.gateway.owner_lru import OwnerLRU, OwnerLRUStore
from transport.messages import ChatMessage


@dataclass(frozen=True, slots=True)
class StoredResponse:
    object: dict  # the Response object, as the reply carried it
    conversation: tuple[ChatMessage, ...]  # its input (after its own previous response's) and its output
    num_bytes: int
    input_items: tuple[dict, ...] = ()  # its own request's input, as GET .../input_items lists it


class ResponseStore(OwnerLRUStore[StoredResponse]):
    """Responses by (owner, id), least recently used first (gateway/owner_lru.py)."""

    def __init__(self, max_responses: int, max_bytes: int, journal=None, max_share: float = 1.0) -> None:
        self._kept: OwnerLRU[StoredResponse] = OwnerLRU(max_responses, max_bytes, max_share)
        self.max_responses = max_responses
        self.max_bytes = max_bytes
        self.journal = journal  # gateway/response_journal.py, or None: in memory only

    def put(
        self, owner: str | None, obj: dict, conversation: tuple[ChatMessage, ...], input_items: tuple[dict, ...] = ()
    ) -> bool:
        """Keep a finished response; False when it alone is over the bounds (then it is not kept)."""
        size = len(msgspec.json.encode(obj)) + sum(_message_bytes(m) for m in conversation)
        size += len(msgspec.json.encode(input_items))
        if self.max_responses == 0 or size > self.max_bytes:
            return False
        stored = StoredResponse(obj, conversation, size, input_items)
        self._keep(
            (owner, obj["id"]), stored, size, lambda journal: journal.save(owner, obj, conversation, input_items)
        )
        return True

    def _replay(self, journal):
        for owner, obj, conversation, input_items in journal.load():
            yield owner, obj["id"], self.put(owner, obj, conversation, input_items)


def _message_bytes(message: ChatMessage) -> int:
    return len(message.content) + sum(len(c.id) + len(c.name) + len(c.arguments) for c in message.tool_calls) + 64


def input_items_page(items: tuple[dict, ...], query) -> dict:
    """One cursor page of ``items`` for the query's ``order``, ``limit`` (1..100, default 20) and ``after``;
    FrontendError naming a bad one."""
    return cursor_page(items, query, default_limit=20, max_limit=100, what="input item of this response")
