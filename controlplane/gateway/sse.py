"""Server-sent events: the wire form of a streamed completion, and a response that always cleans up.

A stream is a sequence of ``data: <json>\\n\\n`` events ended by ``data: [DONE]\\n\\n``. A failure
after the first event cannot change the HTTP status any more, so it travels as one event whose
JSON is OpenAI's error body, followed by ``[DONE]`` (the ``openai`` client raises APIError on it).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable

import anyio
import msgspec
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from controlplane.frontend import FrontendError
from controlplane.gateway.errors import error_body
from controlplane.gateway.stream_obfuscation import obfuscated_json

DONE_EVENT = b"data: [DONE]\n\n"
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def data_event(payload: dict) -> bytes:
    return b"data: " + msgspec.json.encode(payload) + b"\n\n"


def obfuscated_event(payload: dict) -> bytes:
    """``data_event`` padded against size side channels (gateway/stream_obfuscation.py)."""
    return b"data: " + obfuscated_json(payload) + b"\n\n"


def error_event(err: FrontendError) -> bytes:
    return data_event(error_body(err))


class EventStreamResponse(StreamingResponse):
    """A text/event-stream response whose body generator is closed however the response ends.

    Unlike StreamingResponse, it listens for the client's disconnect whatever ASGI spec version the
    server speaks, and it always ``aclose()``s the body generator (shielded), so the generator's
    ``finally`` runs at once, and then awaits ``on_close`` (closing the upstream request), which
    runs even when the generator never started.
    """

    media_type = "text/event-stream"

    def __init__(
        self,
        events: AsyncGenerator[bytes, None],
        *,
        on_close: Callable[[], Awaitable[None]],
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(events, headers={**SSE_HEADERS, **(headers or {})})
        self._events = events
        self._on_close = on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            async with anyio.create_task_group() as tg:

                async def stream() -> None:
                    await self.stream_response(send)
                    tg.cancel_scope.cancel()

                tg.start_soon(stream)
                while (await receive())["type"] != "http.disconnect":
                    pass
                tg.cancel_scope.cancel()
        except* OSError:
            pass  # ASGI >= 2.4: a send to a closed connection raises OSError; the client is gone
        finally:
            with anyio.CancelScope(shield=True):
                await self._events.aclose()
                await self._on_close()
