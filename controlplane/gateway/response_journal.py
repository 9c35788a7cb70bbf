"""Stored responses on disk, so a restarted gateway still answers ``GET /v1/responses/{id}`` and continues a
``previous_response_id`` (``zoo controlplane --files-dir``; gateway/response_store.py keeps them in memory and tells
this of every one it keeps and drops).

    DIR/responses/resp_<id>.json    {"owner": ..., "object": {...}, "conversation": [...], "input_items": [...]}
                                    written whole (atomically) when the response is kept, removed when it is deleted
                                    or evicted

``load`` returns them in the order they were kept (the oldest first, as the store drops them). A file that does
not decode, or whose name is not its response's id, is logged and skipped. The owner is kept as the file store
keeps it (gateway/file_store.py). A write that fails (a full disk) is logged and counted (``num_errors``); the
response stays in memory. Background responses still running are not here: a restart ends them (their clients see
them gone), as it ends every request in flight.
"""

from __future__ import annotations

import logging
import os
import re
import time

import msgspec

from controlplane.gateway.file_store import write_atomic
from controlplane.gateway.record_dir import RecordDir
from transport.messages import ChatMessage

log = logging.getLogger(__name__)

_RESPONSE_ID = re.compile(r"resp_[0-9a-f]{24}")


class _Record(msgspec.Struct, kw_only=True):
    owner: str | None
    object: dict
    conversation: list[ChatMessage]
    input_items: list[dict] = []
    saved_ns: int = 0  # when it was kept (wall clock): the order load returns them in


class ResponseJournal(RecordDir):
    def __init__(self, directory: str | os.PathLike) -> None:
        super().__init__(directory, "responses", "resp_", ".json")

    def save(self, owner: str | None, obj: dict, conversation, input_items) -> None:
        record = _Record(owner=owner, object=obj, conversation=list(conversation), input_items=list(input_items),
                         saved_ns=time.time_ns())  # fmt: skip
        try:
            write_atomic(self.path(obj["id"]), msgspec.json.encode(record))
        except OSError as e:
            self.failed(obj["id"], e)

    def forget(self, owner: str | None, response_id: str) -> None:
        """Remove one response's file (deleted, evicted); its id names it alone."""
        self.drop(response_id)

    def keep_keys(self, kept: set) -> None:
        """Drop every file but those of ``kept``'s (owner, id) keys."""
        self.keep_only({response_id for _, response_id in kept})

    def load(self) -> list[tuple[str | None, dict, tuple[ChatMessage, ...], tuple[dict, ...]]]:
        """Every stored response on disk, oldest file first: (owner, object, conversation, input items)."""
        records = []
        for path in self.paths():
            try:
                record = msgspec.json.decode(path.read_bytes(), type=_Record)
            except (OSError, msgspec.MsgspecError) as e:
                log.warning("responses: skipping the unreadable record %s: %s", path, e)
                continue
            if not _RESPONSE_ID.fullmatch(path.stem) or record.object.get("id") != path.stem:
                log.warning("responses: skipping %s (its id is not its name)", path)
                continue
            records.append((record.saved_ns, path.stem, record))
        records.sort(key=lambda entry: entry[:2])
        return [(r.owner, r.object, tuple(r.conversation), tuple(r.input_items)) for _, _, r in records]
