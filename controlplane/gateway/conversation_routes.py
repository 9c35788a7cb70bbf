"""OpenAI's Conversations API over the gateway's ConversationStore (gateway/conversation_store.py): what the
``openai`` SDK's ``client.conversations`` and ``client.conversations.items`` call, and the Agents SDK's
``OpenAIConversationsSession`` builds on::

    POST   /v1/conversations                          {items?, metadata?} → the Conversation (at most 20 items)
    GET    /v1/conversations/{id}                     the Conversation
    POST   /v1/conversations/{id}                     {metadata} → the Conversation, its metadata replaced
    DELETE /v1/conversations/{id}                     {id, object: "conversation.deleted", deleted: true}
    POST   /v1/conversations/{id}/items               {items} → the items added, as a list (at most 20 at a time)
    GET    /v1/conversations/{id}/items               a cursor page: order (desc, OpenAI's default), limit (1..100,
                                                      default 20), after
    GET    /v1/conversations/{id}/items/{item_id}     one item
    DELETE /v1/conversations/{id}/items/{item_id}     the Conversation, without it

``POST /v1/responses`` with ``conversation`` (gateway/responses_routes.py) puts the conversation's items before its
input, and adds its input and output items once it ends. Items are the Responses API's input items: messages (a
string or text parts), ``function_call`` and ``function_call_output``; each is kept in the shape the Responses API
lists it (gateway/openai_responses.py ``input_items``) with an id of its own. vLLM does not serve this API (its pull
request #37864 was not merged); a proxy in front of vLLM does (praxis-proxy's ``openai_response_store``), as this
gateway does in front of the fleet. Unknown ids are 404s; a conversation at the store's byte bound refuses more
items with a 400 and loses none it had.
"""

from __future__ import annotations

import time

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from controlplane.frontend import FrontendError, invalid_param
from controlplane.gateway.api_keys import request_owner
from controlplane.gateway.conversation_store import Conversation, ConversationFull, ConversationStore, check_metadata
from controlplane.gateway.cursor_page import cursor_page
from controlplane.gateway.errors import http_error_response
from controlplane.gateway.guarded import MAX_ECHOED_PATH_CHARS, guarded, json_response
from controlplane.gateway.openai_responses import InputItem, item_id, parse_items
from controlplane.gateway.openai_schema import decode_body
from transport.codec import clip
from transport.messages import ErrorCode

MAX_ITEMS_AT_ONCE = 20  # OpenAI's bound on a create's or an add's items


class ConversationCreateIn(msgspec.Struct, kw_only=True):
    items: list[InputItem] | None = None
    metadata: dict[str, str] | None = None


class ConversationUpdateIn(msgspec.Struct, kw_only=True):
    metadata: dict[str, str] | None  # required, as OpenAI's update requires it (null: none)


class ItemsCreateIn(msgspec.Struct, kw_only=True):
    items: list[InputItem]


_CREATE = msgspec.json.Decoder(ConversationCreateIn)
_UPDATE = msgspec.json.Decoder(ConversationUpdateIn)
_ITEMS = msgspec.json.Decoder(ItemsCreateIn)


class ConversationRoutes:
    """The handlers, over the gateway's body reader (gateway/app.py Gateway.read_body)."""

    def __init__(self, read_body, store: ConversationStore) -> None:
        self.read_body = read_body
        self.store = store

    def routes(self) -> list[Route]:
        return [
            Route("/v1/conversations", self.create, methods=["POST"]),
            Route("/v1/conversations/{conversation_id}", self.one, methods=["GET", "POST", "DELETE"]),
            Route("/v1/conversations/{conversation_id}/items", self.items, methods=["GET", "POST"]),
            Route("/v1/conversations/{conversation_id}/items/{item_id}", self.item, methods=["GET", "DELETE"]),
        ]

    async def create(self, request: Request) -> Response:
        async def serve() -> Response:
            if self.store.max_conversations == 0:
                raise FrontendError(ErrorCode.INVALID_REQUEST, "this gateway keeps no conversations (turned off)")
            body = decode_body(_CREATE, await self.read_body(request))
            metadata = check_metadata(body.metadata)
            items = _items(body.items or [])
            conversation = Conversation(item_id("conv"), int(time.time()), metadata)
            try:
                self.store.create(request_owner(request), conversation, items)
            except ConversationFull as full:
                raise invalid_param("items", str(full)) from None
            return json_response(conversation.object())

        return await guarded(request, serve)

    async def one(self, request: Request) -> Response:
        """GET a conversation, POST its new metadata, or DELETE it."""
        conversation_id = request.path_params["conversation_id"]
        owner = request_owner(request)

        async def serve() -> Response:
            if request.method == "DELETE":
                if not self.store.delete(owner, conversation_id):
                    return _no_conversation(conversation_id)
                return json_response({"id": conversation_id, "object": "conversation.deleted", "deleted": True})
            if request.method == "POST":
                body = decode_body(_UPDATE, await self.read_body(request))
                try:
                    conversation = self.store.set_metadata(owner, conversation_id, check_metadata(body.metadata))
                except ConversationFull as full:
                    raise invalid_param("metadata", str(full)) from None
            else:
                conversation = self.store.get(owner, conversation_id)
            return _no_conversation(conversation_id) if conversation is None else json_response(conversation.object())

        return await guarded(request, serve)

    async def items(self, request: Request) -> Response:
        """GET a page of a conversation's items, or POST (add) new ones."""
        conversation_id = request.path_params["conversation_id"]
        owner = request_owner(request)

        async def serve() -> Response:
            if request.method == "GET":
                conversation = self.store.get(owner, conversation_id)
                if conversation is None:
                    return _no_conversation(conversation_id)
                page = cursor_page(
                    conversation.items, request.query_params, default_limit=20, max_limit=100, what="item of it"
                )
                return json_response(page)
            body = decode_body(_ITEMS, await self.read_body(request))
            items = _items(body.items)
            if not items:
                raise invalid_param("items", "must hold at least one item")
            try:
                conversation = self.store.add_items(owner, conversation_id, items)
            except ConversationFull as full:
                raise invalid_param("items", str(full)) from None
            if conversation is None:
                return _no_conversation(conversation_id)
            page = {"object": "list", "data": list(items), "first_id": items[0]["id"], "last_id": items[-1]["id"]}
            return json_response({**page, "has_more": False})

        return await guarded(request, serve)

    async def item(self, request: Request) -> Response:
        """GET one item of a conversation, or DELETE it (the reply: the conversation)."""
        conversation_id = request.path_params["conversation_id"]
        wanted = request.path_params["item_id"]
        owner = request_owner(request)
        if request.method == "DELETE":
            found = self.store.delete_item(owner, conversation_id, wanted)
            if found is None:
                return _no_conversation(conversation_id)
            return _no_item(wanted) if found is False else json_response(found.object())
        conversation = self.store.get(owner, conversation_id)
        if conversation is None:
            return _no_conversation(conversation_id)
        item = conversation.item(wanted)
        return _no_item(wanted) if item is None else json_response(item)


def _items(raw: list[InputItem]) -> tuple[dict, ...]:
    if len(raw) > MAX_ITEMS_AT_ONCE:
        raise invalid_param("items", f"holds at most {MAX_ITEMS_AT_ONCE} items at a time, got {len(raw)}")
    return parse_items(raw)


def _no_conversation(conversation_id: str) -> Response:
    shown = clip(conversation_id, MAX_ECHOED_PATH_CHARS)
    return http_error_response(404, f"No conversation has the id '{shown}'", code="not_found")


def _no_item(item: str) -> Response:
    shown = clip(item, MAX_ECHOED_PATH_CHARS)
    return http_error_response(404, f"The conversation has no item of id '{shown}'", code="not_found")
