"""Every integer and list a client controls is bounded, with an error naming the field; an error never
quotes a huge value back whole."""

from __future__ import annotations

import msgspec
import pytest

from engine.sampling_params import (
    MAX_STOP_CHARS,
    MAX_STOP_STRINGS,
    MAX_STOP_TOKEN_IDS,
    MAX_TEMPERATURE,
    SamplingParams,
    SamplingParamsError,
)

INT32_MAX = 2**31 - 1

TOO_BIG = [
    ("max_tokens", 2**31),
    ("max_tokens", 2**64),
    ("max_tokens", 2**64 - 1),
    ("top_k", 2**31),
    ("top_k", 2**64),
    ("seed", 2**63),
    ("seed", 2**64),
    ("temperature", MAX_TEMPERATURE * 1.5),
    ("temperature", 1e308),
    ("stop_token_ids", (2**31,)),
    ("stop_token_ids", (2**64,)),
    ("stop_token_ids", (1, 2, -(2**64))),
    ("stop", ("x",) * (MAX_STOP_STRINGS + 1)),
    ("stop", ("x" * (MAX_STOP_CHARS + 1),)),
    ("stop", ("ok",) * 200_000),
    ("stop_token_ids", tuple(range(MAX_STOP_TOKEN_IDS + 1))),
    ("logprobs", 2**64),
]


@pytest.mark.parametrize(("field", "value"), TOO_BIG, ids=[f"{f}-{i}" for i, (f, _) in enumerate(TOO_BIG)])
def test_a_value_past_its_bound_is_refused_naming_the_field(field, value):
    with pytest.raises(SamplingParamsError) as info:
        SamplingParams(**{field: value})
    assert info.value.field == field
    assert len(str(info.value)) < 200  # the value is quoted cut, never whole


AT_THE_BOUND = [
    ("max_tokens", INT32_MAX),
    ("top_k", INT32_MAX),
    ("seed", 2**63 - 1),
    ("temperature", MAX_TEMPERATURE),
    ("stop_token_ids", (0, INT32_MAX)),
    ("stop", ("y" * MAX_STOP_CHARS,) * MAX_STOP_STRINGS),
    ("stop_token_ids", tuple(range(MAX_STOP_TOKEN_IDS))),
]


@pytest.mark.parametrize(("field", "value"), AT_THE_BOUND, ids=[f"{f}-{i}" for i, (f, _) in enumerate(AT_THE_BOUND)])
def test_a_value_at_its_bound_is_accepted_and_encodes(field, value):
    params = SamplingParams(**{field: value})
    assert getattr(params, field) == value
    assert msgspec.msgpack.decode(msgspec.msgpack.encode(params), type=SamplingParams) == params


# what msgpack can carry (integers in [-2**63, 2**64)); the rest cannot reach a decoder (test_codec_edges.py)
def _fits_msgpack(value) -> bool:
    if isinstance(value, tuple):
        return all(map(_fits_msgpack, value))
    return not isinstance(value, int) or -(2**63) <= value < 2**64


ON_THE_WIRE = [(f, v) for f, v in TOO_BIG if _fits_msgpack(v)]


@pytest.mark.parametrize(("field", "value"), ON_THE_WIRE, ids=[f"{f}-{i}" for i, (f, _) in enumerate(ON_THE_WIRE)])
def test_decoding_checks_the_same_bounds(field, value):
    payload = msgspec.msgpack.encode({field: value})
    with pytest.raises(msgspec.ValidationError) as info:
        msgspec.msgpack.decode(payload, type=SamplingParams)
    assert isinstance(info.value.__cause__, SamplingParamsError) and info.value.__cause__.field == field


def test_wrong_kinds_are_refused_naming_the_field():
    with pytest.raises(SamplingParamsError) as info:
        SamplingParams(stop_token_ids=5)  # type: ignore[arg-type]
    assert info.value.field == "stop_token_ids"
    with pytest.raises(SamplingParamsError) as info:
        SamplingParams(ignore_eos="yes")  # type: ignore[arg-type]
    assert info.value.field == "ignore_eos"


def test_a_huge_integer_is_described_not_printed():
    with pytest.raises(SamplingParamsError) as info:
        SamplingParams(max_tokens=10**5000)
    assert "bits" in str(info.value) and len(str(info.value)) < 200
