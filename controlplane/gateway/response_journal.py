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
from pathlib import Path

import msgspec

from controlplane.gateway.file_store import write_atomic
from transport.messages import ChatMessage

log = logging.getLogger(__name__)

_RESPONSE_ID = re.compile(r"resp_[0-9a-f]{24}")


class _Record(msgspec.Struct, kw_only=True):
    owner: str | None
    object: dict
    conversation: list[ChatMessage]
    input_items: list[dict] = []
    saved_ns: int = 0  # when it was kept (wall clock): the order load returns them in


class ResponseJournal:
    def __init__(self, directory: str | os.PathLike) -> None:
        self.directory = Path(directory) / "responses"
        self.directory.mkdir(parents=True, exist_ok=True)
        self.num_errors = 0

    def save(self, owner: str | None, obj: dict, conversation, input_items) -> None:
        record = _Record(owner=owner, object=obj, conversation=list(conversation), input_items=list(input_items),
                         saved_ns=time.time_ns())  # fmt: skip
        try:
            write_atomic(self._path(obj["id"]), msgspec.json.encode(record))
        except OSError as e:
            self._failed(obj["id"], e)

    def drop(self, response_id: str) -> None:
        try:
            self._path(response_id).unlink(missing_ok=True)
        except OSError as e:
            self._failed(response_id, e)

    def keep_only(self, kept: set[str]) -> None:
        """Drop every response's file but ``kept``'s (those a store dropped as it loaded, for its bounds)."""
        for path in self.directory.glob("resp_*.json"):
            if path.stem not in kept:
                self.drop(path.stem)

    def load(self) -> list[tuple[str | None, dict, tuple[ChatMessage, ...], tuple[dict, ...]]]:
        """Every stored response on disk, oldest file first: (owner, object, conversation, input items)."""
        records = []
        for path in self.directory.glob("resp_*.json"):
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

    def _path(self, response_id: str) -> Path:
        return self.directory / f"{response_id}.json"

    def _failed(self, response_id: str, error: OSError) -> None:
        self.num_errors += 1
        log.error("responses: %s not written to disk (it stays in memory): %s", response_id, error)
