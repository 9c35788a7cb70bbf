"""The gateway's files (OpenAI's Files API, ``/v1/files``): a batch's input, uploaded, and its output and error
files, written by the batch runner (gateway/batch_runner.py).

Bounded by count and by bytes, and kept per owner (the request's API key's tenant, or the key itself:
gateway/api_keys.py), as stored responses are (gateway/response_store.py): another owner's lookup finds nothing.
An upload that would pass a bound is refused (413), never made room for by dropping another file: a file is
somebody's batch input or results. The runner's output files are kept even past the bounds, since dropping a
finished batch's results would lose work that is done; they count against the bounds, so uploads are refused
until files are deleted.

Where they live: in memory (``directory`` None: a gateway restart forgets them), or in a directory
(``zoo controlplane --files-dir``), where a restarted gateway finds them again, and batches resume from them::

    DIR/files/file-<id>.bin    the content          DIR/files/file-<id>.json   {"owner": ..., "object": {...}}

each written to a temporary name and renamed, the content first, so a crash leaves a file whole or absent.
With a directory the content is read from disk when asked for; its methods block on the disk, so the routes
call them in a worker thread (and a lock keeps two uploads from both passing the bounds).

A file object is OpenAI's (openai SDK ``FileObject``): ``id`` ("file-..."), ``object`` "file", ``bytes``,
``created_at``, ``filename``, ``purpose``, ``status`` "processed", ``expires_at`` (None: kept until deleted).

Expiry, as OpenAI's: an upload may say ``expires_after`` ({"anchor": "created_at", "seconds": 3600..2592000}), and
an uploaded batch input that does not expires after 30 days, OpenAI's default; a batch's ``output_expires_after``
does the same for its output and error files. An expired file is deleted (counted in ``num_expired``) at the next
call that finds it due, wherever it is kept; a batch that has not read its input by then fails as if it was deleted.

A list is OpenAI's cursor page, newest first by default (``order``), ``limit`` 1..10,000 (default 10,000),
``after`` the last id of the page before, and an optional ``purpose`` filter.
"""

from __future__ import annotations

import heapq
import logging
import os
import re
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path

import msgspec

from controlplane.frontend import FrontendError, invalid_param
from controlplane.gateway.cursor_page import cursor_page
from transport.messages import ErrorCode

log = logging.getLogger(__name__)

UPLOAD_PURPOSES = ("batch", "user_data")  # what an upload may be for here (fine-tuning, assistants: not served)
OUTPUT_PURPOSE = "batch_output"  # the runner's output and error files
MAX_FILENAME_CHARS = 255
MAX_LIST_LIMIT = 10_000  # OpenAI's largest page of files (and its default)
_FILE_ID = re.compile(r"file-[0-9a-f]{32}")
EXPIRES_AFTER_RANGE_S = (3600, 30 * 24 * 3600)  # OpenAI's bounds on ``expires_after.seconds``: an hour .. 30 days
BATCH_INPUT_EXPIRES_S = 30 * 24 * 3600  # OpenAI's default for an uploaded batch input


def check_upload(filename: str, purpose: str, name_param: str = "file") -> None:
    """An upload's purpose and file name (``/v1/files``, ``/v1/uploads``); a 400 naming the one at fault."""
    if purpose not in UPLOAD_PURPOSES:
        raise invalid_param("purpose", f"must be one of {list(UPLOAD_PURPOSES)} here, got {purpose[:64]!r}")
    if not filename or len(filename) > MAX_FILENAME_CHARS or not filename.isprintable():
        raise invalid_param(name_param, f"needs a printable file name of 1..{MAX_FILENAME_CHARS} characters")


def expires_after_s(anchor: object, seconds: object, param: str) -> int:
    """``expires_after``'s seconds (``anchor`` must be "created_at"); a 400 naming ``param`` otherwise."""
    if anchor != "created_at":
        raise invalid_param(f"{param}.anchor", f"must be 'created_at', got {str(anchor)[:40]!r}")
    low, high = EXPIRES_AFTER_RANGE_S
    if isinstance(seconds, bool) or not isinstance(seconds, int) or not low <= seconds <= high:
        raise invalid_param(f"{param}.seconds", f"must be an integer in [{low}, {high}], got {str(seconds)[:40]!r}")
    return seconds


class _Record(msgspec.Struct):
    owner: str | None
    object: dict


class FileStore:
    """Files by (owner, id), in upload order."""

    def __init__(
        self,
        max_files: int,
        max_bytes: int,
        directory: str | os.PathLike | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if max_files < 0 or max_bytes < 0:
            raise ValueError(f"max_files and max_bytes must be >= 0, got {max_files} and {max_bytes}")
        self.max_files = max_files
        self.max_bytes = max_bytes
        self.directory = None if directory is None else Path(directory) / "files"
        self._objects: dict[tuple[str | None, str], dict] = {}
        self._contents: dict[str, bytes] = {}  # in memory only
        self._lock = threading.Lock()
        self.num_bytes = 0
        self._num_writing = 0  # uploads past the bounds check, not yet kept
        self.clock = clock
        self._expiries: list[tuple[int, str, str | None]] = []  # a heap of (expires_at, id, owner)
        self.num_expired = 0
        if self.directory is not None:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._load()

    def __len__(self) -> int:
        return len(self._objects)

    def upload(
        self, owner: str | None, filename: str, purpose: str, content: bytes, expires_after: int | None = None
    ) -> dict:
        """Keep an uploaded file (``expires_after`` seconds: it expires; None: a batch input's default); raises a
        400 for a bad purpose or name, a 413 past the store's bounds."""
        self.expire()
        check_upload(filename, purpose)
        with self._lock:
            num_files = len(self._objects) + self._num_writing
            if num_files + 1 > self.max_files or self.num_bytes + len(content) > self.max_bytes:
                message = (
                    f"The file store is full ({num_files} files, {self.num_bytes} bytes; at most "
                    f"{self.max_files} files and {self.max_bytes} bytes): delete files to make room"
                )
                raise FrontendError(ErrorCode.OVERSIZED, message, param="file")
            self.num_bytes += len(content)  # held while it is written, so a concurrent upload sees it
            self._num_writing += 1
        if expires_after is None and purpose == "batch":
            expires_after = BATCH_INPUT_EXPIRES_S
        try:
            return self.put(owner, filename, purpose, content, expires_after)
        finally:
            with self._lock:
                self.num_bytes -= len(content)
                self._num_writing -= 1

    def put(
        self, owner: str | None, filename: str, purpose: str, content: bytes, expires_after: int | None = None
    ) -> dict:
        """Keep a file whatever the bounds (the runner's results; ``upload`` checks them first); returns its object.
        ``expires_after``: seconds it is kept (None: until deleted)."""
        file_id = f"file-{uuid.uuid4().hex}"
        created = int(self.clock())
        obj = {
            "id": file_id,
            "object": "file",
            "bytes": len(content),
            "created_at": created,
            "filename": filename,
            "purpose": purpose,
            "status": "processed",
            "expires_at": None if expires_after is None else created + expires_after,
        }
        if self.directory is None:
            self._contents[file_id] = content
        else:
            write_atomic(self.directory / f"{file_id}.bin", content)
            write_atomic(self.directory / f"{file_id}.json", msgspec.json.encode(_Record(owner, obj)))
        with self._lock:
            self._objects[(owner, file_id)] = obj
            self.num_bytes += len(content)
            self._schedule(owner, obj)
        return obj

    def expire(self) -> int:
        """Delete the files whose time is up; how many."""
        now, due = self.clock(), []
        with self._lock:
            while self._expiries and self._expiries[0][0] <= now:
                due.append(heapq.heappop(self._expiries))
        num = sum(self.delete(owner, file_id, expire=False) for _, file_id, owner in due)
        self.num_expired += num
        return num

    def _schedule(self, owner: str | None, obj: dict) -> None:
        at = obj.get("expires_at")
        if isinstance(at, int) and not isinstance(at, bool):  # a record on disk that says otherwise never expires
            heapq.heappush(self._expiries, (at, obj["id"], owner))

    def get(self, owner: str | None, file_id: str) -> dict | None:
        """The file's object, or None (another owner's: None too)."""
        self.expire()
        return self._objects.get((owner, file_id))

    def content(self, owner: str | None, file_id: str) -> bytes | None:
        """The file's bytes, or None (read from the directory when there is one)."""
        self.expire()
        if (owner, file_id) not in self._objects:
            return None
        if self.directory is None:
            return self._contents[file_id]
        try:
            return (self.directory / f"{file_id}.bin").read_bytes()
        except OSError:
            log.exception("files: cannot read %s", file_id)
            return None

    def delete(self, owner: str | None, file_id: str, expire: bool = True) -> bool:
        if expire:
            self.expire()
        with self._lock:
            obj = self._objects.pop((owner, file_id), None)
            if obj is None:
                return False
            self.num_bytes -= obj["bytes"]
        self._contents.pop(file_id, None)
        if self.directory is not None:
            for suffix in (".json", ".bin"):  # the record first: a crash between leaves no file listed
                (self.directory / f"{file_id}{suffix}").unlink(missing_ok=True)
        return True

    def list_page(self, owner: str | None, query: Mapping[str, str]) -> dict:
        """The owner's files as OpenAI's cursor page (``purpose``, ``order``, ``limit``, ``after``: see above)."""
        self.expire()
        purpose = query.get("purpose")
        objects = [obj for (o, _), obj in self._objects.items() if o == owner]
        if purpose is not None:
            objects = [obj for obj in objects if obj["purpose"] == purpose]
        return cursor_page(objects, query, default_limit=MAX_LIST_LIMIT, max_limit=MAX_LIST_LIMIT, what="file")

    def _load(self) -> None:
        """The directory's files, oldest first (a record without its content, or unreadable, is skipped)."""
        assert self.directory is not None
        found = []
        for path in self.directory.glob("file-*.json"):
            try:
                record = msgspec.json.decode(path.read_bytes(), type=_Record)
            except (OSError, msgspec.MsgspecError):
                log.warning("files: skipping the unreadable record %s", path)
                continue
            file_id = record.object.get("id", "")
            if not _FILE_ID.fullmatch(str(file_id)) or not (self.directory / f"{file_id}.bin").exists():
                log.warning("files: skipping %s (no content beside it)", path)
                continue
            found.append(record)
        for record in sorted(found, key=lambda r: (r.object.get("created_at", 0), r.object["id"])):
            self._objects[(record.owner, record.object["id"])] = record.object
            self.num_bytes += int(record.object.get("bytes", 0))
            self._schedule(record.owner, record.object)


def write_atomic(path: Path, data: bytes) -> None:
    """``data`` at ``path``, whole or not at all: written to a temporary name beside it, then renamed."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
