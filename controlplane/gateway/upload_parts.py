"""Where the parts of OpenAI Uploads not yet completed are kept (gateway/uploads.py holds their state, sans-IO).

    MemoryParts          in memory: a gateway restart forgets the pending uploads (the default, as without
                         ``--files-dir`` the files themselves are forgotten)
    DiskParts(DIR)       on disk (``zoo controlplane --files-dir DIR``): a restarted gateway finds every pending
                         upload again, with its parts, so a client goes on sending parts and completes it:

        DIR/uploads/upload_<id>/upload.json     {"owner", "object", "expires_after"}: written at create
        DIR/uploads/upload_<id>/part_<id>.part  a part's bytes, each written to a temporary name and renamed
        DIR/uploads/ended/upload_<id>.json      an ended upload's record (its status, its File when completed)

When an upload ends (completed, cancelled, expired), its ended record is written first, then its directory goes: a
gateway stopped in between finds the record and drops the directory. The ended records are kept as the gateway's
memory keeps them (the newest ``MAX_ENDED``, gateway/uploads.py), so completing or cancelling an upload again after a
restart says its status rather than 404. A part's bytes are not held in memory with ``DiskParts``; the completed
file's content is read from disk when it is completed. Its methods block on the disk, so the routes call them in a
worker thread (gateway/upload_routes.py). ``load`` skips what it cannot read (an unreadable record, a part file
whose name is not a part id), and drops directories that hold no record.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path

import msgspec

from controlplane.gateway.file_store import write_atomic

log = logging.getLogger(__name__)

UPLOAD_ID = re.compile(r"upload_[0-9a-f]{32}")
PART_ID = re.compile(r"part_[0-9a-f]{32}")


class UploadRecord(msgspec.Struct):
    owner: str | None
    object: dict
    expires_after: int | None = None
    ended_at: float | None = None  # an ended upload's: when (its record's order at load)


ENDED = frozenset({"completed", "cancelled", "expired"})


@dataclass(frozen=True, slots=True)
class PendingUpload:
    """An upload found again at start: its record, and its parts' sizes (part id → bytes; none for an ended one,
    whose record's status says how it ended)."""

    record: UploadRecord
    parts: dict[str, int]


class MemoryParts:
    """Parts in memory, by upload id."""

    def __init__(self) -> None:
        self._parts: dict[str, dict[str, bytes]] = {}
        self._lock = threading.Lock()  # the routes call in worker threads

    def begin(self, upload_id: str, record: UploadRecord) -> None:
        with self._lock:
            self._parts[upload_id] = {}

    def put(self, upload_id: str, part_id: str, data: bytes) -> None:
        with self._lock:
            parts = self._parts.get(upload_id)
            if parts is None:
                raise KeyError(upload_id)  # it ended meanwhile
            parts[part_id] = data

    def content(self, upload_id: str, part_ids: list[str]) -> bytes:
        with self._lock:
            parts = self._parts[upload_id]
            return b"".join(parts[p] for p in part_ids)

    def forget(self, upload_id: str, part_id: str) -> None:
        with self._lock:
            self._parts.get(upload_id, {}).pop(part_id, None)

    def drop(self, upload_id: str) -> None:
        with self._lock:
            self._parts.pop(upload_id, None)

    def end(self, upload_id: str, record: UploadRecord) -> None:
        """The upload ended: its parts go (its record is the gateway's memory's)."""
        self.drop(upload_id)

    def forget_record(self, upload_id: str) -> None:
        """An ended upload's record is no longer kept (nothing to do in memory)."""

    def load(self) -> list[PendingUpload]:
        return []


class DiskParts:
    """Parts in ``DIR/uploads``."""

    def __init__(self, directory: str | os.PathLike) -> None:
        self.directory = Path(directory) / "uploads"
        self.ended_directory = self.directory / "ended"
        self.ended_directory.mkdir(parents=True, exist_ok=True)

    def _dir(self, upload_id: str) -> Path:
        if not UPLOAD_ID.fullmatch(upload_id):  # ids are made here; anything else never names a path
            raise ValueError(f"not an upload id: {upload_id[:64]!r}")
        return self.directory / upload_id

    def begin(self, upload_id: str, record: UploadRecord) -> None:
        path = self._dir(upload_id)
        path.mkdir(exist_ok=True)
        write_atomic(path / "upload.json", msgspec.json.encode(record))

    def put(self, upload_id: str, part_id: str, data: bytes) -> None:
        if not PART_ID.fullmatch(part_id):
            raise ValueError(f"not a part id: {part_id[:64]!r}")
        path = self._dir(upload_id)
        if not path.is_dir():
            raise KeyError(upload_id)  # it ended meanwhile: its directory is not made again
        write_atomic(path / f"{part_id}.part", data)

    def content(self, upload_id: str, part_ids: list[str]) -> bytes:
        path = self._dir(upload_id)
        return b"".join((path / f"{p}.part").read_bytes() for p in part_ids)

    def forget(self, upload_id: str, part_id: str) -> None:
        try:
            (self._dir(upload_id) / f"{part_id}.part").unlink(missing_ok=True)
        except OSError as e:
            log.error("uploads: the part %s of %s could not be removed: %s", part_id, upload_id, e)

    def drop(self, upload_id: str) -> None:
        shutil.rmtree(self._dir(upload_id), ignore_errors=True)

    def end(self, upload_id: str, record: UploadRecord) -> None:
        """The upload ended: its ended record written (OSError: not, and its parts are kept), then its parts gone."""
        self._dir(upload_id)  # an id made here
        write_atomic(self.ended_directory / f"{upload_id}.json", msgspec.json.encode(record))
        self.drop(upload_id)

    def forget_record(self, upload_id: str) -> None:
        self._dir(upload_id)
        try:
            (self.ended_directory / f"{upload_id}.json").unlink(missing_ok=True)
        except OSError as e:
            log.error("uploads: the ended record of %s could not be removed: %s", upload_id, e)

    def load(self) -> list[PendingUpload]:
        """The uploads on disk: the ended ones' records in the order they ended, then the pending ones with their
        parts, oldest first."""
        found = self._load_ended()
        ended = {u.record.object["id"] for u in found}
        for path in self.directory.iterdir():
            if path.name in ended:  # stopped after writing its ended record: the record wins
                shutil.rmtree(path, ignore_errors=True)
        found.sort(key=lambda u: (u.record.ended_at or 0.0, u.record.object["id"]))  # in the order they ended
        pending = self._load_pending()
        return found + sorted(pending, key=lambda u: (u.record.object.get("created_at", 0), u.record.object["id"]))

    def _load_ended(self) -> list[PendingUpload]:
        found = []
        for path in self.ended_directory.iterdir():
            upload_id = path.name.removesuffix(".json")
            if not UPLOAD_ID.fullmatch(upload_id) or path.suffix != ".json":
                continue
            try:
                record = msgspec.json.decode(path.read_bytes(), type=UploadRecord)
            except (OSError, msgspec.MsgspecError):
                record = None
            if record is None or record.object.get("id") != upload_id or record.object.get("status") not in ENDED:
                log.warning("uploads: dropping %s (not a readable ended upload's record)", path)
                path.unlink(missing_ok=True)
                continue
            found.append(PendingUpload(record, {}))
        return found

    def _load_pending(self) -> list[PendingUpload]:
        found = []
        for path in self.directory.iterdir():
            if not path.is_dir() or not UPLOAD_ID.fullmatch(path.name):
                continue
            try:
                record = msgspec.json.decode((path / "upload.json").read_bytes(), type=UploadRecord)
            except (OSError, msgspec.MsgspecError):
                log.warning("uploads: dropping %s (no readable record)", path)
                shutil.rmtree(path, ignore_errors=True)
                continue
            if record.object.get("id") != path.name or record.object.get("status") != "pending":
                log.warning("uploads: dropping %s (its record names another upload or is not pending)", path)
                shutil.rmtree(path, ignore_errors=True)
                continue
            parts = {}
            for part in path.glob("part_*.part"):
                if PART_ID.fullmatch(part.stem):
                    try:
                        parts[part.stem] = part.stat().st_size
                    except OSError:
                        continue
            found.append(PendingUpload(record, parts))
        return found
