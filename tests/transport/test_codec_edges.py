"""The codec's edges: whatever the bytes, ``decode`` raises only WireError; ``encode`` raises only EncodeError;
the Dispatcher never raises and logs a peer's text clipped."""

from __future__ import annotations

import logging

import msgspec
import pytest

from engine.sampling_params import SamplingParams
from transport import codec
from transport.codec import MAX_LOGGED_CHARS, EncodeError, WireError, clip, decode, encode
from transport.dispatch import Dispatcher
from transport.messages import (
    ClientGenerate,
    ErrorCode,
    GenerateRequest,
    Heartbeat,
    MsgType,
    Ping,
    ProbeSnapshot,
)
from transport.sockets import Received

_pack = msgspec.msgpack.encode
DEPTH = 2_000  # deeper than the interpreter's recursion limit: msgspec raises RecursionError


def _nested(depth: int = DEPTH) -> bytes:
    return b"\x91" * depth + b"\xc0"  # [[[...[nil]...]]]


def _map(**fields) -> bytes:
    """A msgpack map whose values are already-encoded msgpack (so one of them can be raw nesting)."""
    out = bytearray(b"\xde" + len(fields).to_bytes(2, "big"))
    for name, value in fields.items():
        out += _pack(name) + value
    return bytes(out)


NESTED_PAYLOADS = {
    "bare": _nested(),
    "in an ignored field": _map(v=_pack(1), request_id=_pack("r-deep"), junk=_nested()),
    "as the request id": _map(v=_pack(1), request_id=_nested()),
}


@pytest.mark.parametrize("where", list(NESTED_PAYLOADS))
@pytest.mark.parametrize("msg_type", [MsgType.CLIENT_GENERATE, MsgType.NODE_HELLO, MsgType.TOKENS, MsgType.PING])
def test_msgpack_nested_2000_deep_is_malformed(msg_type, where):
    with pytest.raises(WireError) as info:
        decode([bytes((msg_type,)), NESTED_PAYLOADS[where]])
    assert info.value.code is ErrorCode.MALFORMED
    assert len(info.value.message) < 400


def test_nesting_inside_a_free_form_field_is_malformed():
    payload = _map(v=_pack(1), request_id=_pack("r-snap"), snapshot=b"\x81\xa1k" + _nested())
    with pytest.raises(WireError) as info:
        decode([bytes((MsgType.PROBE_SNAPSHOT,)), payload])
    assert info.value.code is ErrorCode.MALFORMED  # (the header decoder already fails, skipping the nesting)
    shallow = ProbeSnapshot(request_id="ok", snapshot={"k": [[1]]})
    assert decode(encode(shallow))[0] == shallow


class _Exploding:
    def __init__(self, error: BaseException) -> None:
        self.error = error

    def decode(self, payload):
        raise self.error


@pytest.mark.parametrize("error", [ZeroDivisionError("bug"), MemoryError(), ValueError("x" * 100_000)])
def test_any_exception_while_decoding_is_malformed(monkeypatch, error):
    monkeypatch.setitem(codec._decoders, MsgType.PING, _Exploding(error))
    with pytest.raises(WireError) as info:
        decode(encode(Ping(request_id="p")))
    assert info.value.code is ErrorCode.MALFORMED and info.value.request_id == "p"
    assert len(info.value.message) <= 300
    monkeypatch.setattr(codec, "_header_decoder", _Exploding(error))
    with pytest.raises(WireError) as info:
        decode(encode(Ping(request_id="p")))
    assert info.value.code is ErrorCode.MALFORMED


@pytest.mark.parametrize("field", ["max_tokens", "top_k", "stop_token_ids", "seed"])
@pytest.mark.parametrize("msg_type", [MsgType.CLIENT_GENERATE, MsgType.GENERATE])
def test_the_largest_integer_msgpack_carries_is_an_invalid_request_naming_the_field(msg_type, field):
    value = [2**64 - 1] if field == "stop_token_ids" else 2**64 - 1
    body = {"v": 1, "request_id": "r-big", "sampling": {field: value}}
    if msg_type is MsgType.GENERATE:
        body.update(prompt_token_ids=[1], arrival_ns=0, routed_ns=0)
    else:
        body.update(prompt="x")
    with pytest.raises(WireError) as info:
        decode([bytes((msg_type,)), _pack(body)])
    assert (info.value.code, info.value.param, info.value.request_id) == (ErrorCode.INVALID_REQUEST, field, "r-big")


@pytest.mark.parametrize(
    "msg",
    [
        GenerateRequest(
            request_id="r",
            prompt_token_ids=[1],
            sampling=SamplingParams.unchecked(max_tokens=2**64),
            arrival_ns=0,
            routed_ns=0,
        ),
        ClientGenerate(request_id="r", prompt_token_ids=[2**64], sampling=SamplingParams()),
        ClientGenerate(request_id="r", prompt_token_ids=[-(2**63) - 1], sampling=SamplingParams()),
        Ping(request_id="r", sent_ns=2**64),
        Heartbeat(node_id=object()),  # type: ignore[arg-type]
    ],
    ids=["max_tokens 2**64", "prompt id 2**64", "prompt id -2**63-1", "sent_ns 2**64", "not a wire type"],
)
def test_what_cannot_be_encoded_raises_encode_error(msg):
    with pytest.raises(EncodeError) as info:
        encode(msg)
    assert isinstance(info.value, TypeError)  # what encode always raised for a non-message
    assert type(msg).__name__ in str(info.value)


def test_a_non_message_still_raises_encode_error():
    with pytest.raises(EncodeError):
        encode(SamplingParams())  # type: ignore[arg-type]


# -- the Dispatcher ------------------------------------------------------------------------------------


def _received(frames, peer: bytes | None = b"peer") -> Received:
    return Received(peer, [bytes(f) for f in frames], recv_ns=1)


def test_a_raising_on_invalid_does_not_escape_dispatch(caplog):
    def broken(peer, reply):
        raise RuntimeError("owner bug")

    d = Dispatcher({ClientGenerate: lambda i: None}, reply=lambda p, r: None, on_invalid=broken, name="t")
    bad = encode(ClientGenerate(request_id="r", prompt="x", sampling=SamplingParams.unchecked(top_k=-1)))
    d.dispatch(_received(bad))  # does not raise
    assert d.rejected[ErrorCode.INTERNAL] == 1
    assert "owner bug" in caplog.text


def test_a_raising_reply_path_is_counted_not_raised():
    def full(peer, reply):
        raise RuntimeError("outbox full")

    d = Dispatcher({Ping: lambda i: None}, reply=full, name="t")
    d.dispatch(_received([b"\x14", b"\xc1"]))
    assert d.rejected[ErrorCode.MALFORMED] == 1 and d.num_replies_dropped == 1


def test_nested_frames_are_counted_and_answered_like_any_garbage():
    replies = []
    d = Dispatcher({ClientGenerate: lambda i: None}, reply=lambda p, r: replies.append(r), name="t")
    for payload in NESTED_PAYLOADS.values():
        d.dispatch(_received([bytes((MsgType.CLIENT_GENERATE,)), payload]))
    assert d.rejected[ErrorCode.MALFORMED] == len(NESTED_PAYLOADS) == len(replies)


def test_a_handler_exception_quoting_a_peer_is_logged_clipped(caplog):
    caplog.set_level(logging.DEBUG)

    def echo(incoming):
        raise KeyError(incoming.msg.request_id)

    d = Dispatcher({Ping: echo}, reply=lambda p, r: None, name="t")
    d.dispatch(_received(encode(Ping(request_id="A" * 1_000_000))))
    assert d.rejected[ErrorCode.INTERNAL] == 1
    assert "handler for Ping failed" in caplog.text
    assert "A" * (MAX_LOGGED_CHARS + 1) not in caplog.text
    assert len(caplog.text) < 20_000


def test_clip():
    assert clip("short") == "short"
    long = clip("x" * 10_000)
    assert long.startswith("x" * MAX_LOGGED_CHARS) and "10000 chars" in long and len(long) < MAX_LOGGED_CHARS + 40
    forged = clip("ok\n2026-12-01 controlplane.server INFO node admin joined\x00\x1b[2J")
    assert "\n" not in forged and "\x00" not in forged and "\x1b" not in forged
    assert forged.startswith("ok\\n2026")
