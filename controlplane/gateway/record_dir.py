"""A directory of one file per record, named by the record's id (``DIR/<name>/<id><suffix>``): what the gateway's
journals (gateway/response_journal.py, conversation_journal.py) share. A file is dropped when its record goes, and
``keep_only`` drops those of records a store did not keep as it loaded (for its bounds); files of other names are
left alone. A write or removal that fails (a full disk) is logged and counted (``num_errors``): the record goes on
in memory.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Iterator
from pathlib import Path

import msgspec

log = logging.getLogger(__name__)


def owned_name(prefix: str, owner: str | None, record_id: str) -> str:
    """A file stem for one owner's record: ``prefix`` + the SHA-256 of (owner, id), never the id itself (a caller may
    choose an id, and two owners may reuse one)."""
    return prefix + hashlib.sha256(msgspec.json.encode([owner, record_id])).hexdigest()[:40]


class RecordDir:
    def __init__(self, directory: str | os.PathLike, name: str, prefix: str, suffix: str) -> None:
        self.directory = Path(directory) / name
        self.directory.mkdir(parents=True, exist_ok=True)
        self.prefix, self.suffix = prefix, suffix
        self.num_errors = 0

    def path(self, record_id: str) -> Path:
        return self.directory / f"{record_id}{self.suffix}"

    def paths(self) -> Iterator[Path]:
        """The records' files (``<prefix>*<suffix>``), in no particular order."""
        return self.directory.glob(f"{self.prefix}*{self.suffix}")

    def drop(self, record_id: str) -> None:
        try:
            self.path(record_id).unlink(missing_ok=True)
        except OSError as e:
            self.failed(record_id, e)

    def keep_only(self, kept: set[str]) -> None:
        """Drop every record's file but ``kept``'s."""
        for path in self.paths():
            if path.stem not in kept:
                self.drop(path.stem)

    def failed(self, record_id: str, error: OSError) -> None:
        self.num_errors += 1
        log.error("%s: %s not written to disk (it goes on in memory): %s", self.directory, record_id, error)
