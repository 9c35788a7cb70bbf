"""Conversations on disk, so a restarted gateway still has them (``zoo controlplane --files-dir``; gateway/
conversation_store.py keeps them in memory and tells this of every change).

    DIR/conversations/conv_<id>.jsonl    one conversation's log, a JSON line per change, appended as it happens:
        {"op": "create", "owner": ..., "created_at": ..., "metadata": {...}}
        {"op": "items", "items": [...]}            items added (a client's, or a response's input and output)
        {"op": "metadata", "metadata": {...}}      its metadata replaced
        {"op": "delete_item", "id": ...}           an item deleted
    A deleted or evicted conversation's file is removed.

``load`` replays every log, oldest file first (the least recently used conversation first, as the store drops
them), and rewrites each one compacted (its create, then its items as they are now). A torn last line (a crash
while writing it) is skipped: that change is lost, the ones before it are not. A line that is not a change, or a
file whose first line is not a create, is logged and skipped. The owner is kept as the file store keeps it
(gateway/file_store.py): the request's API key's tenant, or the key. A write that fails (a full disk) is logged
and counted (``num_errors``); the conversation goes on in memory.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Literal

import msgspec

from controlplane.gateway.file_store import write_atomic
from controlplane.gateway.record_dir import RecordDir

log = logging.getLogger(__name__)

_CONVERSATION_ID = re.compile(r"conv_[0-9a-f]{24}")


class _Change(msgspec.Struct, kw_only=True, omit_defaults=True):
    op: Literal["create", "items", "metadata", "delete_item"]
    owner: str | None = None
    created_at: int = 0
    metadata: dict[str, str] | None = None
    items: list[dict] | None = None
    id: str | None = None


_DECODER = msgspec.json.Decoder(_Change)


class ConversationJournal(RecordDir):
    def __init__(self, directory: str | os.PathLike) -> None:
        super().__init__(directory, "conversations", "conv_", ".jsonl")

    def create(self, owner: str | None, conversation_id: str, created_at: int, metadata: dict, items) -> None:
        lines = [_Change(op="create", owner=owner, created_at=created_at, metadata=metadata)]
        if items:
            lines.append(_Change(op="items", items=list(items)))
        self._write(conversation_id, lines, mode="wb")

    def items(self, conversation_id: str, items) -> None:
        self._write(conversation_id, [_Change(op="items", items=list(items))])

    def metadata(self, conversation_id: str, metadata: dict) -> None:
        self._write(conversation_id, [_Change(op="metadata", metadata=metadata)])

    def delete_item(self, conversation_id: str, item_id: str) -> None:
        self._write(conversation_id, [_Change(op="delete_item", id=item_id)])

    def load(self) -> list[tuple[str | None, str, int, dict, list[dict]]]:
        """Every conversation on disk, oldest file first: (owner, id, created_at, metadata, items); each file is
        rewritten compacted."""
        found = []
        paths = [(p.stat().st_mtime_ns, p) for p in self.paths()]
        for _, path in sorted(paths):
            replayed = self._replay(path)
            if replayed is None:
                continue
            found.append(replayed)
            owner, conversation_id, created_at, metadata, items = replayed
            compact = [_Change(op="create", owner=owner, created_at=created_at, metadata=metadata)]
            if items:
                compact.append(_Change(op="items", items=items))
            try:
                write_atomic(path, b"".join(msgspec.json.encode(c) + b"\n" for c in compact))
            except OSError as e:
                self.failed(conversation_id, e)
        return found

    def _replay(self, path: Path) -> tuple[str | None, str, int, dict, list[dict]] | None:
        conversation_id = path.stem
        if not _CONVERSATION_ID.fullmatch(conversation_id):
            log.warning("conversations: skipping %s (not a conversation's name)", path)
            return None
        try:
            lines = path.read_bytes().split(b"\n")
        except OSError as e:
            log.warning("conversations: skipping %s: %s", path, e)
            return None
        changes = []
        for i, line in enumerate(lines):
            if not line:
                continue
            try:
                changes.append(_DECODER.decode(line))
            except msgspec.MsgspecError:
                torn = i == len(lines) - 1  # no newline after it: a write cut short
                log.warning("conversations: %s: %s line %d skipped", path, "a torn last" if torn else "a bad", i + 1)
        if not changes or changes[0].op != "create":
            log.warning("conversations: skipping %s (it does not start with its create)", path)
            return None
        first = changes[0]
        metadata, items = dict(first.metadata or {}), []
        for change in changes[1:]:
            if change.op == "items":
                items += [item for item in change.items or () if isinstance(item.get("id"), str)]
            elif change.op == "metadata":
                metadata = dict(change.metadata or {})
            elif change.op == "delete_item":
                items = [item for item in items if item["id"] != change.id]
        return first.owner, conversation_id, first.created_at, metadata, items

    def _write(self, conversation_id: str, changes: list[_Change], mode: str = "ab") -> None:
        try:
            with open(self.path(conversation_id), mode) as f:
                f.write(b"".join(msgspec.json.encode(c) + b"\n" for c in changes))
        except OSError as e:
            self.failed(conversation_id, e)
