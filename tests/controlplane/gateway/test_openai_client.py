"""The official ``openai`` client, unmodified, against the gateway served by uvicorn on loopback; disconnects."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
import msgspec
import openai
import pytest

from controlplane.frontend import FrontendError
from transport.messages import ErrorCode

MODEL = "smol"  # the FakeFrontend's default model
MESSAGES = [{"role": "user", "content": "Hi"}]
WAIT_S = 30  # upper bound on waiting for an event; never reached when the code is right


@pytest.fixture
def client(served: str) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{served}/v1", api_key="x", max_retries=0, timeout=WAIT_S) as c:
        yield c


def test_chat(client, frontend):
    completion = client.chat.completions.create(model=MODEL, messages=MESSAGES, temperature=0.2, seed=3, stop=["\n"])
    assert completion.id.startswith("chatcmpl-")
    assert completion.model == MODEL
    (choice,) = completion.choices
    assert choice.message.role == "assistant"
    assert choice.message.content == "Hello, world"
    assert choice.finish_reason == "stop"
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (5, 3)
    assert completion.usage.total_tokens == 8
    sampling = frontend.calls[0]["sampling"]
    assert (sampling.temperature, sampling.seed, sampling.stop) == (0.2, 3, ("\n",))


def test_penalties_and_logit_bias_as_the_sdk_sends_them(client, frontend):
    """The SDK's own arguments (logit_bias keyed by token id strings) and vLLM's extensions in ``extra_body``."""
    client.chat.completions.create(
        model=MODEL,
        messages=MESSAGES,
        presence_penalty=0.5,
        frequency_penalty=-0.25,
        logit_bias={"50256": -100, "13": 3},
        extra_body={"repetition_penalty": 1.1, "min_p": 0.05, "min_tokens": 2},
    )
    sampling = frontend.calls[0]["sampling"]
    assert (sampling.presence_penalty, sampling.frequency_penalty) == (0.5, -0.25)
    assert sampling.logit_bias == ((50256, -100.0), (13, 3.0))
    assert (sampling.repetition_penalty, sampling.min_p, sampling.min_tokens) == (1.1, 0.05, 2)
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model=MODEL, messages=MESSAGES, logit_bias={"token": 1})
    assert refused.value.body["param"] == "logit_bias"


def test_structured_outputs_as_the_sdk_sends_them(client, frontend):
    """OpenAI's ``response_format`` (a json_schema) and vLLM's ``structured_outputs`` in ``extra_body`` reach the
    sampling params; a constraint that does not compile is a 400 naming the field the client used, before the
    frontend sees it."""
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    client.chat.completions.create(
        model=MODEL,
        messages=MESSAGES,
        response_format={"type": "json_schema", "json_schema": {"name": "a", "schema": schema, "strict": True}},
    )
    assert json.loads(frontend.calls[0]["sampling"].structured_outputs.json) == schema
    client.completions.create(model=MODEL, prompt="Hi", extra_body={"structured_outputs": {"choice": ["x", "y"]}})
    assert frontend.calls[1]["sampling"].structured_outputs.choice == ("x", "y")
    bad = {"type": "json_schema", "json_schema": {"name": "a", "schema": {"type": "frobnicate"}}}
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model=MODEL, messages=MESSAGES, response_format=bad)
    assert refused.value.body["param"] == "response_format" and "JSON schema" in refused.value.body["message"]
    with pytest.raises(openai.BadRequestError) as refused:
        client.completions.create(model=MODEL, prompt="Hi", extra_body={"guided_regex": "[a-"})
    assert refused.value.body["param"] == "guided_regex"
    assert len(frontend.calls) == 2


def test_a_predicted_output_and_its_usage_as_the_sdk_reads_them(client, frontend, script):
    """OpenAI's Predicted Outputs: the prediction's text reaches the sampling params, and the node's accepted and
    rejected prediction tokens (its last chunk's) are the usage's completion_tokens_details; without one, no such
    details."""
    chunks = script("Hello", ",", " world")
    chunks[-1] = msgspec.structs.replace(chunks[-1], num_prediction_accepted_tokens=2, num_prediction_rejected_tokens=5)
    frontend.chunks = chunks
    prediction = {"type": "content", "content": "Hello, there"}
    for stream in (False, True):
        if stream:
            events = list(
                client.chat.completions.create(
                    model=MODEL,
                    messages=MESSAGES,
                    prediction=prediction,
                    stream=True,
                    stream_options={"include_usage": True},
                )
            )
            usage = events[-1].usage
        else:
            usage = client.chat.completions.create(model=MODEL, messages=MESSAGES, prediction=prediction).usage
        details = usage.completion_tokens_details
        assert (details.accepted_prediction_tokens, details.rejected_prediction_tokens) == (2, 5)
    assert frontend.calls[-1]["sampling"].prediction == "Hello, there"
    assert client.chat.completions.create(model=MODEL, messages=MESSAGES).usage.completion_tokens_details is None


def test_chat_streaming(client):
    stream = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Hello, world"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].choices == []
    assert chunks[-1].usage.total_tokens == 8


def test_completions(client, frontend, script):
    frontend.chunks = script("upon", " a", " time", finish_reason="length")
    completion = client.completions.create(model=MODEL, prompt="Once", max_tokens=3)
    assert completion.id.startswith("cmpl-")
    assert completion.choices[0].text == "upon a time"
    assert completion.choices[0].finish_reason == "length"
    assert completion.usage.completion_tokens == 3
    streamed = "".join(c.choices[0].text for c in client.completions.create(model=MODEL, prompt="Once", stream=True))
    assert streamed == "upon a time"


def test_models(client, frontend):
    frontend.model_names = [MODEL, "other"]
    assert [m.id for m in client.models.list()] == [MODEL, "other"]


def test_errors_surface_as_the_right_exceptions(client, frontend):
    frontend.fail_before = FrontendError(ErrorCode.OVERLOADED, "queue full", retry_after_s=4)
    with pytest.raises(openai.RateLimitError) as overloaded:
        client.chat.completions.create(model=MODEL, messages=MESSAGES)
    assert overloaded.value.response.headers["retry-after"] == "4"
    assert overloaded.value.code == "rate_limit_exceeded"
    frontend.fail_before = None

    with pytest.raises(openai.NotFoundError) as unknown:
        client.chat.completions.create(model="gpt-9", messages=MESSAGES)
    assert unknown.value.code == "model_not_found"

    with pytest.raises(openai.BadRequestError) as bad:
        client.chat.completions.create(model=MODEL, messages=MESSAGES, temperature=-1)
    assert bad.value.param == "temperature"
    with pytest.raises(openai.BadRequestError) as bad:
        client.completions.create(model=MODEL, prompt="x", n=17)
    assert bad.value.param == "n"
    with pytest.raises(openai.BadRequestError) as too_long:
        client.completions.create(model=MODEL, prompt="x" * (frontend.max_prompt_chars + 1))
    assert too_long.value.code == "context_length_exceeded"

    frontend.fail_before = FrontendError(ErrorCode.NO_NODE, "no live node")
    with pytest.raises(openai.InternalServerError) as no_node:
        client.chat.completions.create(model=MODEL, messages=MESSAGES)
    assert no_node.value.status_code == 503
    frontend.fail_before = None

    assert client.chat.completions.create(model=MODEL, messages=MESSAGES).choices[0].message.content


def test_node_failure_mid_stream_raises_api_error(client, frontend):
    frontend.fail_after = 2
    stream = client.chat.completions.create(model=MODEL, messages=MESSAGES, stream=True)
    with pytest.raises(openai.APIError, match="node n0 died"):
        for _ in stream:
            pass


def test_client_disconnect_mid_stream_cancels_upstream(served, frontend):
    frontend.hang_after = 1
    body = {"model": MODEL, "messages": MESSAGES, "stream": True}
    with httpx.Client(base_url=served, timeout=WAIT_S) as http:
        with http.stream("POST", "/v1/chat/completions", json=body) as response:
            assert response.status_code == 200
            for line in response.iter_lines():
                if line.startswith("data: ") and json.loads(line[6:])["choices"][0]["delta"].get("content"):
                    break  # the first token arrived; the frontend now waits for the next one
        assert frontend.num_streaming.acquire(timeout=WAIT_S)
    assert frontend.cancelled.wait(timeout=WAIT_S)


@pytest.mark.parametrize("stream", [False, True])
def test_client_disconnect_before_first_chunk_cancels_upstream(served, frontend, stream):
    frontend.hang_after = 0
    body = json.dumps({"model": MODEL, "prompt": "Once", "stream": stream}).encode()
    url = urlsplit(served)
    with socket.create_connection((url.hostname, url.port), timeout=WAIT_S) as sock:
        head = f"POST /v1/completions HTTP/1.1\r\nHost: {url.netloc}\r\nContent-Type: application/json\r\n"
        sock.sendall(head.encode() + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        assert frontend.num_streaming.acquire(timeout=WAIT_S)  # the request reached the frontend and waits
    assert frontend.cancelled.wait(timeout=WAIT_S)
    frontend.hang_after, frontend.cancelled = None, type(frontend.cancelled)()
    with httpx.Client(base_url=served, timeout=WAIT_S) as http:
        assert http.post("/v1/completions", json={"model": MODEL, "prompt": "Once"}).status_code == 200
