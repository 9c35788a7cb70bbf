"""The gateway's files (OpenAI's Files API, ``/v1/files``): a batch's input, uploaded, and its output and error
files, written by the batch runner (gateway/batch_runner.py).

In memory, bounded by count and by bytes, and kept per owner (the request's API key's tenant, or the key itself:
gateway/api_keys.py), as stored responses are (gateway/response_store.py): another owner's lookup finds nothing.
An upload that would pass a bound is refused (413), never made room for by dropping another file: a file is
somebody's batch input or results. The runner's output files are kept even past the bounds, since dropping a
finished batch's results would lose work that is done; they count against the bounds, so uploads are refused
until files are deleted. A gateway restart forgets them all (as it forgets batches). Sans-IO.

A file object is OpenAI's (openai SDK ``FileObject``): ``id`` ("file-..."), ``object`` "file", ``bytes``,
``created_at``, ``filename``, ``purpose``, ``status`` "processed". A list is OpenAI's cursor page, newest first
by default (``order``), ``limit`` 1..10,000 (default 10,000), ``after`` the last id of the page before, and an
optional ``purpose`` filter.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from controlplane.frontend import FrontendError, invalid_param
from controlplane.gateway.cursor_page import cursor_page
from transport.messages import ErrorCode

UPLOAD_PURPOSES = ("batch", "user_data")  # what an upload may be for here (fine-tuning, assistants: not served)
OUTPUT_PURPOSE = "batch_output"  # the runner's output and error files
MAX_FILENAME_CHARS = 255
MAX_LIST_LIMIT = 10_000  # OpenAI's largest page of files (and its default)


@dataclass(frozen=True, slots=True)
class StoredFile:
    object: dict  # the file object
    content: bytes


class FileStore:
    """Files by (owner, id), in upload order."""

    def __init__(self, max_files: int, max_bytes: int) -> None:
        if max_files < 0 or max_bytes < 0:
            raise ValueError(f"max_files and max_bytes must be >= 0, got {max_files} and {max_bytes}")
        self.max_files = max_files
        self.max_bytes = max_bytes
        self._files: dict[tuple[str | None, str], StoredFile] = {}
        self.num_bytes = 0

    def __len__(self) -> int:
        return len(self._files)

    def upload(self, owner: str | None, filename: str, purpose: str, content: bytes) -> dict:
        """Keep an uploaded file; raises a 400 for a bad purpose or name, a 413 past the store's bounds."""
        if purpose not in UPLOAD_PURPOSES:
            raise invalid_param("purpose", f"must be one of {list(UPLOAD_PURPOSES)} here, got {purpose[:64]!r}")
        if not filename or len(filename) > MAX_FILENAME_CHARS or not filename.isprintable():
            raise invalid_param("file", f"needs a printable file name of 1..{MAX_FILENAME_CHARS} characters")
        if len(self._files) + 1 > self.max_files or self.num_bytes + len(content) > self.max_bytes:
            message = (
                f"The file store is full ({len(self._files)} files, {self.num_bytes} bytes; at most {self.max_files}"
                f" files and {self.max_bytes} bytes): delete files to make room"
            )
            raise FrontendError(ErrorCode.OVERSIZED, message, param="file")
        return self.put(owner, filename, purpose, content)

    def put(self, owner: str | None, filename: str, purpose: str, content: bytes) -> dict:
        """Keep a file whatever the bounds (the runner's results); returns its object."""
        file_id = f"file-{uuid.uuid4().hex}"
        obj = {
            "id": file_id,
            "object": "file",
            "bytes": len(content),
            "created_at": int(time.time()),
            "filename": filename,
            "purpose": purpose,
            "status": "processed",
        }
        self._files[(owner, file_id)] = StoredFile(obj, content)
        self.num_bytes += len(content)
        return obj

    def get(self, owner: str | None, file_id: str) -> StoredFile | None:
        return self._files.get((owner, file_id))

    def delete(self, owner: str | None, file_id: str) -> bool:
        stored = self._files.pop((owner, file_id), None)
        if stored is None:
            return False
        self.num_bytes -= len(stored.content)
        return True

    def list_page(self, owner: str | None, query: Mapping[str, str]) -> dict:
        """The owner's files as OpenAI's cursor page (``purpose``, ``order``, ``limit``, ``after``: see above)."""
        purpose = query.get("purpose")
        objects = [f.object for (o, _), f in self._files.items() if o == owner]
        if purpose is not None:
            objects = [obj for obj in objects if obj["purpose"] == purpose]
        return cursor_page(objects, query, default_limit=MAX_LIST_LIMIT, max_limit=MAX_LIST_LIMIT, what="file")
