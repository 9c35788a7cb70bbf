"""Property tests of the wire codec (hypothesis): whatever the frames, ``decode`` raises nothing but WireError;
every valid message of every type survives ``decode(encode(msg))`` unchanged.

Valid messages are drawn from the structs' own field types (``msgspec.inspect``), so a new message or
field is fuzzed without touching this file; SamplingParams is drawn within its bounds.
"""

from __future__ import annotations

import math

import msgspec
import msgspec.inspect as mi
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.sampling_params import (
    MAX_LOGPROBS,
    MAX_STOP_CHARS,
    MAX_STOP_STRINGS,
    MAX_TEMPERATURE,
    MAX_TOKEN_ID,
    MAX_TOKENS,
    MAX_TOP_K,
    SamplingParams,
)
from engine.structured_output import MAX_CHOICES, StructuredOutput
from transport.codec import WireError, decode, encode
from transport.messages import MESSAGE_TYPES, PROTOCOL_VERSION, ErrorCode, MsgType

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
MSGPACK_INTS = st.integers(min_value=-(2**63), max_value=2**64 - 1)

# -- valid values, from msgspec's view of each type ----------------------------------------------------

_json_like = st.recursive(
    st.none() | st.booleans() | MSGPACK_INTS | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)

# one constraint of each kind, within its bounds (whether a regex or a grammar compiles is the intake's check)
structured_outputs = st.one_of(
    st.builds(StructuredOutput, json=st.sampled_from(['{"type": "object"}', "true", '{"enum": [1, "a"]}'])),
    st.builds(StructuredOutput, json_object=st.just(True)),
    st.builds(StructuredOutput, regex=st.text(min_size=1, max_size=40)),
    st.builds(
        StructuredOutput,
        choice=st.lists(st.text(min_size=1, max_size=20), min_size=1, max_size=MAX_CHOICES // 32).map(tuple),
    ),
    st.builds(StructuredOutput, grammar=st.text(min_size=1, max_size=40)),
)
_SAMPLING_FIELDS = dict(
    temperature=st.floats(min_value=0.0, max_value=MAX_TEMPERATURE),
    top_p=st.floats(min_value=1e-6, max_value=1.0),
    top_k=st.integers(0, MAX_TOP_K),
    seed=st.none() | st.integers(0, 2**63 - 1),
    max_tokens=st.integers(1, MAX_TOKENS),
    stop=st.lists(st.text(min_size=1, max_size=MAX_STOP_CHARS // 64), max_size=MAX_STOP_STRINGS).map(tuple),
    stop_token_ids=st.lists(st.integers(0, MAX_TOKEN_ID), max_size=8).map(tuple),
    ignore_eos=st.booleans(),
    logprobs=st.none() | st.integers(0, MAX_LOGPROBS),
    presence_penalty=st.floats(-2, 2),
    frequency_penalty=st.floats(-2, 2),
    repetition_penalty=st.floats(0.01, 100),
    logit_bias=st.dictionaries(st.integers(0, MAX_TOKEN_ID), st.floats(-100, 100), max_size=4).map(
        lambda d: tuple(d.items())
    ),
    min_p=st.floats(0, 1),
    min_tokens=st.just(0),
)
sampling_params = st.builds(SamplingParams, **_SAMPLING_FIELDS) | st.builds(
    SamplingParams, **(_SAMPLING_FIELDS | {"ignore_eos": st.just(False), "structured_outputs": structured_outputs})
)  # a constraint never beside ignore_eos (nor min_tokens, allowed_token_ids: not drawn)


def strategy_for(t: mi.Type) -> st.SearchStrategy:
    """Values msgspec encodes and decodes back equal, for the msgspec type ``t``."""
    if isinstance(t, mi.StructType):
        if t.cls is SamplingParams:
            return sampling_params
        fields = {f.name: strategy_for(f.type) for f in t.fields}
        return st.fixed_dictionaries(fields).map(lambda kw, cls=t.cls: cls(**kw))
    if isinstance(t, mi.IntType):
        return MSGPACK_INTS
    if isinstance(t, mi.FloatType):
        return st.floats(allow_nan=False)
    if isinstance(t, mi.StrType):
        return st.text(max_size=30)
    if isinstance(t, mi.BytesType):
        return st.binary(max_size=30)
    if isinstance(t, mi.BoolType):
        return st.booleans()
    if isinstance(t, mi.NoneType):
        return st.none()
    if isinstance(t, mi.EnumType):
        return st.sampled_from(list(t.cls))
    if isinstance(t, mi.AnyType):
        return _json_like
    if isinstance(t, mi.ListType):
        return st.lists(strategy_for(t.item_type), max_size=4)
    if isinstance(t, mi.VarTupleType):
        return st.lists(strategy_for(t.item_type), max_size=4).map(tuple)
    if isinstance(t, mi.TupleType):
        return st.tuples(*(strategy_for(x) for x in t.item_types))
    if isinstance(t, mi.DictType):
        return st.dictionaries(strategy_for(t.key_type), strategy_for(t.value_type), max_size=4)
    if isinstance(t, mi.UnionType):
        return st.one_of(*(strategy_for(x) for x in t.types))
    raise NotImplementedError(f"no strategy for {t!r}")


def _envelope(cls) -> st.SearchStrategy:
    return strategy_for(mi.type_info(cls)).map(_with_version)


def _with_version(msg):
    msg.v = PROTOCOL_VERSION
    return msg


any_message = st.one_of(*(_envelope(cls) for cls in MESSAGE_TYPES.values()))


def _equal(a, b) -> bool:
    """== that treats -0.0/0.0 and float round trips as msgpack does (float64, exact)."""
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    return a == b


# -- the properties -------------------------------------------------------------------------------------


@FUZZ
@given(msg=any_message)
def test_every_valid_message_round_trips(msg):
    decoded, tensors = decode(encode(msg))
    assert type(decoded) is type(msg) and tensors == []
    assert _equal(decoded, msg)


def _only_wire_errors(frames) -> None:
    try:
        decode(frames)
    except WireError as e:
        assert isinstance(e.code, ErrorCode)
        assert len(e.message) <= 400


@FUZZ
@given(frames=st.lists(st.binary(max_size=64), max_size=5))
def test_random_frames_raise_only_wire_errors(frames):
    _only_wire_errors(frames)


@FUZZ
@given(msg_type=st.sampled_from(list(MsgType)) | st.integers(0, 255), body=_json_like)
def test_random_msgpack_payloads_raise_only_wire_errors(msg_type, body):
    if isinstance(body, dict) and body:
        body.setdefault("v", PROTOCOL_VERSION)
    _only_wire_errors([bytes((int(msg_type),)), msgspec.msgpack.encode(body)])


@st.composite
def mutated_frames(draw) -> list[bytes]:
    """A valid message's frames with bytes flipped, inserted, deleted, cut or nested."""
    frames = [bytes(f) for f in encode(draw(any_message))]
    payload = bytearray(frames[1])
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "insert", "delete", "truncate", "nest", "big int"]))
        at = draw(st.integers(0, len(payload)))
        if kind == "flip" and payload:
            at = min(at, len(payload) - 1)
            payload[at] ^= draw(st.integers(1, 255))
        elif kind == "insert":
            payload[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif kind == "delete":
            del payload[at : at + draw(st.integers(1, 8))]
        elif kind == "truncate":
            del payload[at:]
        elif kind == "nest":
            payload[at:at] = b"\x91" * draw(st.integers(1, 3_000))
        elif kind == "big int":
            payload[at:at] = b"\xcf\xff\xff\xff\xff\xff\xff\xff\xff"  # uint64 2**64-1
    return [frames[0], bytes(payload), *frames[2:]]


@FUZZ
@given(frames=mutated_frames())
def test_mutated_messages_raise_only_wire_errors(frames):
    _only_wire_errors(frames)


@pytest.mark.parametrize("depth", [10, 999, 2_000, 50_000])
def test_nesting_at_any_depth_raises_only_wire_errors(depth):
    _only_wire_errors([bytes((MsgType.CLIENT_GENERATE,)), b"\x91" * depth + b"\xc0"])
