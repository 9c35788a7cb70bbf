"""The wire codec: every message round-trips; garbage becomes a WireError with the right code."""

from __future__ import annotations

import msgspec
import pytest

from engine.sampling_params import SamplingParams
from transport.codec import WireError, decode, encode
from transport.messages import (
    MAX_PAYLOAD_BYTES,
    PROTOCOL_VERSION,
    ErrorCode,
    GenerateRequest,
    KVBlocks,
    MsgType,
    TensorRef,
    TokenChunk,
)

_packer = msgspec.msgpack.Encoder()


def test_round_trip_keeps_every_field_and_the_type_byte():
    msg = GenerateRequest(request_id="r1", sent_ns=5, prompt_token_ids=[1, 2], sampling=SamplingParams(max_tokens=3),
                          arrival_ns=1, routed_ns=2)  # fmt: skip
    frames = encode(msg)
    assert frames[0] == bytes((MsgType.GENERATE,))
    decoded, tensors = decode(frames)
    assert decoded == msg and tensors == []


def test_tensor_frames_pass_through_untouched():
    blob = memoryview(bytearray(range(16)))
    msg = KVBlocks(block_hashes=[7], tensors=[TensorRef("uint8", (16,), 0)])
    frames = encode(msg, [blob])
    assert frames[2] is blob
    decoded, tensors = decode([bytes(f) for f in frames])
    assert decoded.tensors[0].shape == (16,) and bytes(tensors[0]) == bytes(range(16))


def test_request_id_is_read_even_from_a_refused_message():
    payload = _packer.encode({"v": PROTOCOL_VERSION + 1, "request_id": "abc"})
    with pytest.raises(WireError) as e:
        decode([bytes((MsgType.TOKENS,)), payload])
    assert (e.value.code, e.value.request_id) == (ErrorCode.WRONG_VERSION, "abc")


@pytest.mark.parametrize(
    ("frames", "code"),
    [
        ([b"\x0b"], ErrorCode.MALFORMED),
        ([b"", b"\x80"], ErrorCode.MALFORMED),
        ([b"\x0b", b"\xc1"], ErrorCode.MALFORMED),
        ([b"\xff", _packer.encode({"v": PROTOCOL_VERSION})], ErrorCode.UNKNOWN_TYPE),
        ([b"\x0b", _packer.encode({"v": PROTOCOL_VERSION, "token_ids": "no"})], ErrorCode.MALFORMED),
        ([b"\x0b", b"\x00" * (MAX_PAYLOAD_BYTES + 1)], ErrorCode.OVERSIZED),
    ],
)
def test_garbage_raises_only_wire_errors(frames, code):
    with pytest.raises(WireError) as e:
        decode(frames)
    assert e.value.code is code


def test_encode_refuses_non_wire_objects():
    with pytest.raises(TypeError):
        encode(TokenChunk.__new__(object))  # type: ignore[arg-type]
