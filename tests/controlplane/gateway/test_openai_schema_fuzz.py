"""Property tests of the HTTP schema (hypothesis): whatever the body, ``parse_chat`` and ``parse_completion``
return GenerateArgs or raise a FrontendError that answers 4xx, never anything else; so do the other generation
routes' parsers (Anthropic's messages and count_tokens, the Responses API, embeddings), each their own result;
and a batch's create body, and its input file's lines: each line a request or a numbered error, never a raise."""

from __future__ import annotations

import json
from functools import partial

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controlplane.frontend import FrontendError
from controlplane.gateway.anthropic_messages import parse_count_tokens, parse_messages
from controlplane.gateway.batches import Batch, parse_create, read_lines
from controlplane.gateway.errors import ERROR_KINDS
from controlplane.gateway.openai_embeddings import EmbeddingsArgs, parse_embeddings
from controlplane.gateway.openai_responses import ResponsesArgs, parse_responses
from controlplane.gateway.openai_schema import GenerateArgs, parse_chat, parse_completion

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

HUGE_INTS = st.sampled_from([2**31, 2**63, 2**64, 2**64 - 1, -(2**63) - 1, 10**300, -1, 0])
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | HUGE_INTS
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=12), inner, max_size=5),
    max_leaves=30,
)

CHAT = {"model": "smol", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
COMPLETION = {"model": "smol", "prompt": "hi", "max_tokens": 4}
FIELDS = [
    "model", "messages", "prompt", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k", "stop",
    "stop_token_ids", "ignore_eos", "seed", "n", "stream", "stream_options", "presence_penalty", "frequency_penalty",
    "logit_bias", "logprobs", "top_logprobs", "tools", "response_format", "echo", "best_of", "suffix", "user",
    "repetition_penalty", "min_p", "min_tokens", "allowed_token_ids", "prompt_logprobs", "tool_choice",
    "parallel_tool_calls", "input", "instructions", "max_output_tokens", "previous_response_id", "text", "include",
    "background", "system", "stop_sequences", "encoding_format", "dimensions",
    "input_file_id", "endpoint", "completion_window", "metadata", "custom_id", "method", "url", "body",
    "bad_words", "continue_final_message", "add_generation_prompt", "chat_template_kwargs", "cache_salt",
]  # fmt: skip
RESPONSES = {"model": "smol", "input": "hi", "max_output_tokens": 4}
MESSAGES = {"model": "smol", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
EMBEDDINGS = {"model": "smol", "input": ["hi", "yo"]}
BATCH = {"input_file_id": "file-1", "endpoint": "/v1/chat/completions", "completion_window": "24h"}
BATCH_LINE = {"custom_id": "a", "method": "POST", "url": "/v1/chat/completions", "body": CHAT}
_chat = partial(parse_chat, default_max_tokens=16)
_completion = partial(parse_completion, default_max_tokens=16)
OTHER_PARSERS = [  # (a body's parser, what it returns)
    (lambda b: parse_responses(b, default_max_tokens=16, tool_call_parser="hermes", previous=lambda _: ()),
     ResponsesArgs),
    (parse_messages, GenerateArgs),
    (parse_count_tokens, tuple),
    (parse_embeddings, EmbeddingsArgs),
    (lambda b: parse_create(b, None), Batch),
]  # fmt: skip


def _check(parse, body: bytes, kind: type = GenerateArgs) -> None:
    try:
        args = parse(body)
    except FrontendError as err:
        assert 400 <= ERROR_KINDS[err.code].status < 500, err
        assert len(err.message) < 1_000
    else:
        assert isinstance(args, kind)


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@st.composite
def mutated_bodies(draw, base: dict) -> bytes:
    """A valid body with some fields replaced by random JSON, huge ints, long lists or deep nesting."""
    body = dict(base)
    for field in draw(st.lists(st.sampled_from(FIELDS), min_size=1, max_size=4)):
        body[field] = draw(
            json_values
            | HUGE_INTS
            | st.lists(HUGE_INTS, min_size=1, max_size=3)
            | st.builds(lambda n: ["s"] * n, st.integers(0, 2_000))
            | st.just("__NESTED__")
        )
    text = json.dumps(body)
    depth = draw(st.integers(1, 5_000))
    text = text.replace('"__NESTED__"', _nested(depth))
    if draw(st.booleans()):
        text = text[: draw(st.integers(0, len(text)))]  # truncated
    return text.encode()


@FUZZ
@given(body=mutated_bodies(CHAT))
def test_mutated_chat_bodies_are_args_or_4xx(body):
    _check(_chat, body)


@FUZZ
@given(body=mutated_bodies(COMPLETION))
def test_mutated_completion_bodies_are_args_or_4xx(body):
    _check(_completion, body)


@FUZZ
@given(value=json_values)
def test_any_json_is_args_or_4xx(value):
    body = json.dumps(value).encode()
    _check(_chat, body)
    _check(_completion, body)


@FUZZ
@given(body=st.binary(max_size=200))
def test_any_bytes_are_args_or_4xx(body):
    _check(_chat, body)
    _check(_completion, body)


@FUZZ
@given(
    responses=mutated_bodies(RESPONSES),
    messages=mutated_bodies(MESSAGES),
    embeddings=mutated_bodies(EMBEDDINGS),
    batch=mutated_bodies(BATCH),
    value=json_values,
    raw=st.binary(max_size=200),
)
def test_the_other_routes_bodies_are_args_or_4xx(responses, messages, embeddings, batch, value, raw):
    bodies = [responses, messages, messages, embeddings, batch]  # each parser's own kind (count_tokens: messages')
    for (parse, kind), body in zip(OTHER_PARSERS, bodies, strict=True):
        for candidate in (body, json.dumps(value).encode(), raw):
            _check(parse, candidate, kind)


@FUZZ
@given(lines=st.lists(mutated_bodies(BATCH_LINE) | st.binary(max_size=100), max_size=6), value=json_values)
def test_a_batch_files_lines_are_requests_or_numbered_errors(lines, value):
    content = b"\n".join([*lines, json.dumps(value).encode()])
    requests, errors = read_lines(content, "/v1/chat/completions", 50_000)
    num_lines = content.count(b"\n") + 1
    assert all(isinstance(e["line"], int) and 1 <= e["line"] <= num_lines for e in errors if e["line"]), errors
    assert len({r.custom_id for r in requests}) == len(requests)
    assert all(r.body.lstrip().startswith(b"{") for r in requests)
