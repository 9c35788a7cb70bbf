"""The gateway over httpx's ASGI transport: replies, streams, every refusal in OpenAI's error shape."""

from __future__ import annotations

import json

import httpx
import prometheus_client
import pytest

from controlplane.frontend import FrontendError
from controlplane.gateway import GatewayConfig, create_app
from transport.messages import ChatMessage, ErrorCode, TokenChunk

pytestmark = pytest.mark.anyio

MODEL = "smol"  # the FakeFrontend's default model
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}]}
COMPLETION = {"model": MODEL, "prompt": "Once upon a time"}
USAGE_5_3 = {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}
USAGE_5_3["prompt_tokens_details"] = {"cached_tokens": 0}


def sse_payloads(text: str) -> list[dict | str]:
    """The data of every event; "[DONE]" stays a string."""
    events = [e for e in text.split("\n\n") if e]
    assert all(e.startswith("data: ") for e in events), events
    return [e[6:] if e == "data: [DONE]" else json.loads(e[6:]) for e in events]


def assert_error(response: httpx.Response, status: int, *, param: str | None = None, code: str | None = None) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["message"]
    assert error["param"] == param
    assert error["code"] == code
    return error


async def test_chat_completion(client, frontend):
    r = await client.post("/v1/chat/completions", json={**CHAT, "temperature": 0, "seed": 7, "stop": "x"})
    assert r.status_code == 200
    body = r.json()
    assert body["id"].startswith("chatcmpl-")
    assert r.headers["x-request-id"] == body["id"]
    assert body["object"] == "chat.completion"
    assert body["model"] == MODEL
    assert isinstance(body["created"], int)
    assert body["choices"] == [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "Hello, world"},
            "logprobs": None,
            "finish_reason": "stop",
        }
    ]
    assert body["usage"] == {**USAGE_5_3}
    (call,) = frontend.calls
    assert call["request_id"] == body["id"]
    assert call["messages"] == [ChatMessage("user", "Hi")]
    assert call["prompt"] is None
    assert call["sampling"].temperature == 0
    assert call["sampling"].seed == 7
    assert call["sampling"].stop == ("x",)  # SamplingParams, the one struct from the edge to the sampler


async def test_chat_streaming_with_usage(client):
    body = {**CHAT, "stream": True, "stream_options": {"include_usage": True}}
    r = await client.post("/v1/chat/completions", json=body)
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    *chunks, usage, done = sse_payloads(r.text)
    assert done == "[DONE]"
    assert {c["id"] for c in chunks} == {usage["id"]}
    assert all(c["object"] == "chat.completion.chunk" and c["usage"] is None for c in chunks)
    deltas = [c["choices"][0]["delta"] for c in chunks]
    assert deltas[0] == {"role": "assistant", "content": ""}
    assert "".join(d.get("content", "") for d in deltas) == "Hello, world"
    assert [c["choices"][0]["finish_reason"] for c in chunks][-1] == "stop"
    assert usage["choices"] == []
    assert usage["usage"] == {**USAGE_5_3}


async def test_streaming_without_usage_has_no_usage_chunk(client):
    r = await client.post("/v1/completions", json={**COMPLETION, "stream": True})
    *chunks, done = sse_payloads(r.text)
    assert done == "[DONE]"
    assert all("usage" not in c and len(c["choices"]) == 1 for c in chunks)
    assert "".join(c["choices"][0]["text"] for c in chunks) == "Hello, world"
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


async def test_completion(client, frontend, script):
    frontend.chunks = script("a", "b", finish_reason="length")
    r = await client.post("/v1/completions", json={**COMPLETION, "max_tokens": 2, "top_p": 0.5, "stop": ["\n"]})
    assert r.status_code == 200
    body = r.json()
    assert body["id"].startswith("cmpl-")
    assert body["object"] == "text_completion"
    assert body["choices"] == [{"text": "ab", "index": 0, "logprobs": None, "finish_reason": "length"}]
    assert body["usage"]["completion_tokens"] == 2
    sampling = frontend.calls[0]["sampling"]
    assert (sampling.max_tokens, sampling.top_p, sampling.stop) == (2, 0.5, ("\n",))
    assert frontend.calls[0]["prompt"] == "Once upon a time"


@pytest.mark.parametrize(
    ("prompt", "text", "token_ids"),
    [(["one string"], "one string", None), ([1, 2, 3], None, [1, 2, 3]), ([[4, 5]], None, [4, 5])],
)
async def test_completion_prompt_forms(client, frontend, prompt, text, token_ids):
    r = await client.post("/v1/completions", json={"prompt": prompt})
    assert r.status_code == 200, r.text
    assert frontend.calls[0]["prompt"] == text
    assert frontend.calls[0]["prompt_token_ids"] == token_ids
    assert frontend.calls[0]["model"] is None
    assert frontend.calls[0]["sampling"].max_tokens == 16  # OpenAI's default for completions
    assert r.json()["model"] == MODEL  # the default model


async def test_chat_content_parts_and_max_completion_tokens(client, frontend):
    parts = [{"type": "text", "text": "Hello"}, {"type": "text", "text": "there"}]
    body = {"messages": [{"role": "developer", "content": "Be brief"}, {"role": "user", "content": parts}]}
    r = await client.post("/v1/chat/completions", json={**body, "max_completion_tokens": 9, "max_tokens": 3})
    assert r.status_code == 200, r.text
    assert frontend.calls[0]["messages"] == [ChatMessage("system", "Be brief"), ChatMessage("user", "Hello\nthere")]
    assert frontend.calls[0]["sampling"].max_tokens == 9


async def test_logprobs(client, frontend):
    a, b = ord("A") + 3, ord("B") + 3  # the fake frontend's ByteTokenizer: byte + 3
    frontend.chunks = [
        TokenChunk(token_ids=[a], text="A", logprobs=[(a, -0.5, [(a, -0.5), (b, -1.5)])]),
        TokenChunk(token_ids=[b], text="B", finished=True, finish_reason="stop", logprobs=[(b, -float("inf"), [])]),
    ]
    r = await client.post("/v1/chat/completions", json={**CHAT, "logprobs": True, "top_logprobs": 2})
    assert frontend.calls[0]["sampling"].logprobs == 2
    first, second = r.json()["choices"][0]["logprobs"]["content"]
    assert first == {
        "token": "A",
        "logprob": -0.5,
        "bytes": [65],
        "top_logprobs": [
            {"token": "A", "logprob": -0.5, "bytes": [65]},
            {"token": "B", "logprob": -1.5, "bytes": [66]},
        ],
    }
    assert second == {"token": "B", "logprob": -9999.0, "bytes": [66], "top_logprobs": []}  # -inf is not JSON
    r = await client.post("/v1/completions", json={**COMPLETION, "logprobs": 2})
    logprobs = r.json()["choices"][0]["logprobs"]
    assert logprobs == {
        "tokens": ["A", "B"],
        "token_logprobs": [-0.5, -9999.0],
        "top_logprobs": [{"A": -0.5, "B": -1.5}, {}],
        "text_offset": [0, 1],
    }


BAD_REQUESTS = [
    ("/v1/chat/completions", b"{not json", None),
    ("/v1/chat/completions", b"", None),
    ("/v1/chat/completions", b"[1, 2]", None),
    ("/v1/chat/completions", b'"a string"', None),
    ("/v1/chat/completions", {"model": MODEL}, "messages"),
    ("/v1/chat/completions", {"messages": []}, "messages"),
    ("/v1/chat/completions", {"messages": "Hi"}, "messages"),
    ("/v1/chat/completions", {"messages": [{"content": "Hi"}]}, "messages[0].role"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
    ("/v1/chat/completions", {"messages": [{"role": "wizard", "content": "Hi"}]}, "messages[0].role"),
    (
        "/v1/chat/completions",
        {**CHAT, "messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
        "messages[0].content",
    ),
    ("/v1/chat/completions", {**CHAT, "n": 17}, "n"),
    ("/v1/chat/completions", {**CHAT, "n": "1"}, "n"),
    ("/v1/chat/completions", {**CHAT, "temperature": -1}, "temperature"),
    ("/v1/chat/completions", {**CHAT, "temperature": "hot"}, "temperature"),
    ("/v1/chat/completions", {**CHAT, "top_p": 0}, "top_p"),
    ("/v1/chat/completions", {**CHAT, "max_tokens": 0}, "max_tokens"),
    ("/v1/chat/completions", {**CHAT, "max_completion_tokens": -5}, "max_completion_tokens"),
    ("/v1/chat/completions", {**CHAT, "max_tokens": 1.5}, "max_tokens"),
    ("/v1/chat/completions", {**CHAT, "seed": -1}, "seed"),
    ("/v1/chat/completions", {**CHAT, "stop": [1]}, "stop[0]"),
    ("/v1/chat/completions", {**CHAT, "stop": [""]}, "stop"),
    ("/v1/chat/completions", {**CHAT, "stream": "yes"}, "stream"),
    ("/v1/chat/completions", {**CHAT, "stream_options": {"include_usage": 1}}, "stream_options.include_usage"),
    ("/v1/chat/completions", {**CHAT, "model": 3}, "model"),
    ("/v1/chat/completions", {**CHAT, "top_logprobs": 2}, "top_logprobs"),
    ("/v1/chat/completions", {**CHAT, "logprobs": True, "top_logprobs": 99}, "top_logprobs"),
    ("/v1/chat/completions", {**CHAT, "presence_penalty": 2.5}, "presence_penalty"),
    ("/v1/chat/completions", {**CHAT, "logit_bias": {"a": 1}}, "logit_bias"),
    ("/v1/chat/completions", {**CHAT, "tools": [{"type": "function"}]}, "tools[0].function"),
    ("/v1/completions", {"model": MODEL}, "prompt"),
    ("/v1/completions", {"prompt": ""}, "prompt"),
    ("/v1/completions", {"prompt": []}, "prompt"),
    ("/v1/completions", {"prompt": ["a", [104]]}, "prompt"),
    ("/v1/completions", {"prompt": [1, -2]}, "prompt"),
    ("/v1/completions", {"prompt": {"text": "x"}}, "prompt"),
    ("/v1/completions", {**COMPLETION, "n": 0}, "n"),
    ("/v1/completions", {**COMPLETION, "logprobs": 6}, "logprobs"),
    ("/v1/completions", {**COMPLETION, "echo": "yes"}, "echo"),
    ("/v1/completions", {**COMPLETION, "prompt_logprobs": 21}, "prompt_logprobs"),
    ("/v1/chat/completions", {**CHAT, "prompt_logprobs": -1}, "prompt_logprobs"),
    ("/v1/completions", {**COMPLETION, "best_of": 2}, "best_of"),
    ("/v1/completions", {**COMPLETION, "temperature": -1}, "temperature"),
]


@pytest.mark.parametrize(("path", "body", "param"), BAD_REQUESTS)
async def test_bad_request_is_400_and_the_gateway_keeps_serving(client, frontend, path, body, param):
    if isinstance(body, bytes):
        r = await client.post(path, content=body, headers={"content-type": "application/json"})
    else:
        r = await client.post(path, json=body)
    error = assert_error(r, 400, param=param)
    assert error["type"] == "invalid_request_error"
    if param is not None:
        assert param.split("[")[0].split(".")[0] in error["message"]
    assert frontend.calls == []  # refused before it reached the control plane
    assert (await client.post("/v1/chat/completions", json=CHAT)).status_code == 200


async def test_unknown_fields_are_ignored(client):
    r = await client.post("/v1/chat/completions", json={**CHAT, "user": "u1", "zz": [1], "web_search_options": {}})
    assert r.status_code == 200


async def test_prompt_too_long(client, frontend):
    r = await client.post("/v1/completions", json={**COMPLETION, "prompt": "x" * (frontend.max_prompt_chars + 1)})
    assert_error(r, 400, code="context_length_exceeded")
    assert (await client.post("/v1/completions", json=COMPLETION)).status_code == 200


async def test_unknown_model(client):
    r = await client.post("/v1/chat/completions", json={**CHAT, "model": "gpt-9"})
    assert_error(r, 404, param="model", code="model_not_found")
    assert_error(await client.get("/v1/models/gpt-9"), 404, param="model", code="model_not_found")


@pytest.mark.parametrize(
    ("code", "status", "openai_code"),
    [
        (ErrorCode.INVALID_REQUEST, 400, None),
        (ErrorCode.PROMPT_TOO_LONG, 400, "context_length_exceeded"),
        (ErrorCode.UNKNOWN_MODEL, 404, "model_not_found"),
        (ErrorCode.OVERLOADED, 429, "rate_limit_exceeded"),
        (ErrorCode.NO_NODE, 503, "no_node_available"),
        (ErrorCode.NODE_FAILED, 502, "node_failed"),
        (ErrorCode.CANCELLED, 503, "request_cancelled"),
        (ErrorCode.INTERNAL, 500, "internal_error"),
    ],
)
@pytest.mark.parametrize("stream", [False, True])
async def test_refusal_before_first_chunk_gets_its_status(client, frontend, code, status, openai_code, stream):
    frontend.fail_before = FrontendError(code, f"refused: {code}", retry_after_s=2.5)
    r = await client.post("/v1/chat/completions", json={**CHAT, "stream": stream})
    error = assert_error(r, status, code=openai_code)
    assert error["message"] == f"refused: {code}"
    if code in (ErrorCode.OVERLOADED, ErrorCode.NO_NODE):  # a 503 for want of a node says when, when it knows
        assert r.headers["retry-after"] == "3"
        assert r.headers["retry-after-ms"] == "2500"
    else:
        assert "retry-after" not in r.headers
    frontend.fail_before = None
    assert (await client.post("/v1/chat/completions", json=CHAT)).status_code == 200


async def test_overload_without_retry_time_still_says_retry_after(client, frontend):
    frontend.fail_before = FrontendError(ErrorCode.OVERLOADED, "queue full")
    r = await client.post("/v1/completions", json=COMPLETION)
    assert_error(r, 429, code="rate_limit_exceeded")
    assert r.headers["retry-after"] == "1"


async def test_node_failure_mid_stream_is_an_error_event(client, frontend):
    frontend.fail_after = 2
    r = await client.post("/v1/chat/completions", json={**CHAT, "stream": True})
    assert r.status_code == 200
    *chunks, error, done = sse_payloads(r.text)
    assert done == "[DONE]"
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == "Hello,"
    assert error["error"]["code"] == "node_failed"
    assert error["error"]["type"] == "server_error"


async def test_node_failure_mid_reply_is_502(client, frontend):
    frontend.fail_after = 2
    assert_error(await client.post("/v1/completions", json=COMPLETION), 502, code="node_failed")


async def test_stream_that_ends_unfinished_is_node_failed(client, frontend, script):
    frontend.chunks = script("a", "b")[:1]
    assert_error(await client.post("/v1/completions", json=COMPLETION), 502, code="node_failed")
    r = await client.post("/v1/completions", json={**COMPLETION, "stream": True})
    assert sse_payloads(r.text)[-2]["error"]["code"] == "node_failed"


async def test_aborted_request_is_an_error(client, frontend, script):
    frontend.chunks = script("a", finish_reason="abort")
    assert_error(await client.post("/v1/completions", json=COMPLETION), 503, code="request_cancelled")


async def test_frontend_bug_is_500_in_openai_shape(client, frontend):
    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    frontend.generate = broken
    assert_error(await client.post("/v1/completions", json=COMPLETION), 500, code="internal_error")


async def test_models(client, frontend):
    frontend.model_names = [MODEL, "other"]
    r = await client.get("/v1/models")
    assert r.status_code == 200
    body = r.json()
    assert body["object"] == "list"
    assert [m["id"] for m in body["data"]] == [MODEL, "other"]
    assert all(m["object"] == "model" and isinstance(m["created"], int) for m in body["data"])
    assert (await client.get("/v1/models/other")).json()["id"] == "other"
    # vLLM's ModelCard fields: clients size requests by max_model_len (the fake frontend's one context length)
    assert [(m["root"], m["parent"], m["max_model_len"]) for m in body["data"]] == [
        (MODEL, None, 1000),
        ("other", None, 1000),
    ]


async def test_each_models_context_is_its_own_nodes(make_frontend):
    class TwoModels(make_frontend):
        def model_max_len(self, name):
            return {MODEL: 2048, "other": 512}.get(name)

    frontend = TwoModels(model_names=[MODEL, "other"])
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(frontend)), base_url="http://g") as c:
        body = (await c.get("/v1/models")).json()
        assert [m["max_model_len"] for m in body["data"]] == [2048, 512]
        assert (await c.get(f"/v1/models/{MODEL}")).json()["max_model_len"] == 2048


@pytest.mark.parametrize(("status", "http_status"), [("ok", 200), ("degraded", 503)])
async def test_health(client, frontend, status, http_status):
    frontend.health_status = status
    r = await client.get("/health")
    assert r.status_code == http_status
    assert r.json()["status"] == status


async def test_unknown_path_and_wrong_method_in_openai_shape(client):
    assert_error(await client.get("/v1/nothing"), 404)
    assert_error(await client.put("/v1/chat/completions"), 405)
    assert_error(await client.get("/v1/completions"), 405)


async def test_body_too_large_is_413(frontend):
    app = create_app(frontend, config=GatewayConfig(max_body_bytes=64))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gateway") as c:
        r = await c.post("/v1/completions", json={"prompt": "x" * 100})
        assert_error(r, 413, code="request_too_large")


async def test_metrics_mounted_at_exact_path(frontend):
    registry = prometheus_client.CollectorRegistry()
    prometheus_client.Counter("zoo_test_total", "a test counter", registry=registry).inc()
    app = create_app(frontend, metrics_app=prometheus_client.make_asgi_app(registry))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gateway") as c:
        r = await c.get("/metrics")
        assert r.status_code == 200
        assert "zoo_test_total 1.0" in r.text
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(frontend)), base_url="http://g") as c:
        assert (await c.get("/metrics")).status_code == 404
