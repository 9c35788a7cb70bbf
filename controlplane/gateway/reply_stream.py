"""A started generation's reply: whole, or streamed as one API's events; and the client's disconnect watched.

    respond(request, chunks, reply, stream, events, request_id)
        whole: every chunk into ``reply`` (``collect``), then ``reply.full_object()`` as JSON;
        streamed: the first chunk awaited (so a refusal still gets its own status), then ``events(chunks, first,
        reply)`` as SSE: ``openai_events`` (OpenAI's data events and [DONE]), ``named_events`` (Anthropic's, the
        Responses API's)
    until_disconnect(request, awaitable)
        the awaitable's result, or ClientGone as soon as the client disconnects (its work cancelled)

The frontend's iterator is always closed (``close_stream``: cancelling the request upstream unless it finished),
shielded, unless a streamed response took it over.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable
from typing import TypeVar

import anyio
import msgspec
from starlette.requests import Request
from starlette.responses import Response

from controlplane.frontend import FrontendError
from controlplane.gateway.anthropic_messages import MessagesReply
from controlplane.gateway.openai_embeddings import EmbeddingsReply
from controlplane.gateway.openai_reply import OpenAIReply
from controlplane.gateway.responses_reply import ResponsesReply
from controlplane.gateway.sse import DONE_EVENT, EventStreamResponse, data_event, error_event, obfuscated_event
from transport.messages import ErrorCode, TokenChunk

log = logging.getLogger(__name__)

T = TypeVar("T")


async def respond(
    request: Request,
    chunks: AsyncIterator[TokenChunk],
    reply,
    stream: bool,
    events,
    request_id: str,
    id_headers: tuple[str, ...] = ("x-request-id",),
):
    """The reply to a started generation: whole (``reply.full_object()``) or streamed (``events(chunks, first,
    reply)`` after the first chunk, so a refusal still gets its own status); the stream is closed unless handed over.
    ``request_id`` goes in each of the ``id_headers`` (Anthropic's API names it ``request-id``)."""
    headers = dict.fromkeys(id_headers, request_id)
    handed_over = False
    try:
        if not stream:
            await until_disconnect(request, collect(chunks, reply))
            return Response(msgspec.json.encode(reply.full_object()), headers=headers, media_type="application/json")
        first = await until_disconnect(request, next_chunk(chunks))
        handed_over = True
        return EventStreamResponse(events(chunks, first, reply), on_close=lambda: close_stream(chunks), headers=headers)
    finally:
        if not handed_over:
            await close_stream(chunks)


async def openai_events(
    chunks: AsyncIterator[TokenChunk], first: TokenChunk, reply: OpenAIReply
) -> AsyncGenerator[bytes, None]:
    event = obfuscated_event if reply.obfuscate else data_event
    try:
        for obj in reply.first_objects(first):
            yield event(obj)
        chunk = first
        while True:
            for obj in reply.chunk_objects(chunk):
                yield event(obj)
            if reply.finished:
                break
            chunk = await next_chunk(chunks)
        if reply.include_usage:
            yield event(reply.usage_object())
    except FrontendError as err:
        yield error_event(err)
    except Exception:
        log.exception("gateway: unexpected error while streaming %s", reply.base["id"])
        yield error_event(FrontendError(ErrorCode.INTERNAL, "Internal server error"))
    yield DONE_EVENT


async def named_events(
    chunks: AsyncIterator[TokenChunk], first: TokenChunk, reply: MessagesReply | ResponsesReply
) -> AsyncGenerator[bytes, None]:
    """A stream of named events, Anthropic's or the Responses API's (no [DONE]): the reply's ``start_events(first)``,
    its ``chunk_events`` of every chunk; a failure after the first event is its ``failure_events``."""
    try:
        for event in reply.start_events(first):
            yield event
        chunk = first
        while True:
            for event in reply.chunk_events(chunk):
                yield event
            if reply.finished:
                break
            chunk = await next_chunk(chunks)
    except FrontendError as err:
        for event in reply.failure_events(err):
            yield event
    except Exception:
        log.exception("gateway: unexpected error while streaming %s", reply.id)
        for event in reply.failure_events(FrontendError(ErrorCode.INTERNAL, "Internal server error")):
            yield event


async def collect(
    chunks: AsyncIterator[TokenChunk], reply: OpenAIReply | MessagesReply | ResponsesReply | EmbeddingsReply
) -> None:
    while True:
        reply.add(await next_chunk(chunks))
        if reply.finished:
            return


async def next_chunk(chunks: AsyncIterator[TokenChunk]) -> TokenChunk:
    try:
        return await anext(chunks)
    except StopAsyncIteration:
        raise FrontendError(ErrorCode.NODE_FAILED, "The generation stream ended before the request finished") from None


async def close_stream(chunks: AsyncIterator[TokenChunk]) -> None:
    """Close the frontend's iterator (cancelling the request upstream unless it finished); shielded."""
    aclose = getattr(chunks, "aclose", None)
    if aclose is None:
        return
    with anyio.CancelScope(shield=True):
        try:
            await aclose()
        except Exception:
            log.exception("gateway: closing a generation stream failed")


class ClientGone(Exception):
    """The client disconnected before its reply was ready."""


async def until_disconnect(request: Request, awaitable: Awaitable[T]) -> T:
    """Await ``awaitable``; if the client disconnects first, cancel it and raise ClientGone.

    Only after the body has been read: from then on ``receive()`` returns nothing but the disconnect.
    """
    finished, result, error = False, None, None
    async with anyio.create_task_group() as tg:

        async def watch() -> None:
            while (await request.receive())["type"] != "http.disconnect":
                pass
            tg.cancel_scope.cancel()

        tg.start_soon(watch)
        try:
            result = await awaitable
            finished = True
        except Exception as exc:  # raised outside the task group, so it is not wrapped in a group
            error = exc
        tg.cancel_scope.cancel()
    if error is not None:
        raise error
    if not finished:
        raise ClientGone
    return result
