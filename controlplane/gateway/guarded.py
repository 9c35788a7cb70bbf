"""A route's reply to whatever serving it raised: every gateway handler runs its work under ``guarded``.

FrontendError          → the route's error shape (OpenAI's, or Anthropic's for /v1/messages), its status
ReadTimeout            → 408 (a body read too slowly: gateway/request_body.py)
ClientGone, disconnect → 499 (nobody is left to read it)
anything else          → 500, logged with the path (quoted at most MAX_ECHOED_PATH_CHARS)
"""

from __future__ import annotations

import logging

import msgspec
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from controlplane.frontend import FrontendError
from controlplane.gateway.errors import ERROR_KINDS, error_body, error_headers
from controlplane.gateway.reply_stream import ClientGone
from controlplane.gateway.request_body import ReadTimeout, read_timeout_response
from transport.codec import clip
from transport.messages import ErrorCode

log = logging.getLogger("controlplane.gateway.app")  # the gateway's log, as before this module was split out
MAX_ECHOED_PATH_CHARS = 200  # a request path quoted back in a 404/405 or a log line


async def guarded(request: Request, serve, error_body_of=error_body) -> Response:
    """``serve()``'s reply, or the reply to what it raised: a refusal in the route's error shape (OpenAI's unless
    ``error_body_of`` says otherwise), 408 for a body read too slowly, 499 for a client gone, 500 (logged)."""
    try:
        return await serve()
    except FrontendError as err:
        return json_response(error_body_of(err), status=ERROR_KINDS[err.code].status, headers=error_headers(err))
    except ReadTimeout as timeout:
        return read_timeout_response(timeout)
    except (ClientGone, ClientDisconnect):
        return Response(status_code=499)
    except Exception:
        log.exception("gateway: unexpected error serving %s", clip(request.url.path, MAX_ECHOED_PATH_CHARS))
        return json_response(error_body_of(FrontendError(ErrorCode.INTERNAL, "Internal server error")), status=500)


def json_response(obj: dict, *, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(msgspec.json.encode(obj), status_code=status, headers=headers, media_type="application/json")
