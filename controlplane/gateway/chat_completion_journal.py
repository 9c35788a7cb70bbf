"""Stored chat completions on disk, so a restarted gateway still lists and reads them (``zoo controlplane
--files-dir``; gateway/chat_completion_store.py keeps them in memory and tells this of every one it keeps, re-labels
and drops).

    DIR/chat_completions/chat_<digest>.json   {"owner": ..., "object": {...}, "messages": [...], "saved_ns": ...}
                                              written whole (atomically) when the completion is kept or its metadata
                                              changes, removed when it is deleted or evicted

A completion's id may be a caller's (``X-Request-Id``: gateway/request_ids.py), and two owners may reuse one, so a
file is named by the SHA-256 of its owner and id, never by the id itself. ``load`` returns them in the order they
were first kept (the oldest first, as the store lists them). A file that does not decode, or whose name is not its
owner's and id's digest, is logged and skipped. A write that fails (a full disk) is logged and counted
(``num_errors``); the completion stays in memory.
"""

from __future__ import annotations

import logging
import os
import time

import msgspec

from controlplane.gateway.file_store import write_atomic
from controlplane.gateway.record_dir import RecordDir, owned_name

log = logging.getLogger(__name__)

PREFIX = "chat_"


class _Record(msgspec.Struct, kw_only=True):
    owner: str | None
    object: dict
    messages: list[dict] = []
    saved_ns: int = 0  # when it was first kept (wall clock): the order load returns them in


def record_name(owner: str | None, completion_id: str) -> str:
    """The file's stem for one owner's completion."""
    return owned_name(PREFIX, owner, completion_id)


class ChatCompletionJournal(RecordDir):
    def __init__(self, directory: str | os.PathLike) -> None:
        super().__init__(directory, "chat_completions", PREFIX, ".json")
        self._saved_ns: dict[str, int] = {}  # a record's first save, kept when its metadata changes

    def save(self, owner: str | None, obj: dict, messages) -> None:
        name = record_name(owner, obj["id"])
        saved_ns = self._saved_ns.setdefault(name, time.time_ns())
        record = _Record(owner=owner, object=obj, messages=list(messages), saved_ns=saved_ns)
        try:
            write_atomic(self.path(name), msgspec.json.encode(record))
        except OSError as e:
            self.failed(name, e)

    def forget(self, owner: str | None, completion_id: str) -> None:
        """Remove one completion's file (deleted, evicted)."""
        name = record_name(owner, completion_id)
        self._saved_ns.pop(name, None)
        self.drop(name)

    def keep_keys(self, kept: set) -> None:
        """Drop every file but those of ``kept``'s (owner, id) keys."""
        self.keep_only({record_name(owner, completion_id) for owner, completion_id in kept})

    def load(self) -> list[tuple[str | None, dict, tuple[dict, ...]]]:
        """Every stored completion on disk, oldest first: (owner, object, messages)."""
        records = []
        for path in self.paths():
            try:
                record = msgspec.json.decode(path.read_bytes(), type=_Record)
                name = record_name(record.owner, record.object["id"])
            except (OSError, msgspec.MsgspecError, KeyError, TypeError) as e:
                log.warning("chat completions: skipping the unreadable record %s: %s", path, e)
                continue
            if name != path.stem:
                log.warning("chat completions: skipping %s (its name is not its owner's and id's)", path)
                continue
            self._saved_ns[name] = record.saved_ns
            records.append((record.saved_ns, name, record))
        records.sort(key=lambda entry: entry[:2])
        return [(r.owner, r.object, tuple(r.messages)) for _, _, r in records]
