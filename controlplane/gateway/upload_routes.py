"""OpenAI's Uploads routes on the gateway (gateway/uploads.py holds their state)::

    POST /v1/uploads                    {"bytes", "filename", "mime_type", "purpose", "expires_after"?} → the Upload
    POST /v1/uploads/{id}/parts         multipart: ``data`` (at most 64 MiB) → the Upload Part
    POST /v1/uploads/{id}/complete      {"part_ids": [...], "md5"?} → the Upload, completed, with its File
    POST /v1/uploads/{id}/cancel        → the Upload, cancelled

The completed file goes into the gateway's file store under the store's own checks and bounds (gateway/
file_store.py: a full store is a 413 and the upload stays pending, its parts kept), and is a File like one sent to
``POST /v1/files``: a batch may name it. A part's body is read under the part's bound, and at most the file
routes' ``files_upload_concurrency`` bodies are read at once (gateway/batch_routes.py: each is held in memory).
The parts' bytes are kept by gateway/upload_parts.py: in memory, or with ``--files-dir`` on disk, where a restarted
gateway finds the pending uploads again (their parts too). A part whose bytes could not be kept (a full disk) is
undone, and its request fails: sent again, it is kept. An unknown id, or another owner's, is a 404.
"""

from __future__ import annotations

import logging
import time

import anyio
import msgspec
from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from controlplane.frontend import FrontendError, invalid_param
from controlplane.gateway.api_keys import request_owner
from controlplane.gateway.errors import http_error_response
from controlplane.gateway.file_store import expires_after_s
from controlplane.gateway.guarded import json_response
from controlplane.gateway.multipart_form import MAX_FORM_FIELD_BYTES, multipart_form
from controlplane.gateway.openai_schema import decode_body
from controlplane.gateway.request_body import answered, read_body
from controlplane.gateway.upload_parts import DiskParts, MemoryParts, UploadRecord
from controlplane.gateway.uploads import MAX_PART_BYTES, UploadNotFound, Uploads, check_md5
from transport.codec import clip
from transport.messages import ErrorCode

log = logging.getLogger(__name__)


class ExpiresAfterIn(msgspec.Struct, kw_only=True):
    anchor: str
    seconds: int


class UploadCreateIn(msgspec.Struct, kw_only=True):
    bytes: int
    filename: str
    mime_type: str
    purpose: str
    expires_after: ExpiresAfterIn | None = None  # the completed file's (gateway/file_store.py)


class UploadCompleteIn(msgspec.Struct, kw_only=True):
    part_ids: list[str]
    md5: str | None = None


_CREATE = msgspec.json.Decoder(UploadCreateIn)
_COMPLETE = msgspec.json.Decoder(UploadCompleteIn)


class UploadRoutes:
    """Over the file routes (gateway/batch_routes.py BatchRoutes): their store, body bounds and upload limiter."""

    def __init__(self, file_routes, max_pending_bytes: int, directory: str | None = None) -> None:
        self.file_routes = file_routes
        self.uploads = Uploads(file_routes.files.max_bytes, max_pending_bytes, time.time)
        self.parts = MemoryParts() if directory is None else DiskParts(directory)
        for found in self.parts.load():  # a restarted gateway's uploads: pending ones, parts and all, and ended ones
            record = found.record
            if record.object.get("status") == "pending":
                self.uploads.restore(record.owner, record.object, record.expires_after, found.parts)
            else:
                self.uploads.restore_ended(record.owner, record.object, record.expires_after)
        for upload_id in self.uploads.take_forgotten():  # past the ended records' bound
            self.parts.forget_record(upload_id)

    def routes(self) -> list[Route]:
        return [
            Route("/v1/uploads", self.create, methods=["POST"]),
            Route("/v1/uploads/{upload_id}/parts", self.add_part, methods=["POST"]),
            Route("/v1/uploads/{upload_id}/complete", self.complete, methods=["POST"]),
            Route("/v1/uploads/{upload_id}/cancel", self.cancel, methods=["POST"]),
        ]

    async def create(self, request: Request) -> Response:
        async def serve() -> Response:
            routes = self.file_routes
            body = decode_body(_CREATE, await read_body(request, routes.max_body_bytes, routes.read_timeout_s))
            after = body.expires_after
            expires = None if after is None else expires_after_s(after.anchor, after.seconds, "expires_after")
            owner = request_owner(request)
            obj = self.uploads.create(owner, body.filename, body.purpose, body.bytes, body.mime_type, expires)
            try:
                await self._on_disk(self.parts.begin, obj["id"], UploadRecord(owner, obj, expires))
            except BaseException:
                self.uploads.cancel(owner, obj["id"])  # not kept: the client creates it again
                raise
            return json_response(obj)

        try:
            return await answered(serve)
        finally:
            await self.drop_ended()  # uploads that expired meanwhile

    async def add_part(self, request: Request) -> Response:
        upload_id = request.path_params["upload_id"]

        async def serve() -> Response:
            owner = request_owner(request)
            self.uploads.require_open(owner, upload_id)  # an unknown or ended one: refused before its body is read
            async with self.file_routes.uploads:  # a part's body is held in memory: a bounded number at once
                data = await self._part_data(request)
                part = self.uploads.add_part(owner, upload_id, len(data))
                try:
                    await self._on_disk(self.parts.put, upload_id, part["id"], data)
                except BaseException as error:  # undone even while cancelled: a part file left behind would be
                    self.uploads.forget_part(upload_id, part["id"])  # found at restart, a part no client can name
                    with anyio.CancelScope(shield=True):
                        await anyio.to_thread.run_sync(self.parts.forget, upload_id, part["id"])
                    if isinstance(error, Exception):
                        self.uploads.require_open(owner, upload_id)  # ended meanwhile: say so (400), not a 500
                    raise
            return json_response(part)

        return await self._known(upload_id, serve)

    async def _part_data(self, request: Request) -> bytes:
        body = await read_body(request, MAX_PART_BYTES + MAX_FORM_FIELD_BYTES, self.file_routes.read_timeout_s)
        shape = "a part is a multipart/form-data body with `data`"
        form = await multipart_form(request, body, param="data", shape=shape, max_fields=4)
        try:
            data = form.get("data")
            if not isinstance(data, UploadFile):
                raise invalid_param("data", "is required: the part's bytes, as a multipart file part")
            return await data.read()
        finally:
            await form.close()

    async def complete(self, request: Request) -> Response:
        upload_id = request.path_params["upload_id"]

        async def serve() -> Response:
            routes = self.file_routes
            body = decode_body(_COMPLETE, await read_body(request, routes.max_body_bytes, routes.read_timeout_s))
            owner = request_owner(request)
            upload, expires = self.uploads.begin_complete(owner, upload_id, body.part_ids)
            try:
                content = await self._on_disk(self.parts.content, upload_id, body.part_ids)
                check_md5(content, body.md5)
                name, purpose = upload["filename"], upload["purpose"]
                file_object = await anyio.to_thread.run_sync(
                    routes.files.upload, owner, name, purpose, content, expires
                )
            except BaseException:
                self.uploads.abort_complete(owner, upload_id)  # pending again: it may be completed later
                raise
            return json_response(self.uploads.completed(owner, upload_id, file_object))

        return await self._known(upload_id, serve)

    async def cancel(self, request: Request) -> Response:
        upload_id = request.path_params["upload_id"]

        async def serve() -> Response:
            return json_response(self.uploads.cancel(request_owner(request), upload_id))

        return await self._known(upload_id, serve)

    async def _known(self, upload_id: str, serve) -> Response:
        try:
            return await answered(serve)
        except UploadNotFound:
            return http_error_response(404, f"No upload has the id '{clip(upload_id, 200)}'", code="not_found")
        finally:
            await self.drop_ended()

    async def _on_disk(self, call, *args):
        """``call(*args)`` on the parts' store, in a worker thread; an OSError (a full disk) is a logged 500 in
        OpenAI's shape, saying the request may be sent again (the caller undoes what it did first)."""
        try:
            return await anyio.to_thread.run_sync(call, *args)
        except OSError as e:
            log.error("uploads: %s failed: %s", call.__name__, e)
            raise FrontendError(ErrorCode.INTERNAL, f"the upload's bytes could not be kept ({e}): send it again") from e

    async def drop_ended(self) -> None:
        """Keep the ended records and drop the parts' bytes of the uploads ended (completed, cancelled, expired) since
        the last call, and drop the ended records past their bound, even while the request is being cancelled (on
        disk, a part left behind would be found pending at restart). A disk error is logged: the upload ended all the
        same, and a restart finds it pending (its parts kept) until it expires."""
        with anyio.CancelScope(shield=True):
            for upload_id in self.uploads.take_ended():
                ended = self.uploads.ended(upload_id)
                if ended is None:  # its record dropped already (past the bound): its parts go all the same
                    await anyio.to_thread.run_sync(self.parts.drop, upload_id)
                    continue
                try:
                    record = UploadRecord(*ended, ended_at=time.time())
                    await anyio.to_thread.run_sync(self.parts.end, upload_id, record)
                except OSError as e:
                    log.error("uploads: the end of %s could not be recorded: %s", upload_id, e)
            for upload_id in self.uploads.take_forgotten():
                await anyio.to_thread.run_sync(self.parts.forget_record, upload_id)
