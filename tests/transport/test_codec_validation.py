"""Decoding validates: an invalid sampling field is INVALID_REQUEST naming the field, and the Dispatcher hands
such a message to ``on_invalid`` (a refused request) instead of rejecting it as garbage."""

from __future__ import annotations

import pytest

from engine.sampling_params import SamplingParams
from engine.structured_output import MAX_SPEC_CHARS, StructuredOutput
from transport.codec import WireError, decode, encode
from transport.dispatch import Dispatcher
from transport.messages import ClientGenerate, ErrorCode, ErrorReply, GenerateRequest
from transport.sockets import Received

INVALID_FIELDS = [
    ("top_p", 2.0),
    ("top_p", 0.0),
    ("max_tokens", 0),
    ("temperature", -0.5),
    ("top_k", -1),
    ("seed", -1),
    ("stop", ("",)),
    ("stop_token_ids", (-3,)),
    ("logprobs", 21),
    ("presence_penalty", 2.5),
    ("frequency_penalty", float("nan")),
    ("repetition_penalty", 0.0),
    ("logit_bias", ((1, 101.0),)),
    ("logit_bias", ((-1, 1.0),)),
    ("logit_bias", ((1, 1.0), (1, 2.0))),
    ("min_p", 1.5),
    ("min_tokens", 17),  # above max_tokens (16)
    ("allowed_token_ids", (-4,)),
    ("structured_outputs", StructuredOutput()),  # no kind
    ("structured_outputs", StructuredOutput(json_object=False)),
    ("structured_outputs", StructuredOutput(regex="a", choice=("b",))),  # two kinds
    ("structured_outputs", StructuredOutput(json="true", json_object=True, grammar='start: "a"')),
    ("structured_outputs", StructuredOutput(choice=())),
    ("structured_outputs", StructuredOutput(choice=tuple(str(i) for i in range(300)))),
    ("structured_outputs", StructuredOutput(choice=("",))),
    ("structured_outputs", StructuredOutput(choice=("a" * 1025,))),
    ("structured_outputs", StructuredOutput(regex="x" * (MAX_SPEC_CHARS + 1))),
    ("structured_outputs", StructuredOutput(json="")),
    ("structured_outputs", StructuredOutput(grammar="")),
]


def _client_generate(sampling: SamplingParams, request_id: str = "r-1") -> ClientGenerate:
    return ClientGenerate(request_id=request_id, prompt="hi", sampling=sampling)


def _generate_request(sampling: SamplingParams, request_id: str = "r-1") -> GenerateRequest:
    return GenerateRequest(request_id=request_id, prompt_token_ids=[5, 6], sampling=sampling, arrival_ns=1, routed_ns=2)


MESSAGES = pytest.mark.parametrize("make", [_client_generate, _generate_request], ids=["ClientGenerate", "Generate"])


def _received(msg, peer: bytes | None = b"peer") -> Received:
    return Received(peer, [bytes(f) for f in encode(msg)], recv_ns=7)


# -- the codec ----------------------------------------------------------------------------------------


@MESSAGES
@pytest.mark.parametrize(("field", "value"), INVALID_FIELDS, ids=[f"{f}={v!r:.80}" for f, v in INVALID_FIELDS])
def test_an_invalid_sampling_field_is_an_invalid_request_naming_the_field(make, field, value):
    frames = encode(make(SamplingParams.unchecked(**{field: value})))
    with pytest.raises(WireError) as e:
        decode(frames)
    assert e.value.code is ErrorCode.INVALID_REQUEST
    assert e.value.param == field
    assert e.value.request_id == "r-1"
    assert field in e.value.message


@MESSAGES
@pytest.mark.parametrize(("field", "value"), [("ignore_eos", True), ("min_tokens", 1), ("allowed_token_ids", (5,))])
def test_a_field_beside_structured_outputs_is_an_invalid_request_naming_it(make, field, value):
    sampling = SamplingParams.unchecked(structured_outputs=StructuredOutput(regex="[0-9]"), **{field: value})
    with pytest.raises(WireError) as e:
        decode(encode(make(sampling)))
    assert (e.value.code, e.value.param) == (ErrorCode.INVALID_REQUEST, field)


@MESSAGES
def test_structured_outputs_round_trip_equal_and_are_not_compiled_here(make):
    """Well formed, each kind decodes as sent; a regex that does not compile, or a schema's text that is not JSON,
    passes the codec (the control plane's intake compiles it: backends/grammar.py)."""
    for spec in (
        StructuredOutput(json='{"type": "object"}'),
        StructuredOutput(json_object=True),
        StructuredOutput(regex="[a-"),
        StructuredOutput(choice=("yes", "no")),
        StructuredOutput(grammar="start: x"),
        StructuredOutput(json='{"a":' * 5000),
    ):
        msg = make(SamplingParams(max_tokens=3, structured_outputs=spec))
        decoded, _ = decode(encode(msg))
        assert decoded == msg and decoded.sampling.structured_outputs == spec


@MESSAGES
def test_valid_sampling_round_trips_equal(make):
    sampling = SamplingParams(
        temperature=0.7,
        top_p=0.9,
        top_k=5,
        seed=3,
        max_tokens=7,
        stop=("END",),
        stop_token_ids=(2,),
        ignore_eos=True,
        logprobs=2,
    )
    msg = make(sampling)
    decoded, tensors = decode(encode(msg))
    assert decoded == msg and tensors == []
    assert isinstance(decoded.sampling, SamplingParams) and decoded.sampling == sampling


def test_unchecked_valid_fields_decode_equal_to_checked_ones():
    sent = _client_generate(SamplingParams.unchecked(top_p=0.5, max_tokens=3, stop=("x",)))
    decoded, _ = decode(encode(sent))
    assert decoded.sampling == SamplingParams(top_p=0.5, max_tokens=3, stop=("x",))


@MESSAGES
@pytest.mark.parametrize(
    ("field", "value"),
    [("temperature", "hot"), ("max_tokens", "many"), ("stop", 5), ("structured_outputs", "regex"),
     ("structured_outputs", {"regex": 5}), ("structured_outputs", {"choice": "yes"}),
     ("structured_outputs", {"json": {"type": "object"}}), ("structured_outputs", {"json_object": "yes"})],
)  # fmt: skip
def test_a_sampling_field_of_the_wrong_type_stays_malformed(make, field, value):
    with pytest.raises(WireError) as e:
        decode(encode(make(SamplingParams.unchecked(**{field: value}))))
    assert e.value.code is ErrorCode.MALFORMED
    assert e.value.param is None
    assert e.value.request_id == "r-1"


# -- the dispatcher -----------------------------------------------------------------------------------


def _dispatcher(*, on_invalid: bool):
    handled, replies, invalid = [], [], []
    d = Dispatcher(
        {ClientGenerate: handled.append},
        reply=lambda peer, r: replies.append((peer, r)),
        name="test",
        on_invalid=(lambda peer, r: invalid.append((peer, r))) if on_invalid else None,
    )
    return d, handled, replies, invalid


def test_an_invalid_field_goes_to_on_invalid_not_to_reply_nor_the_rejection_count():
    d, handled, replies, invalid = _dispatcher(on_invalid=True)
    d.dispatch(_received(_client_generate(SamplingParams.unchecked(top_p=2.0), request_id="q-9")))
    assert handled == [] and replies == []
    ((peer, error),) = invalid
    assert peer == b"peer" and isinstance(error, ErrorReply)
    assert (error.code, error.param, error.request_id) == (ErrorCode.INVALID_REQUEST, "top_p", "q-9")
    assert "top_p" in error.message
    assert d.num_rejected == 0 and d.rejected[ErrorCode.INVALID_REQUEST] == 0
    assert d.received == {"ClientGenerate": 0}


def test_with_on_invalid_a_valid_request_is_still_handled_and_garbage_still_rejected():
    d, handled, replies, invalid = _dispatcher(on_invalid=True)
    d.dispatch(_received(_client_generate(SamplingParams(max_tokens=4), request_id="ok")))
    d.dispatch(_received(_client_generate(SamplingParams.unchecked(temperature="hot"), request_id="bad")))
    assert [i.msg.request_id for i in handled] == ["ok"] and d.received == {"ClientGenerate": 1}
    assert invalid == []
    ((peer, error),) = replies
    assert (peer, error.code, error.request_id, error.param) == (b"peer", ErrorCode.MALFORMED, "bad", None)
    assert d.rejected[ErrorCode.MALFORMED] == 1 and d.num_rejected == 1


def test_without_on_invalid_an_invalid_field_is_rejected_counted_and_answered_with_its_param():
    d, handled, replies, invalid = _dispatcher(on_invalid=False)
    d.dispatch(_received(_client_generate(SamplingParams.unchecked(max_tokens=0), request_id="q-1")))
    assert handled == [] and invalid == []
    assert d.rejected[ErrorCode.INVALID_REQUEST] == 1 and d.num_rejected == 1
    ((peer, error),) = replies
    assert peer == b"peer"
    assert (error.code, error.param, error.request_id) == (ErrorCode.INVALID_REQUEST, "max_tokens", "q-1")
