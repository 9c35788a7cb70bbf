"""OpenAI's Files and Batch routes on the gateway (file_store.py, batches.py, batch_runner.py)::

    POST   /v1/files                  multipart: ``file`` (its name and bytes), ``purpose`` ("batch", "user_data")
    GET    /v1/files                  the owner's files, a cursor page (``purpose``, ``order``, ``limit``, ``after``)
    GET    /v1/files/{id}             one file's object;  DELETE: removes it
    GET    /v1/files/{id}/content     its bytes (a batch's output: JSONL)
    POST   /v1/batches                {"input_file_id", "endpoint", "completion_window": "24h", "metadata"?}
    GET    /v1/batches                the owner's batches, newest first (``limit`` 1..100, default 20; ``after``)
    GET    /v1/batches/{id}           one batch (poll it: ``status``, ``request_counts``, its output files)
    POST   /v1/batches/{id}/cancel    cancel one that has not finished (a finished one: 400)

Everything is its owner's (the API key's tenant, or the key: gateway/api_keys.py): another owner's id is a 404,
as an id that does not exist. Errors are OpenAI's JSON errors; an upload past ``files_upload_max_bytes`` is a 413
before the rest of it is read. At most ``files_upload_concurrency`` uploads are read at once (each is held in memory
while it is parsed); the others wait their turn, unread.
"""

from __future__ import annotations

import anyio
import msgspec
from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from controlplane.frontend import FrontendError, invalid_param
from controlplane.gateway.api_keys import request_owner, request_tenant
from controlplane.gateway.batch_runner import BatchRunner
from controlplane.gateway.batches import MESSAGES_ENDPOINT, Batch, parse_create
from controlplane.gateway.cursor_page import cursor_page
from controlplane.gateway.errors import error_response, http_error_response
from controlplane.gateway.file_store import FileStore, expires_after_s
from controlplane.gateway.multipart_form import multipart_form
from controlplane.gateway.request_body import answered, read_body
from transport.codec import clip
from transport.trace_context import trace_headers


class BatchRoutes:
    def __init__(
        self,
        files: FileStore,
        runner: BatchRunner,
        *,
        max_body_bytes: int,
        upload_max_bytes: int,
        read_timeout_s: float,
        upload_concurrency: int = 4,
    ) -> None:
        self.files = files
        self.runner = runner
        self.max_body_bytes = max_body_bytes
        self.upload_max_bytes = upload_max_bytes
        self.read_timeout_s = read_timeout_s
        # uploads read at once (each up to upload_max_bytes, held in memory while it is parsed): the rest wait
        self.uploads = anyio.CapacityLimiter(upload_concurrency)

    def routes(self) -> list[Route]:
        return [
            Route("/v1/files", self.upload, methods=["POST"]),
            Route("/v1/files", self.list_files, methods=["GET"]),
            Route("/v1/files/{file_id}", self.file, methods=["GET", "DELETE"]),
            Route("/v1/files/{file_id}/content", self.content, methods=["GET"]),
            Route("/v1/batches", self.create, methods=["POST"]),
            Route("/v1/batches", self.list_batches, methods=["GET"]),
            Route("/v1/batches/{batch_id}", self.batch, methods=["GET"]),
            Route("/v1/batches/{batch_id}/cancel", self.cancel, methods=["POST"]),
        ]

    async def upload(self, request: Request) -> Response:
        async with self.uploads:
            return await self._upload(request)

    async def _upload(self, request: Request) -> Response:
        async def serve() -> Response:
            body = await read_body(request, self.upload_max_bytes, self.read_timeout_s)
            shape = "an upload is a multipart/form-data body with `file` and `purpose`"
            form = await multipart_form(request, body, param="file", shape=shape, max_fields=8)
            try:
                unknown = sorted(set(form.keys()) - {"file", "purpose", *EXPIRES_FIELDS})
                if unknown:
                    field = clip(unknown[0], 64)
                    message = "is not supported here (an upload takes `file`, `purpose` and `expires_after`)"
                    raise invalid_param(field, message)
                upload, purpose = form.get("file"), form.get("purpose")
                if not isinstance(upload, UploadFile):
                    raise invalid_param("file", "is required: the file's bytes, as a multipart file part")
                if not isinstance(purpose, str):
                    raise invalid_param("purpose", "is required")
                expires = _form_expires_after(form)
                content = await upload.read()
                owner, name = request_owner(request), upload.filename or ""
                obj = await anyio.to_thread.run_sync(self.files.upload, owner, name, purpose, content, expires)
            finally:
                await form.close()
            return _json(obj)

        return await answered(serve)

    async def list_files(self, request: Request) -> Response:
        async def serve() -> Response:
            return _json(self.files.list_page(request_owner(request), request.query_params))

        return await answered(serve)

    async def file(self, request: Request) -> Response:
        file_id = request.path_params["file_id"]
        owner = request_owner(request)
        if request.method == "DELETE":
            if await anyio.to_thread.run_sync(self.files.delete, owner, file_id):
                return _json({"id": file_id, "object": "file", "deleted": True})
        else:
            obj = self.files.get(owner, file_id)
            if obj is not None:
                return _json(obj)
        return _not_found("file", file_id)

    async def content(self, request: Request) -> Response:
        file_id = request.path_params["file_id"]
        content = await anyio.to_thread.run_sync(self.files.content, request_owner(request), file_id)
        if content is None:
            return _not_found("file", file_id)
        return Response(content, media_type="application/octet-stream")

    async def create(self, request: Request) -> Response:
        async def serve() -> Response:
            owner = request_owner(request)
            batch = parse_create(
                await read_body(request, self.max_body_bytes, self.read_timeout_s),
                owner,
                window_s=self.runner.config.window_s,
            )
            obj = self.files.get(owner, batch.input_file_id)
            if obj is None:
                raise invalid_param("input_file_id", f"no file has the id {clip(batch.input_file_id, 64)!r}")
            if obj["purpose"] != "batch":
                raise invalid_param("input_file_id", f"the file's purpose is {obj['purpose']!r}, not 'batch'")
            batch.tenant = request_tenant(request)
            if self.runner.spans is not None:  # the batch's own span, the parent of its requests' (batch_span.py)
                self.runner.spans.begin(batch, request.headers)
            else:  # its requests' spans join the caller's trace
                batch.trace_headers = trace_headers(request.headers)
            self.runner.submit(batch)
            return _json(batch.object())

        return await answered(serve)

    async def list_batches(self, request: Request) -> Response:
        owned = [b.object() for b in self.runner.owned(request_owner(request)) if b.endpoint != MESSAGES_ENDPOINT]

        async def serve() -> Response:
            return _json(cursor_page(owned, request.query_params, default_limit=20, max_limit=100, what="batch"))

        return await answered(serve)

    async def batch(self, request: Request) -> Response:
        batch_id = request.path_params["batch_id"]
        batch = self._get(request, batch_id)
        return _not_found("batch", batch_id) if batch is None else _json(batch.object())

    async def cancel(self, request: Request) -> Response:
        batch_id = request.path_params["batch_id"]
        batch = self._get(request, batch_id)
        if batch is None:
            return _not_found("batch", batch_id)
        try:
            self.runner.cancel(batch)
        except FrontendError as err:
            return error_response(err)
        return _json(batch.object())

    def _get(self, request: Request, batch_id: str) -> Batch | None:
        """The owner's OpenAI batch of that id (an Anthropic message batch is that API's: message_batch_routes.py)."""
        batch = self.runner.get(request_owner(request), batch_id)
        return None if batch is None or batch.endpoint == MESSAGES_ENDPOINT else batch


EXPIRES_FIELDS = ("expires_after[anchor]", "expires_after[seconds]")  # how the openai SDK sends a nested field


def _form_expires_after(form) -> int | None:
    """An upload's ``expires_after`` in seconds (None: not given); a 400 naming it when malformed."""
    anchor, seconds = (form.get(name) for name in EXPIRES_FIELDS)
    if anchor is None and seconds is None:
        return None
    number = int(seconds) if isinstance(seconds, str) and seconds.isdigit() and len(seconds) < 12 else seconds
    return expires_after_s(anchor, number, "expires_after")


def _json(obj: dict) -> Response:
    return Response(msgspec.json.encode(obj), media_type="application/json")


def _not_found(what: str, object_id: str) -> Response:
    return http_error_response(404, f"No {what} has the id '{clip(object_id, 200)}'", code="not_found")
