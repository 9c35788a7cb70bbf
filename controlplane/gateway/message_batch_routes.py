"""Anthropic's Message Batches routes on the gateway (gateway/message_batches.py; run by gateway/batch_runner.py)::

    POST   /v1/messages/batches               {"requests": [{"custom_id", "params"}, ...]}: a new batch
    GET    /v1/messages/batches               the owner's, newest first (``limit`` 1..1000, default 20;
                                              ``before_id`` / ``after_id``: Anthropic's page)
    GET    /v1/messages/batches/{id}          one (poll it: ``processing_status``, ``request_counts``)
    DELETE /v1/messages/batches/{id}          one that ended, and its files
    POST   /v1/messages/batches/{id}/cancel   cancel one that has not ended (its requests in flight cancelled)
    GET    /v1/messages/batches/{id}/results  once it ended: its results as JSONL (``results_url``), until they are
                                              archived 29 days after its creation (then a 404, as its files are gone)

The anthropic SDK's ``client.messages.batches`` works against them (its key in ``x-api-key``). Everything is its
owner's (the API key's tenant, or the key: gateway/api_keys.py); another owner's id, or an OpenAI batch's, is a 404.
Errors are Anthropic's. A create body is read under the file upload's bounds (``files_upload_max_bytes``, and the
uploads read at once), as its requests become the batch's input file in the file store (bounded: a full store is a
413); the batch's output files are the store's too, until the batch is deleted.
"""

from __future__ import annotations

import time

import anyio
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from controlplane.frontend import FrontendError
from controlplane.gateway.anthropic_messages import error_body
from controlplane.gateway.anthropic_page import anthropic_page, page_window
from controlplane.gateway.api_keys import request_owner, request_tenant
from controlplane.gateway.batch_routes import BatchRoutes
from controlplane.gateway.batch_runner import BatchRunner
from controlplane.gateway.batches import MESSAGES_ENDPOINT, TERMINAL, Batch, read_lines
from controlplane.gateway.file_store import FileStore
from controlplane.gateway.guarded import MAX_ECHOED_PATH_CHARS, guarded, json_response
from controlplane.gateway.message_batches import (
    RESULTS_KEPT_S,
    archived_at,
    batch_id,
    message_batch_id,
    message_batch_object,
    parse_create,
    results,
)
from controlplane.gateway.request_body import read_body
from transport.codec import clip
from transport.messages import ErrorCode
from transport.trace_context import trace_headers

MAX_LIMIT = 1000  # Anthropic's bounds on a list page
DEFAULT_LIMIT = 20


class MessageBatchRoutes:
    def __init__(self, batch_routes: BatchRoutes) -> None:
        """Over OpenAI's batch routes' file store, runner and upload bounds (a create body is held as an upload is)."""
        self.files: FileStore = batch_routes.files
        self.runner: BatchRunner = batch_routes.runner
        self.upload_max_bytes = batch_routes.upload_max_bytes
        self.read_timeout_s = batch_routes.read_timeout_s
        self.uploads = batch_routes.uploads

    def routes(self) -> list[Route]:
        return [
            Route("/v1/messages/batches", self.create, methods=["POST"]),
            Route("/v1/messages/batches", self.list, methods=["GET"]),
            Route("/v1/messages/batches/{batch_id}", self.batch, methods=["GET", "DELETE"]),
            Route("/v1/messages/batches/{batch_id}/cancel", self.cancel, methods=["POST"]),
            Route("/v1/messages/batches/{batch_id}/results", self.results, methods=["GET"]),
        ]

    async def create(self, request: Request) -> Response:
        async def serve() -> Response:
            owner = request_owner(request)
            async with self.uploads:
                body = await read_body(request, self.upload_max_bytes, self.read_timeout_s)
                config = self.runner.config
                batch, content = parse_create(body, owner, config.max_requests, config.window_s)
                del body
                name = f"{message_batch_id(batch)}_input.jsonl"
                upload = self.files.upload
                obj = await anyio.to_thread.run_sync(upload, owner, name, "batch", content, RESULTS_KEPT_S)
            batch.input_file_id = obj["id"]
            batch.tenant = request_tenant(request)
            if self.runner.spans is not None:  # the batch's own span, the parent of its requests' (batch_span.py)
                self.runner.spans.begin(batch, request.headers)
            else:  # its requests' spans join the caller's trace
                batch.trace_headers = trace_headers(request.headers)
            try:
                self.runner.submit(batch)
            except FrontendError:
                await anyio.to_thread.run_sync(self.files.delete, owner, batch.input_file_id)
                raise
            return json_response(self._object(request, batch))

        return await guarded(request, serve, error_body)

    async def list(self, request: Request) -> Response:
        async def serve() -> Response:
            owned = [b for b in self.runner.owned(request_owner(request)) if b.endpoint == MESSAGES_ENDPOINT]
            newest = owned[::-1]  # newest first: before_id is newer, after_id older (gateway/anthropic_page.py)
            ids = [message_batch_id(b) for b in newest]
            start, end, more = page_window(ids, request.query_params, default_limit=DEFAULT_LIMIT, max_limit=MAX_LIMIT)
            return json_response(anthropic_page([self._object(request, b) for b in newest[start:end]], more))

        return await guarded(request, serve, error_body)

    async def batch(self, request: Request) -> Response:
        """``GET`` a batch, or ``DELETE`` one that ended (with its files)."""

        async def serve() -> Response:
            batch = self._get(request)
            if batch is None:
                return _not_found(request)
            if request.method == "DELETE":
                await self.runner.delete(batch)
                return json_response({"id": message_batch_id(batch), "type": "message_batch_deleted"})
            return json_response(self._object(request, batch))

        return await guarded(request, serve, error_body)

    async def cancel(self, request: Request) -> Response:
        async def serve() -> Response:
            batch = self._get(request)
            if batch is None:
                return _not_found(request)
            self.runner.cancel(batch)
            return json_response(self._object(request, batch))

        return await guarded(request, serve, error_body)

    async def results(self, request: Request) -> Response:
        """Its results as JSONL, once it ended (before: a 400, as there is no ``results_url`` yet)."""

        async def serve() -> Response:
            batch = self._get(request)
            if batch is None:
                return _not_found(request)
            if batch.status not in TERMINAL:
                message = f"The batch {message_batch_id(batch)} has not ended: its results are not ready"
                raise FrontendError(ErrorCode.INVALID_REQUEST, message)
            if archived_at(batch, time.time()) is not None:
                return _gone(request, "were archived")
            content = await anyio.to_thread.run_sync(self._results, batch)
            if content is None:
                return _gone(request, "are gone with a file that held them (deleted or expired)")
            return Response(content, media_type="application/binary")

        return await guarded(request, serve, error_body)

    def _results(self, batch: Batch) -> bytes | None:
        """The results file, from the input file (the requests, in order) and the output and error files; None when
        one of them is gone (expired, or deleted): the results are not made up without it."""
        files = [self.files.content(batch.owner, batch.input_file_id)]
        files += [self.files.content(batch.owner, f) for f in (batch.output_file_id, batch.error_file_id) if f]
        if any(content is None for content in files):
            return None
        lines, _ = read_lines(files[0], MESSAGES_ENDPOINT, max(batch.total, 1))
        return results(batch, [line.custom_id for line in lines], b"".join(files[1:]))

    def _get(self, request: Request) -> Batch | None:
        """The owner's message batch the path names (None: it has none of that id)."""
        own_id = batch_id(request.path_params["batch_id"])
        batch = None if own_id is None else self.runner.get(request_owner(request), own_id)
        return batch if batch is not None and batch.endpoint == MESSAGES_ENDPOINT else None

    def _object(self, request: Request, batch: Batch) -> dict:
        url = str(request.base_url).rstrip("/") + f"/v1/messages/batches/{message_batch_id(batch)}/results"
        return message_batch_object(batch, url, time.time())


def _gone(request: Request, why: str) -> Response:
    shown = clip(request.path_params["batch_id"], MAX_ECHOED_PATH_CHARS)
    message = f"The results of message batch '{shown}' {why}: they are no longer available"
    return json_response({"type": "error", "error": {"type": "not_found_error", "message": message}}, status=404)


def _not_found(request: Request) -> Response:
    shown = clip(request.path_params["batch_id"], MAX_ECHOED_PATH_CHARS)
    body = {"type": "error", "error": {"type": "not_found_error", "message": f"No message batch has the id '{shown}'"}}
    return json_response(body, status=404)
