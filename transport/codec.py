"""Encode and decode wire messages (see transport/messages.py for the frame layout).

``decode`` never raises anything but ``WireError``: a peer's garbage becomes an error code that
the caller counts and, where a reply is possible, answers with an ``ErrorReply``. Decoding validates:
a well-formed message with an invalid sampling parameter is INVALID_REQUEST and names the field;
anything else that goes wrong while decoding (msgpack nested deeper than the interpreter's recursion
limit raises RecursionError, for one) is MALFORMED.

``encode`` raises ``EncodeError`` (a TypeError) for a message that cannot be put on the wire: not a wire
struct, a value of no wire type, an integer outside msgpack's [-2**63, 2**64). A sender catches it per
message (transport/link.py), so one such message never ends a loop.
"""

from __future__ import annotations

import traceback
from collections.abc import Sequence

import msgspec

from engine.sampling_params import SamplingParamsError
from transport.messages import (
    MAX_PAYLOAD_BYTES,
    MAX_TENSOR_BYTES,
    MESSAGE_TYPES,
    PROTOCOL_VERSION,
    TYPE_OF,
    Envelope,
    ErrorCode,
    MsgType,
)

Frame = bytes | bytearray | memoryview


class WireError(Exception):
    """A message that cannot be accepted. ``request_id`` is filled when it could be read."""

    def __init__(self, code: ErrorCode, message: str, request_id: str = "", param: str | None = None) -> None:
        super().__init__(f"{code.value}: {message}")
        self.code = code
        self.message = message
        self.request_id = request_id
        self.param = param


class EncodeError(TypeError):
    """A message that cannot be encoded (the cause is chained)."""


# how a sender reports a message that raised EncodeError (transport/link.py's on_undeliverable ``why`` starts
# with it): the message's fault, not the peer's, so the peer must not be suspected for it
WHY_UNENCODABLE = "could not be encoded"


class _Header(msgspec.Struct):
    """Read first, so a wrong version is told apart from a malformed body."""

    v: int = -1
    request_id: str = ""


_encoder = msgspec.msgpack.Encoder()
_header_decoder = msgspec.msgpack.Decoder(_Header)
_decoders = {t: msgspec.msgpack.Decoder(cls) for t, cls in MESSAGE_TYPES.items()}


def encode(msg: Envelope, tensor_frames: Sequence[Frame] = ()) -> list[Frame]:
    """[type byte, payload, *tensor frames]; tensor frames are passed through without a copy.

    Raises EncodeError."""
    try:
        msg_type = TYPE_OF[type(msg)]
    except KeyError:
        raise EncodeError(f"{type(msg).__name__} is not a wire message") from None
    try:
        payload = _encoder.encode(msg)
    except Exception as e:  # OverflowError (an int out of msgpack's range), TypeError (no wire type), ...
        raise EncodeError(f"cannot encode {type(msg).__name__}: {_detail(e)}") from e
    return [bytes((msg_type,)), payload, *tensor_frames]


def decode(frames: Sequence[Frame]) -> tuple[Envelope, list[Frame]]:
    """Parse [type, payload, *tensors] into (message, tensor frames). Raises WireError, and nothing else."""
    try:
        return _decode(frames)
    except WireError:
        raise
    except Exception as e:  # RecursionError from deep nesting, MemoryError, a decoder bug: the peer's problem
        raise WireError(ErrorCode.MALFORMED, f"undecodable message: {_detail(e)}") from None


def _decode(frames: Sequence[Frame]) -> tuple[Envelope, list[Frame]]:
    if len(frames) < 2:
        raise WireError(ErrorCode.MALFORMED, f"expected at least 2 frames (type, payload), got {len(frames)}")
    type_frame, payload = frames[0], frames[1]
    if len(type_frame) != 1:
        raise WireError(ErrorCode.MALFORMED, f"type frame must be 1 byte, got {len(type_frame)}")
    if len(payload) > MAX_PAYLOAD_BYTES:
        raise WireError(ErrorCode.OVERSIZED, f"payload of {len(payload)} bytes exceeds {MAX_PAYLOAD_BYTES}")
    tensor_frames = list(frames[2:])
    if sum(len(f) for f in tensor_frames) > MAX_TENSOR_BYTES:
        raise WireError(ErrorCode.OVERSIZED, f"tensor frames exceed {MAX_TENSOR_BYTES} bytes")
    try:
        header = _header_decoder.decode(payload)
    except Exception as e:
        raise WireError(ErrorCode.MALFORMED, f"undecodable payload: {_detail(e)}") from None
    if header.v != PROTOCOL_VERSION:
        raise WireError(
            ErrorCode.WRONG_VERSION,
            f"protocol version {header.v}, this peer speaks {PROTOCOL_VERSION}",
            header.request_id,
        )
    try:
        msg_type = MsgType(type_frame[0])
    except ValueError:
        raise WireError(ErrorCode.UNKNOWN_TYPE, f"unknown message type {type_frame[0]}", header.request_id) from None
    try:
        msg = _decoders[msg_type].decode(payload)
    except msgspec.ValidationError as e:
        cause = e.__cause__
        if isinstance(cause, SamplingParamsError):  # well-formed, but a sampling parameter is out of range
            raise WireError(ErrorCode.INVALID_REQUEST, str(cause), header.request_id, cause.field) from None
        raise WireError(ErrorCode.MALFORMED, f"bad {msg_type.name} payload: {_detail(e)}", header.request_id) from None
    except Exception as e:
        raise WireError(ErrorCode.MALFORMED, f"bad {msg_type.name} payload: {_detail(e)}", header.request_id) from None
    return msg, tensor_frames


MAX_LOGGED_CHARS = 200  # peer-provided text in a log line is cut to this


def clip(text: object, limit: int = MAX_LOGGED_CHARS) -> str:
    """``str(text)`` cut to ``limit`` characters, control characters escaped (a peer's text in a log line:
    never a 4 MB log, never a forged line)."""
    text = text if isinstance(text, str) else str(text)
    shown = text[:limit]
    if not shown.isprintable():
        shown = "".join(c if c.isprintable() else repr(c)[1:-1] for c in shown)
    return shown if len(text) <= limit else f"{shown}... ({len(text)} chars)"


def clipped_traceback(error: BaseException, limit: int = MAX_LOGGED_CHARS) -> str:
    """The traceback of ``error`` with every line (frames, and messages that may quote a peer) clipped."""
    lines = "".join(traceback.format_exception(error)).splitlines()
    return "\n".join(clip(line, limit) for line in lines)


def _detail(error: BaseException) -> str:
    """What went wrong, clipped (it may quote the peer's bytes)."""
    text = str(error)
    if not isinstance(error, (msgspec.DecodeError, msgspec.ValidationError)):
        text = f"{type(error).__name__}: {text}"
    return clip(text)
