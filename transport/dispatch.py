"""``{type: handler}`` dispatch of received messages, with rejection counting and error replies.

    Received ─► decode ─┬─ WireError ──────────► count[code], reply ErrorReply(code)   (where possible)
                        ├─ INVALID_REQUEST ────► on_invalid(peer, ErrorReply) when given (a refused request,
                        │                        not a malformed message); else as any WireError
                        ├─ no handler for type ─► count[UNKNOWN_TYPE], reply ErrorReply
                        └─ handler(Incoming) ──┬─ ok
                                               └─ raises ─► log, count[INTERNAL], reply ErrorReply(INTERNAL)

Handlers are synchronous: they update core state and queue messages in mailboxes; they never wait.
Nothing a peer sends can end the loop that calls ``dispatch``: ``dispatch`` itself never raises
(an exception of ``on_invalid`` or of the reply path is logged and counted as INTERNAL too).
Text a peer chose (messages, ids, exception texts that quote them) is logged through ``clip``, never whole.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from transport.codec import Frame, WireError, clip, clipped_traceback, decode
from transport.messages import Envelope, ErrorCode, ErrorReply
from transport.sockets import Received

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Incoming:
    """A decoded message and where it came from."""

    peer: bytes | None  # ROUTER identity; None on a DEALER
    msg: Any  # an Envelope subclass, the one the handler is registered for
    tensor_frames: list[Frame]
    recv_ns: int


Handler = Callable[[Incoming], None]
ReplyFn = Callable[[bytes | None, ErrorReply], None]


class Dispatcher:
    """Routes each decoded message to the handler registered for its struct type.

    ``reply`` sends an ErrorReply back to the peer (None: no reply is possible on this socket).
    ``on_invalid`` takes a well-formed message with an invalid field (a sampling parameter out of range)
    instead of ``reply``, so the owner can count it as a refused request.
    ``rejected`` counts refused messages by ErrorCode (malformed, oversized, unknown type, wrong
    version, internal); ``received`` counts accepted ones by struct name. Plain dicts: an exporter in
    observe/ publishes them.
    """

    def __init__(
        self,
        handlers: Mapping[type[Envelope], Handler],
        reply: ReplyFn | None = None,
        name: str = "",
        on_invalid: ReplyFn | None = None,
    ) -> None:
        self._handlers = dict(handlers)
        self._reply = reply
        self._on_invalid = on_invalid
        self.name = name
        self.rejected: dict[ErrorCode, int] = dict.fromkeys(ErrorCode, 0)
        self.received: dict[str, int] = {cls.__name__: 0 for cls in self._handlers}
        self.num_replies_dropped = 0  # ErrorReplies the reply path refused (a full outbox)

    def dispatch(self, received: Received) -> None:
        try:
            self._dispatch(received)
        except Exception as e:  # a bug of ours (on_invalid, counting): still not the end of the read loop
            log.error("%s: dispatching a message failed:\n%s", self.name, clipped_traceback(e))
            self.rejected[ErrorCode.INTERNAL] += 1

    def _dispatch(self, received: Received) -> None:
        try:
            msg, tensor_frames = decode(received.frames)
        except WireError as e:
            if e.code is ErrorCode.INVALID_REQUEST and self._on_invalid is not None:
                error = ErrorReply(request_id=e.request_id, code=e.code, message=e.message, param=e.param)
                self._on_invalid(received.peer, error)
            else:
                self._reject(received.peer, e.code, e.message, e.request_id, e.param)
            return
        handler = self._handlers.get(type(msg))
        if handler is None:
            self._reject(
                received.peer,
                ErrorCode.UNKNOWN_TYPE,
                f"{type(msg).__name__} is not accepted on this socket",
                msg.request_id,
            )
            return
        self.received[type(msg).__name__] += 1
        try:
            handler(Incoming(received.peer, msg, tensor_frames, received.recv_ns))
        except Exception as e:
            log.error("%s: handler for %s failed:\n%s", self.name, type(msg).__name__, clipped_traceback(e))
            self._reject(
                received.peer, ErrorCode.INTERNAL, f"internal error handling {type(msg).__name__}", msg.request_id
            )

    def _reject(
        self, peer: bytes | None, code: ErrorCode, message: str, request_id: str, param: str | None = None
    ) -> None:
        self.rejected[code] += 1
        log.debug("%s: rejected a message from %r: %s: %s", self.name, peer, code.value, clip(message))
        if self._reply is None:
            return
        try:
            self._reply(peer, ErrorReply(request_id=request_id, code=code, message=message, param=param))
        except Exception as e:  # the reply path failing (full outbox) must not end the loop either
            self.num_replies_dropped += 1
            log.debug("%s: could not send an ErrorReply: %s", self.name, clip(repr(e)))

    @property
    def num_rejected(self) -> int:
        return sum(self.rejected.values())
