"""The gateway reads OpenAI's response_format, vLLM's structured_outputs and guided_* into one StructuredOutput, names
the field at fault, and refuses two fields asking at once (controlplane/gateway/structured_fields.py)."""

from __future__ import annotations

import json

import pytest

from controlplane.frontend import FrontendError
from controlplane.gateway.openai_schema import parse_chat, parse_completion
from engine.structured_output import StructuredOutput
from transport.messages import ErrorCode

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
JSON = StructuredOutput(json=json.dumps(SCHEMA))
ANY = StructuredOutput(json_object=True)
SO = "structured_outputs"


def chat(**fields) -> bytes:
    return json.dumps({"messages": [{"role": "user", "content": "Hi"}], **fields}).encode()


def completion(**fields) -> bytes:
    return json.dumps({"prompt": "Hi", **fields}).encode()


def spec_of(body: bytes, *, parse=parse_chat) -> StructuredOutput | None:
    return parse(body, default_max_tokens=16).sampling.structured_outputs


@pytest.mark.parametrize(
    ("fields", "expected", "param"),
    [
        ({"response_format": {"type": "text"}}, None, None),
        ({"response_format": {"type": "json_object"}}, StructuredOutput(json_object=True), "response_format"),
        (
            {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "c", "schema": SCHEMA, "strict": True},
                }
            },
            StructuredOutput(json=json.dumps(SCHEMA)),
            "response_format",
        ),
        (
            {"response_format": {"type": "json_schema", "json_schema": {"name": "c"}}},
            StructuredOutput(json_object=True),
            "response_format",
        ),
        ({"structured_outputs": {"json": SCHEMA}}, StructuredOutput(json=json.dumps(SCHEMA)), "structured_outputs"),
        (
            {"structured_outputs": {"json": json.dumps(SCHEMA)}},
            StructuredOutput(json=json.dumps(SCHEMA)),
            "structured_outputs",
        ),
        ({"structured_outputs": {"regex": "[0-9]+"}}, StructuredOutput(regex="[0-9]+"), "structured_outputs"),
        ({"structured_outputs": {"choice": ["a", "b"]}}, StructuredOutput(choice=("a", "b")), "structured_outputs"),
        ({"structured_outputs": {"json_object": True}}, StructuredOutput(json_object=True), "structured_outputs"),
        (
            {"structured_outputs": {"grammar": 'start: "x"'}},
            StructuredOutput(grammar='start: "x"'),
            "structured_outputs",
        ),
        ({"guided_json": SCHEMA}, StructuredOutput(json=json.dumps(SCHEMA)), "guided_json"),
        ({"guided_regex": "a|b"}, StructuredOutput(regex="a|b"), "guided_regex"),
        ({"guided_choice": ["yes", "no"]}, StructuredOutput(choice=("yes", "no")), "guided_choice"),
        ({"guided_grammar": 'start: "x"'}, StructuredOutput(grammar='start: "x"'), "guided_grammar"),
    ],
)
def test_each_spelling_reaches_the_sampling_params(fields, expected, param):
    for body, parse in ((chat(**fields), parse_chat), (completion(**fields), parse_completion)):
        args = parse(body, default_max_tokens=16)
        got = args.sampling.structured_outputs
        if expected is not None and expected.json is not None:  # the schema's text is the client's bytes, re-spaced
            assert got is not None and json.loads(got.json) == json.loads(expected.json)
        else:
            assert got == expected
        assert args.structured_param == param


def test_a_schema_is_kept_as_the_clients_text_not_decoded():
    body = b'{"messages": [{"role": "user", "content": "Hi"}], "guided_json": {"type":  "object" , "x": [1,2]}}'
    assert spec_of(body).json == '{"type":  "object" , "x": [1,2]}'


@pytest.mark.parametrize(
    ("fields", "param", "words"),
    [
        ({"response_format": {"type": "json_object"}, "guided_regex": "a"}, "guided_regex", "only one of"),
        ({"structured_outputs": {"regex": "a", "choice": ["b"]}}, "structured_outputs", "exactly one"),
        ({"structured_outputs": {}}, "structured_outputs", "exactly one"),
        ({"guided_choice": []}, "guided_choice", "1 to 256"),
        ({"guided_choice": ["x"] * 257}, "guided_choice", "1 to 256"),
        ({"guided_regex": ""}, "guided_regex", "1 to 65536"),
        ({"guided_regex": "a" * 70_000}, "guided_regex", "1 to 65536"),
        ({"response_format": {"type": "xml"}}, "response_format", "type must be"),
        ({"response_format": {"type": "json_object"}, "ignore_eos": True}, "ignore_eos", "cannot be combined"),
        ({"guided_choice": ["a"], "min_tokens": 2}, "min_tokens", "cannot be combined"),
        ({"guided_choice": ["a"], "allowed_token_ids": [5]}, "allowed_token_ids", "cannot be combined"),
    ],
)
def test_refusals_name_the_field_the_client_used(fields, param, words):
    with pytest.raises(FrontendError) as refused:
        parse_chat(chat(**fields), default_max_tokens=16)
    assert refused.value.code == ErrorCode.INVALID_REQUEST
    assert refused.value.param == param
    assert words in refused.value.message


def test_a_schema_string_is_passed_on_as_its_text():
    # whether it compiles is the intake's check (tests/controlplane/test_intake_structured.py), not the gateway's
    assert spec_of(chat(guided_json="{not json")).json == "{not json"


def test_a_deep_or_huge_schema_is_a_clear_refusal():
    deep = '{"a":' * 50_000 + "1" + "}" * 50_000  # deeper than any JSON decoder allows
    body = b'{"messages": [{"role": "user", "content": "Hi"}], "guided_json": ' + deep.encode() + b"}"
    with pytest.raises(FrontendError) as refused:
        parse_chat(body, default_max_tokens=16)
    assert "nested too deeply" in refused.value.message
    wide = json.dumps({"enum": ["x" * 64] * 1200})  # 80 KB, flat
    with pytest.raises(FrontendError) as refused:
        parse_chat(chat(guided_json=json.loads(wide)), default_max_tokens=16)
    assert refused.value.param == "guided_json" and "65536" in refused.value.message
