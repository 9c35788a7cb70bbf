"""OpenAI's error JSON, and the HTTP status each ErrorCode is answered with.

Body of every error reply (and of the SSE error event once a stream has started)::

    {"error": {"message": str, "type": str, "param": str | null, "code": str | null}}

The official ``openai`` client picks its exception class from the status alone (400 BadRequestError,
404 NotFoundError, 429 RateLimitError, >= 500 InternalServerError) and honours ``Retry-After``.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import msgspec
from starlette.responses import Response

from controlplane.frontend import FrontendError
from transport.messages import ErrorCode

DEFAULT_RETRY_AFTER_S = 1.0  # an overload refusal that names no retry time


class ErrorKind(NamedTuple):
    status: int
    type: str
    code: str | None  # OpenAI's machine-readable code, when it has one


ERROR_KINDS: dict[ErrorCode, ErrorKind] = {
    ErrorCode.MALFORMED: ErrorKind(400, "invalid_request_error", None),
    ErrorCode.OVERSIZED: ErrorKind(413, "invalid_request_error", "request_too_large"),
    ErrorCode.UNKNOWN_TYPE: ErrorKind(400, "invalid_request_error", None),
    ErrorCode.WRONG_VERSION: ErrorKind(400, "invalid_request_error", None),
    ErrorCode.INVALID_REQUEST: ErrorKind(400, "invalid_request_error", None),
    ErrorCode.PROMPT_TOO_LONG: ErrorKind(400, "invalid_request_error", "context_length_exceeded"),
    ErrorCode.UNKNOWN_MODEL: ErrorKind(404, "invalid_request_error", "model_not_found"),
    ErrorCode.OVERLOADED: ErrorKind(429, "rate_limit_error", "rate_limit_exceeded"),
    ErrorCode.NO_NODE: ErrorKind(503, "server_error", "no_node_available"),
    ErrorCode.NODE_FAILED: ErrorKind(502, "server_error", "node_failed"),
    ErrorCode.CANCELLED: ErrorKind(503, "server_error", "request_cancelled"),
    ErrorCode.INTERNAL: ErrorKind(500, "server_error", "internal_error"),
}


def error_body(err: FrontendError) -> dict:
    kind = ERROR_KINDS[err.code]
    return {"error": {"message": err.message, "type": kind.type, "param": err.param, "code": kind.code}}


def error_headers(err: FrontendError) -> dict[str, str]:
    """``Retry-After`` (whole seconds, >= 1, as HTTP requires) and ``retry-after-ms`` for an overload, and for a 503
    whose refusal says when to retry (no node serves the pool now: one may be on its way, scaled from zero)."""
    if err.code != ErrorCode.OVERLOADED and (err.code != ErrorCode.NO_NODE or err.retry_after_s is None):
        return {}
    retry_after_s = err.retry_after_s if err.retry_after_s is not None else DEFAULT_RETRY_AFTER_S
    return {
        "Retry-After": str(max(1, math.ceil(retry_after_s))),
        "retry-after-ms": str(max(0, round(retry_after_s * 1000))),
    }


def error_response(err: FrontendError) -> Response:
    return Response(
        msgspec.json.encode(error_body(err)),
        status_code=ERROR_KINDS[err.code].status,
        headers=error_headers(err),
        media_type="application/json",
    )


def http_error_body(message: str, *, code: str | None = None, type_: str = "invalid_request_error") -> dict:
    """OpenAI's error body for an error that is the HTTP server's own (routing, timeouts, bad HTTP)."""
    return {"error": {"message": message, "type": type_, "param": None, "code": code}}


def http_error_response(
    status: int, message: str, *, code: str | None = None, headers: dict[str, str] | None = None
) -> Response:
    """A routing-level error (unknown path, wrong method, timeout, server error) in the same shape."""
    type_ = "server_error" if status >= 500 else "invalid_request_error"
    body = http_error_body(message, code=code, type_=type_)
    return Response(msgspec.json.encode(body), status_code=status, headers=headers, media_type="application/json")
