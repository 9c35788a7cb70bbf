"""OpenAI's stored chat completions over the gateway's ChatCompletionStore (gateway/chat_completion_store.py): what
the ``openai`` SDK's ``client.chat.completions.list / retrieve / update / delete`` and ``.messages.list`` call::

    POST   /v1/chat/completions                 with ``store: true`` (and ``metadata``): the completion is kept once
                                                it ends, whole or streamed (gateway/app.py serves the POST)
    GET    /v1/chat/completions                 a cursor page of the owner's: model, metadata[key]=value (each pair
                                                must match), order (asc, OpenAI's default here), limit (1..100,
                                                default 20), after
    GET    /v1/chat/completions/{id}            the ChatCompletion, with its metadata
    POST   /v1/chat/completions/{id}            {metadata} → the ChatCompletion, its metadata replaced (OpenAI's only
                                                update)
    DELETE /v1/chat/completions/{id}            {id, object: "chat.completion.deleted", deleted: true}
    GET    /v1/chat/completions/{id}/messages   a cursor page of its request's messages, each with an id
                                                ``<id>-<index>``: order (asc), limit (1..100, default 20), after

vLLM serves no stored chat completions (it has no ``GET /v1/chat/completions`` route): a client that lists or reads
them there gets a 404 or 405. Here unknown ids, and another owner's, are 404s.
"""

from __future__ import annotations

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from controlplane.gateway.api_keys import request_owner
from controlplane.gateway.chat_completion_store import ChatCompletionStore, messages_page
from controlplane.gateway.conversation_store import check_metadata
from controlplane.gateway.errors import http_error_response
from controlplane.gateway.guarded import MAX_ECHOED_PATH_CHARS, guarded, json_response
from controlplane.gateway.openai_schema import decode_body
from transport.codec import clip


class ChatCompletionUpdateIn(msgspec.Struct, kw_only=True):
    metadata: dict[str, str] | None  # required, as OpenAI's update requires it (null: none)


_UPDATE = msgspec.json.Decoder(ChatCompletionUpdateIn)


class ChatCompletionRoutes:
    """The handlers, over the gateway's body reader (gateway/app.py Gateway.read_body)."""

    def __init__(self, read_body, store: ChatCompletionStore) -> None:
        self.read_body = read_body
        self.store = store

    def routes(self) -> list[Route]:
        """The routes besides the create (``POST /v1/chat/completions``, which batches may name too)."""
        return [
            Route("/v1/chat/completions", self.list, methods=["GET"]),
            Route("/v1/chat/completions/{completion_id}", self.one, methods=["GET", "POST", "DELETE"]),
            Route("/v1/chat/completions/{completion_id}/messages", self.messages, methods=["GET"]),
        ]

    def keep(self, owner: str | None, messages: tuple[dict, ...], metadata: dict[str, str] | None):
        """The reply's ``on_done`` for a request with ``store``: the ended completion kept with its metadata."""

        def done(obj: dict) -> None:
            self.store.put(owner, {**obj, "metadata": dict(metadata or {})}, messages)

        return done

    async def list(self, request: Request) -> Response:
        async def serve() -> Response:
            return json_response(self.store.page(request_owner(request), request.query_params))

        return await guarded(request, serve)

    async def one(self, request: Request) -> Response:
        """GET a stored completion, POST its new metadata, or DELETE it."""
        completion_id = request.path_params["completion_id"]
        owner = request_owner(request)

        async def serve() -> Response:
            if request.method == "DELETE":
                if not self.store.delete(owner, completion_id):
                    return _no_completion(completion_id)
                return json_response({"id": completion_id, "object": "chat.completion.deleted", "deleted": True})
            if request.method == "POST":
                body = decode_body(_UPDATE, await self.read_body(request))
                obj = self.store.set_metadata(owner, completion_id, check_metadata(body.metadata))
            else:
                stored = self.store.get(owner, completion_id)
                obj = None if stored is None else stored.object
            return _no_completion(completion_id) if obj is None else json_response(obj)

        return await guarded(request, serve)

    async def messages(self, request: Request) -> Response:
        completion_id = request.path_params["completion_id"]

        async def serve() -> Response:
            stored = self.store.get(request_owner(request), completion_id)
            if stored is None:
                return _no_completion(completion_id)
            return json_response(messages_page(stored, request.query_params))

        return await guarded(request, serve)


def _no_completion(completion_id: str) -> Response:
    shown = clip(completion_id, MAX_ECHOED_PATH_CHARS)
    return http_error_response(404, f"No stored chat completion has the id '{shown}'", code="not_found")
