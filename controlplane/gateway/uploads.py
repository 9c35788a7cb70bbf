"""OpenAI's Uploads (``/v1/uploads``): a large file sent in parts, then completed into one File of the gateway's file
store (gateway/file_store.py), as the ``openai`` SDK's ``client.uploads.upload_file_chunked`` sends a file past a
single request's size. Sans-IO: it holds the uploads' state and their parts' sizes; the routes (gateway/
upload_routes.py) read the bodies, keep the parts' bytes (gateway/upload_parts.py: in memory, or on disk with
``--files-dir``, where a restarted gateway finds the pending uploads again: ``restore``) and put the completed file.

    create(owner, filename, purpose, bytes, mime_type)   an Upload, status "pending", expiring an hour after
    add_part(owner, upload_id, size)                     an Upload Part (at most 64 MiB, OpenAI's bound);
                                                         ``forget_part`` undoes it when its bytes were not kept
    begin_complete(owner, upload_id, part_ids)           the parts in the order named, exactly the declared bytes;
                                                         (``check_md5`` checks their content), then ``completed``
                                                         records its File, or ``abort_complete`` reopens it (the
                                                         file store refused it); meanwhile it takes no part nor a
                                                         cancel, and does not expire
    cancel(owner, upload_id)                             status "cancelled"; its parts are dropped
    take_ended()                                         the ids of the uploads ended since the last call, whose
                                                         parts' bytes the routes drop (``ended`` tells each's record)
    take_forgotten()                                     the ids of ended uploads whose record is no longer kept

Bounded: an upload declares at most ``max_upload_bytes`` (the file store's own bound: the file must fit there); the
parts of the uploads not yet completed hold at most ``max_pending_bytes`` in all (past it a part is a 413 and
nothing is lost: the upload takes the part again later) and ``MAX_PENDING`` uploads. A pending upload past its hour
expires (its parts dropped, at the next call). An ended upload's record (no parts) is kept, the newest
``MAX_ENDED``, so completing or cancelling it again says its status (with ``--files-dir`` on disk too: a restarted
gateway finds it again, ``restore_ended``). Everything is its owner's: another owner's id is unknown.
``expires_after`` (checked at create) is the completed file's (gateway/file_store.py). A difference from OpenAI:
``mime_type`` is checked for shape only (OpenAI checks it against the purpose).
"""

from __future__ import annotations

import hashlib
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from controlplane.frontend import FrontendError, invalid_param
from controlplane.gateway.file_store import check_upload
from transport.codec import clip
from transport.messages import ErrorCode

MAX_PART_BYTES = 64 * 1024 * 1024  # OpenAI's bound on one part
EXPIRES_S = 3600  # OpenAI's: an upload expires an hour after it is created
MAX_PENDING = 1000  # uploads not yet completed, over every owner
MAX_ENDED = 10_000  # ended uploads whose record (no parts) is kept
MAX_MIME_CHARS = 255
MAX_PARTS = 10_000  # the parts one upload may hold (8 GB at 1 MiB a part, OpenAI's size)


class UploadNotFound(Exception):
    """No upload of that id is its owner's."""


@dataclass(slots=True)
class _Upload:
    owner: str | None
    object: dict
    parts: dict[str, int] = field(default_factory=dict)  # part id → its size, in the order added
    num_bytes: int = 0
    completing: bool = False  # its file is being kept (begin_complete .. completed / abort_complete)
    expires_after: int | None = None  # the completed file's expiry, in seconds (None: the file store's default)


class Uploads:
    def __init__(self, max_upload_bytes: int, max_pending_bytes: int, clock: Callable[[], float]) -> None:
        self.max_upload_bytes = max_upload_bytes
        self.max_pending_bytes = max_pending_bytes
        self.clock = clock
        self._pending: dict[str, _Upload] = {}
        self._ended: OrderedDict[str, _Upload] = OrderedDict()
        self._ended_ids: list[str] = []  # ended since ``take_ended``: their parts' bytes are dropped
        self._forgotten_ids: list[str] = []  # ended records dropped (past MAX_ENDED) since ``take_forgotten``
        self.pending_bytes = 0
        self.num_expired = 0

    def restore(self, owner: str | None, obj: dict, expires_after: int | None, parts: dict[str, int]) -> None:
        """A pending upload found again at start (gateway/upload_parts.py), with its parts' sizes. One whose parts
        pass its declared bytes is ended at once (its record was not written by this gateway's rules)."""
        upload = _Upload(owner, dict(obj), dict(parts), sum(parts.values()), expires_after=expires_after)
        self._pending[obj["id"]] = upload
        self.pending_bytes += upload.num_bytes
        if upload.num_bytes > int(obj.get("bytes", 0)):
            self._end(upload, "cancelled")

    def restore_ended(self, owner: str | None, obj: dict, expires_after: int | None) -> None:
        """An ended upload's record found again at start (completed, cancelled or expired; no parts)."""
        upload = _Upload(owner, dict(obj), expires_after=expires_after)
        self._pending.pop(obj["id"], None)
        self._ended[obj["id"]] = upload
        self._ended.move_to_end(obj["id"])
        self._forget_oldest()

    def ended(self, upload_id: str) -> tuple[str | None, dict, int | None] | None:
        """An ended upload's owner, object and file expiry (None: not kept, or not ended)."""
        upload = self._ended.get(upload_id)
        return None if upload is None else (upload.owner, dict(upload.object), upload.expires_after)

    def take_forgotten(self) -> list[str]:
        """The ended uploads whose record was dropped (the oldest past ``MAX_ENDED``) since the last call."""
        forgotten, self._forgotten_ids = self._forgotten_ids, []
        return forgotten

    def take_ended(self) -> list[str]:
        """The uploads ended (completed, cancelled, expired) since the last call."""
        ended, self._ended_ids = self._ended_ids, []
        return ended

    @property
    def num_pending(self) -> int:
        """Uploads not completed, cancelled nor expired yet (those past their hour count until the next call)."""
        return len(self._pending)

    def create(
        self,
        owner: str | None,
        filename: str,
        purpose: str,
        num_bytes: int,
        mime_type: str,
        expires_after: int | None = None,
    ) -> dict:
        """A new pending Upload's object; FrontendError naming the field at fault, or a 429 while full."""
        self._expire()
        check_upload(filename, purpose, name_param="filename")  # as POST /v1/files checks them
        if not 0 <= num_bytes <= self.max_upload_bytes:
            raise invalid_param("bytes", f"must be in [0, {self.max_upload_bytes}] here, got {num_bytes}")
        if not mime_type or len(mime_type) > MAX_MIME_CHARS or "/" not in mime_type or not mime_type.isprintable():
            raise invalid_param("mime_type", f"must be a MIME type (type/subtype), got {clip(mime_type, 64)!r}")
        if len(self._pending) >= MAX_PENDING:
            message = f"{MAX_PENDING} uploads are pending here: complete or cancel one first"
            raise FrontendError(ErrorCode.OVERLOADED, message, retry_after_s=60.0)
        now = int(self.clock())
        upload_id = f"upload_{uuid.uuid4().hex}"
        obj = {"id": upload_id, "object": "upload", "bytes": num_bytes, "created_at": now, "filename": filename,
               "purpose": purpose, "status": "pending", "expires_at": now + EXPIRES_S, "file": None}  # fmt: skip
        self._pending[upload_id] = _Upload(owner, obj, expires_after=expires_after)
        return dict(obj)

    def add_part(self, owner: str | None, upload_id: str, size: int) -> dict:
        """A part of ``size`` bytes added to a pending upload; its Part object (the caller keeps its bytes, or calls
        ``forget_part``). FrontendError: too large, past the declared bytes, the pending bound (413, nothing kept), or
        the upload is not pending; UploadNotFound."""
        upload = self._open_one(owner, upload_id)
        if size > MAX_PART_BYTES:
            raise FrontendError(ErrorCode.OVERSIZED, f"a part is at most {MAX_PART_BYTES} bytes", param="data")
        if upload.num_bytes + size > upload.object["bytes"]:
            declared = upload.object["bytes"]
            raise invalid_param("data", f"the parts would hold {upload.num_bytes + size} bytes; {declared} declared")
        if len(upload.parts) >= MAX_PARTS:
            raise invalid_param("data", f"an upload holds at most {MAX_PARTS} parts")
        if self.pending_bytes + size > self.max_pending_bytes:
            message = f"the uploads in progress hold {self.pending_bytes} bytes, at most {self.max_pending_bytes}"
            raise FrontendError(ErrorCode.OVERSIZED, f"{message}: send the part again later", param="data")
        part_id = f"part_{uuid.uuid4().hex}"
        upload.parts[part_id] = size
        upload.num_bytes += size
        self.pending_bytes += size
        return {"id": part_id, "object": "upload.part", "created_at": int(self.clock()), "upload_id": upload_id}

    def forget_part(self, upload_id: str, part_id: str) -> None:
        """A part added whose bytes were not kept: as if never added (nothing, if its upload ended meanwhile)."""
        upload = self._pending.get(upload_id)
        size = None if upload is None else upload.parts.pop(part_id, None)
        if size is not None:
            upload.num_bytes -= size
            self.pending_bytes -= size

    def begin_complete(self, owner: str | None, upload_id: str, part_ids: list[str]) -> tuple[dict, int | None]:
        """The upload's object and its file's expiry, when ``part_ids`` name its parts in an order to join them:
        each once, all of them, exactly the declared bytes; FrontendError naming what is wrong; UploadNotFound. The
        upload is being completed until ``completed`` or ``abort_complete``."""
        upload = self._open_one(owner, upload_id)
        if len(set(part_ids)) != len(part_ids):
            raise invalid_param("part_ids", "names a part more than once")
        unknown = [p for p in part_ids if p not in upload.parts]
        if unknown:
            raise invalid_param("part_ids", f"names a part this upload does not have: {clip(unknown[0], 64)!r}")
        if len(part_ids) != len(upload.parts):
            raise invalid_param("part_ids", f"names {len(part_ids)} of the upload's {len(upload.parts)} parts")
        if upload.num_bytes != upload.object["bytes"]:
            message = f"the parts hold {upload.num_bytes} bytes; the upload declared {upload.object['bytes']}"
            raise invalid_param("part_ids", message)
        upload.completing = True
        return dict(upload.object), upload.expires_after

    def abort_complete(self, owner: str | None, upload_id: str) -> None:
        """The file store did not keep the file: the upload is pending again, its parts kept."""
        self._pending_one(owner, upload_id).completing = False

    def completed(self, owner: str | None, upload_id: str, file_object: dict) -> dict:
        """The upload ended as ``file_object``'s File (the file store kept it); its object."""
        upload = self._end(self._pending_one(owner, upload_id), "completed")
        upload.object["file"] = file_object
        return dict(upload.object)

    def cancel(self, owner: str | None, upload_id: str) -> dict:
        """A pending upload cancelled, its parts dropped; its object. An ended one: FrontendError saying so."""
        return dict(self._end(self._open_one(owner, upload_id), "cancelled").object)

    def require_open(self, owner: str | None, upload_id: str) -> None:
        """Raise as ``add_part`` would for an upload that is unknown, ended or being completed (before its part's
        body is read)."""
        self._open_one(owner, upload_id)

    def _open_one(self, owner: str | None, upload_id: str) -> _Upload:
        """A pending upload not being completed."""
        upload = self._pending_one(owner, upload_id)
        if upload.completing:
            raise invalid_param("upload_id", "the upload is being completed")
        return upload

    def _pending_one(self, owner: str | None, upload_id: str) -> _Upload:
        self._expire()
        upload = self._pending.get(upload_id)
        if upload is not None and upload.owner == owner:
            return upload
        ended = self._ended.get(upload_id)
        if ended is not None and ended.owner == owner:
            raise invalid_param("upload_id", f"the upload is {ended.object['status']}, not pending")
        raise UploadNotFound(upload_id)

    def _end(self, upload: _Upload, status: str) -> _Upload:
        upload_id = upload.object["id"]
        del self._pending[upload_id]
        self.pending_bytes -= upload.num_bytes
        upload.parts.clear()
        upload.num_bytes = 0
        upload.object["status"] = status
        self._ended_ids.append(upload_id)
        self._ended[upload_id] = upload
        self._forget_oldest()
        return upload

    def _forget_oldest(self) -> None:
        while len(self._ended) > MAX_ENDED:
            forgotten, _ = self._ended.popitem(last=False)
            self._forgotten_ids.append(forgotten)

    def _expire(self) -> None:
        now = self.clock()
        for upload in [u for u in self._pending.values() if u.object["expires_at"] <= now and not u.completing]:
            self._end(upload, "expired")
            self.num_expired += 1


def check_md5(content: bytes, md5: str | None) -> None:
    """A 400 naming ``md5`` unless it is the hex MD5 digest of ``content`` (nothing to check when None)."""
    if md5 is not None and hashlib.md5(content, usedforsecurity=False).hexdigest() != md5.lower():
        raise invalid_param("md5", "does not match the parts' bytes")
