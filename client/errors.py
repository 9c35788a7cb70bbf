"""The typed errors of the ZeroMQ client: one class per wire ErrorCode, plus the client's own (a timeout, a
control plane that restarted or vanished)."""

from __future__ import annotations

from transport.messages import ErrorCode, ErrorReply


class ZooError(Exception):
    """A request refused or failed by the fleet; ``code`` is the wire ErrorCode, ``param`` the request field at
    fault when the refusal names one (as an OpenAI error's ``param``), else None."""

    code: ErrorCode = ErrorCode.INTERNAL

    def __init__(
        self,
        message: str,
        *,
        code: ErrorCode | None = None,
        request_id: str = "",
        retry_after_s: float | None = None,
        param: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.request_id = request_id
        self.retry_after_s = retry_after_s
        self.param = param


class ZooInvalidRequestError(ZooError):
    code = ErrorCode.INVALID_REQUEST


class ZooPromptTooLongError(ZooInvalidRequestError):
    code = ErrorCode.PROMPT_TOO_LONG


class ZooUnknownModelError(ZooInvalidRequestError):
    code = ErrorCode.UNKNOWN_MODEL


class ZooOverloadedError(ZooError):
    """Admission control refused the request; retry after ``retry_after_s``."""

    code = ErrorCode.OVERLOADED


class ZooNoNodeError(ZooError):
    code = ErrorCode.NO_NODE


class ZooNodeFailedError(ZooError):
    """The node serving the request died, restarted or left; the request was not completed."""

    code = ErrorCode.NODE_FAILED


class ZooConnectionLostError(ZooNodeFailedError):
    """The control plane restarted (it no longer knows the request) or stopped answering; the request had
    produced tokens (or could not be sent again) and was not completed."""


class ZooCancelledError(ZooError):
    code = ErrorCode.CANCELLED


class ZooTimeoutError(ZooError, TimeoutError):
    """No message for the request within the client's timeout (the request was cancelled)."""


class ZooProtocolError(ZooError):
    """The control plane rejected our message as malformed / unknown / wrong version / oversized."""


_ERRORS: dict[ErrorCode, type[ZooError]] = {
    ErrorCode.INVALID_REQUEST: ZooInvalidRequestError,
    ErrorCode.PROMPT_TOO_LONG: ZooPromptTooLongError,
    ErrorCode.UNKNOWN_MODEL: ZooUnknownModelError,
    ErrorCode.OVERLOADED: ZooOverloadedError,
    ErrorCode.NO_NODE: ZooNoNodeError,
    ErrorCode.NODE_FAILED: ZooNodeFailedError,
    ErrorCode.CANCELLED: ZooCancelledError,
    ErrorCode.MALFORMED: ZooProtocolError,
    ErrorCode.OVERSIZED: ZooProtocolError,
    ErrorCode.UNKNOWN_TYPE: ZooProtocolError,
    ErrorCode.WRONG_VERSION: ZooProtocolError,
}


def error_from_reply(reply: ErrorReply) -> ZooError:
    cls = _ERRORS.get(reply.code, ZooError)
    return cls(
        reply.message,
        code=reply.code,
        request_id=reply.request_id,
        retry_after_s=reply.retry_after_s,
        param=reply.param,
    )
