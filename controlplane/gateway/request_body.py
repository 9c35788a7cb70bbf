"""A request's body, read under a size cap and a deadline: what every gateway route that takes a body reads it with.

A body declared (``content-length``) or found larger than the cap is a 413 before more of it is read; one that has
not arrived within the deadline (a slow or stalled client) raises ReadTimeout, answered 408 and the connection
closed (``read_timeout_response``; ``answered`` replies to either, and to a refusal).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.types import Message

from controlplane.frontend import FrontendError
from controlplane.gateway.errors import error_response, http_error_response
from transport.messages import ErrorCode


class ReadTimeout(Exception):
    """The request body did not arrive within the deadline."""

    def __init__(self, timeout_s: float) -> None:
        super().__init__(timeout_s)
        self.timeout_s = timeout_s


async def read_body(request: Request, limit: int, timeout_s: float) -> bytes:
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise too_large(limit)
    body = bytearray()
    with anyio.move_on_after(timeout_s) as deadline:
        async for part in request.stream():
            body += part
            if len(body) > limit:
                raise too_large(limit)
    if deadline.cancelled_caught:
        raise ReadTimeout(timeout_s)
    return bytes(body)


def replayed_body(body: bytes, after: Callable[[], Awaitable[Message]]) -> Callable[[], Awaitable[Message]]:
    """An ASGI ``receive`` that gives ``body`` as the whole request body, then whatever ``after`` gives (the
    connection's own messages: a client's disconnect; or nothing ever)."""
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await after()

    return receive


def too_large(limit: int) -> FrontendError:
    return FrontendError(ErrorCode.OVERSIZED, f"The request body is larger than {limit} bytes")


def read_timeout_response(timeout: ReadTimeout) -> Response:
    message = f"The request body was not received within {timeout.timeout_s:g} s"
    return http_error_response(408, message, code="request_timeout", headers={"connection": "close"})


async def answered(serve) -> Response:
    """``await serve()``, or the reply to what it raised reading or refusing a request: its OpenAI error, 408 for a
    body read too slowly, 499 for a client gone."""
    try:
        return await serve()
    except FrontendError as err:
        return error_response(err)
    except ReadTimeout as timeout:
        return read_timeout_response(timeout)
    except ClientDisconnect:
        return Response(status_code=499)  # nobody is left to read it
