"""Request bodies → GenerateArgs, without HTTP."""

from __future__ import annotations

import json

import pytest

from controlplane.frontend import FrontendError
from controlplane.gateway.openai_reply import OpenAIReply
from controlplane.gateway.openai_schema import parse_chat, parse_completion
from engine.sampling_params import SamplingParams
from transport.messages import ChatMessage, ErrorCode, TokenChunk


def chat(**fields) -> bytes:
    return json.dumps({"messages": [{"role": "user", "content": "Hi"}], **fields}).encode()


def test_defaults():
    args = parse_chat(chat(), default_max_tokens=77)
    assert args.model is None
    assert args.messages == [ChatMessage("user", "Hi")]
    assert args.sampling == SamplingParams(max_tokens=77)
    assert (args.stream, args.include_usage) == (False, False)


def test_nulls_mean_not_given():
    body = chat(model=None, temperature=None, top_p=None, n=None, stop=None, seed=None, max_tokens=None, stream=None)
    assert parse_chat(body, default_max_tokens=5).sampling == SamplingParams(max_tokens=5)


def test_sampling_fields_reach_the_frontend():
    body = chat(
        temperature=0, top_p=0.9, top_k=4, seed=11, max_tokens=8, stop="END", stop_token_ids=[2], ignore_eos=True, n=1
    )
    assert parse_chat(body, default_max_tokens=5).sampling == SamplingParams(
        temperature=0.0, top_p=0.9, top_k=4, seed=11, max_tokens=8, stop=["END"], stop_token_ids=[2], ignore_eos=True
    )


def test_penalties_bias_and_vllm_extensions_reach_the_frontend():
    body = chat(
        presence_penalty=0.5,
        frequency_penalty=-1,
        repetition_penalty=1.2,
        logit_bias={"50256": -100, "7": 2.5},
        min_p=0.05,
        min_tokens=2,
        max_tokens=8,
        allowed_token_ids=[7, 50256],
    )
    sampling = parse_chat(body, default_max_tokens=5).sampling
    assert sampling == SamplingParams(
        presence_penalty=0.5,
        frequency_penalty=-1.0,
        repetition_penalty=1.2,
        logit_bias=((50256, -100.0), (7, 2.5)),
        min_p=0.05,
        min_tokens=2,
        max_tokens=8,
        allowed_token_ids=(7, 50256),
    )
    assert sampling.processes_logits and sampling.penalizes
    assert not parse_chat(chat(frequency_penalty=0, presence_penalty=0), default_max_tokens=5).sampling.processes_logits


def test_bad_words_reach_the_sampling_params_as_words():
    sampling = parse_chat(chat(bad_words=["Paris", "Lyon"]), default_max_tokens=5).sampling
    assert sampling.bad_words == ("Paris", "Lyon") and sampling.bad_words_token_ids == ()  # the intake tokenizes


def test_a_predicted_output_reaches_the_sampling_params_as_text():
    """OpenAI's Predicted Outputs: the text (or its text parts, joined); the intake tokenizes it."""
    sampling = parse_chat(chat(prediction={"type": "content", "content": "def f():"}), default_max_tokens=5).sampling
    assert sampling.prediction == "def f():" and sampling.prediction_token_ids == ()
    parts = {"type": "content", "content": [{"type": "text", "text": "def "}, {"type": "text", "text": "f():"}]}
    assert parse_chat(chat(prediction=parts), default_max_tokens=5).sampling.prediction == "def f():"
    assert parse_chat(chat(), default_max_tokens=5).sampling.prediction is None


def test_vllms_prompt_and_text_extensions_reach_the_frontend():
    body = chat(
        truncate_prompt_tokens=64, include_stop_str_in_output=True, skip_special_tokens=False, prompt_logprobs=2
    )
    sampling = parse_chat(body, default_max_tokens=5).sampling
    assert sampling == SamplingParams(
        max_tokens=5,
        truncate_prompt_tokens=64,
        include_stop_str_in_output=True,
        skip_special_tokens=False,
        prompt_logprobs=2,
    )
    defaults = parse_completion(b'{"prompt": "x", "echo": true, "logprobs": 3}', default_max_tokens=5).sampling
    assert (defaults.skip_special_tokens, defaults.include_stop_str_in_output, defaults.prompt_logprobs) == (
        True,
        False,
        3,
    )


def test_include_usage_only_when_streaming():
    options = {"include_usage": True}
    assert parse_chat(chat(stream=True, stream_options=options), default_max_tokens=5).include_usage
    assert not parse_chat(chat(stream=False, stream_options=options), default_max_tokens=5).include_usage


def test_completion_token_ids_and_null_content():
    args = parse_completion(b'{"prompt": [[1, 2]], "max_tokens": 3}', default_max_tokens=16)
    assert (args.prompt, args.prompt_token_ids, args.sampling.max_tokens) == (None, [1, 2], 3)
    body = json.dumps({"messages": [{"role": "assistant", "content": None}, {"role": "user", "content": "x"}]})
    assert parse_chat(body.encode(), default_max_tokens=5).messages[0] == ChatMessage("assistant", "")


@pytest.mark.parametrize(
    ("body", "code", "param"),
    [
        (b"{", ErrorCode.MALFORMED, None),
        (b"null", ErrorCode.INVALID_REQUEST, None),
        (chat(temperature=True), ErrorCode.INVALID_REQUEST, "temperature"),
        (chat(messages=[{"role": "user", "content": [{"type": "text"}]}]), ErrorCode.INVALID_REQUEST, None),
        (chat(logprobs=True, top_logprobs=21), ErrorCode.INVALID_REQUEST, "top_logprobs"),
        (chat(response_format={"type": "xml"}), ErrorCode.INVALID_REQUEST, "response_format"),
        (chat(frequency_penalty=2.5), ErrorCode.INVALID_REQUEST, "frequency_penalty"),
        (chat(presence_penalty="1"), ErrorCode.INVALID_REQUEST, "presence_penalty"),
        (chat(repetition_penalty=0), ErrorCode.INVALID_REQUEST, "repetition_penalty"),
        (chat(logit_bias={"x1": 5}), ErrorCode.INVALID_REQUEST, "logit_bias"),
        (chat(logit_bias={"-1": 5}), ErrorCode.INVALID_REQUEST, "logit_bias"),
        (chat(logit_bias={"1": 101}), ErrorCode.INVALID_REQUEST, "logit_bias"),
        (chat(logit_bias={"1": [5]}), ErrorCode.INVALID_REQUEST, "logit_bias[...]"),
        (chat(logit_bias={str(i): 1 for i in range(301)}), ErrorCode.INVALID_REQUEST, "logit_bias"),
        (chat(logit_bias={"9" * 40: 1}), ErrorCode.INVALID_REQUEST, "logit_bias"),
        (chat(min_p=1.5), ErrorCode.INVALID_REQUEST, "min_p"),
        (chat(min_tokens=9, max_tokens=4), ErrorCode.INVALID_REQUEST, "min_tokens"),
        (chat(allowed_token_ids=[-1]), ErrorCode.INVALID_REQUEST, "allowed_token_ids"),
        (chat(allowed_token_ids=list(range(16_385))), ErrorCode.INVALID_REQUEST, "allowed_token_ids"),
        (chat(bad_words=[""]), ErrorCode.INVALID_REQUEST, "bad_words"),
        (chat(prediction={"type": "text", "content": "x"}), ErrorCode.INVALID_REQUEST, "prediction"),
        (
            chat(prediction={"type": "content", "content": [{"type": "image_url"}]}),
            ErrorCode.INVALID_REQUEST,
            "prediction",
        ),
        (chat(prediction={"type": "content", "content": "x" * (2**18 + 1)}), ErrorCode.INVALID_REQUEST, "prediction"),
        (chat(prediction="x"), ErrorCode.INVALID_REQUEST, "prediction"),
        (chat(bad_words="Paris"), ErrorCode.INVALID_REQUEST, "bad_words"),
        (chat(bad_words=["w"] * 129), ErrorCode.INVALID_REQUEST, "bad_words"),
        (chat(truncate_prompt_tokens=0), ErrorCode.INVALID_REQUEST, "truncate_prompt_tokens"),
        (chat(truncate_prompt_tokens=-1), ErrorCode.INVALID_REQUEST, "truncate_prompt_tokens"),
        (chat(include_stop_str_in_output="yes"), ErrorCode.INVALID_REQUEST, "include_stop_str_in_output"),
        (chat(skip_special_tokens=0), ErrorCode.INVALID_REQUEST, "skip_special_tokens"),
        (chat(prompt_logprobs=21), ErrorCode.INVALID_REQUEST, "prompt_logprobs"),
    ],
)
def test_refusals(body, code, param):
    with pytest.raises(FrontendError) as refused:
        parse_chat(body, default_max_tokens=5)
    assert refused.value.code == code
    if param is not None:
        assert refused.value.param == param


def test_reply_counts_tokens_when_the_node_does_not():
    reply = OpenAIReply(chat=False, request_id="cmpl-1", model="m", created=0, include_usage=False)
    reply.add(TokenChunk(token_ids=[1, 2], text="ab"))
    reply.add(TokenChunk(token_ids=[3], text="c", finished=True, finish_reason="length", num_prompt_tokens=4))
    usage = {"prompt_tokens": 4, "completion_tokens": 3, "total_tokens": 7}
    usage["prompt_tokens_details"] = {"cached_tokens": 0}
    assert reply.usage() == usage
    assert reply.full_object()["choices"][0] == {"text": "abc", "index": 0, "logprobs": None, "finish_reason": "length"}
