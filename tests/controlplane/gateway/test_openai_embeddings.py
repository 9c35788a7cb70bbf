"""OpenAI's embeddings API (``POST /v1/embeddings``, gateway/openai_embeddings.py): the official ``openai`` package
against the gateway on loopback over a scripted frontend: one input and a batch, strings and token ids, the SDK's
default base64 encoding and plain floats, what reaches the frontend, usage, and refusals naming their field."""

from __future__ import annotations

import base64
import struct
from collections.abc import Iterator

import httpx
import msgspec
import openai
import pytest

MODEL = "smol"
VECTOR = [0.6, -0.8, 0.0, 0.25]


@pytest.fixture
def client(served: str, frontend, script) -> Iterator[openai.OpenAI]:
    chunks = script("x")  # one sampled token; its chunk carries the prompt's vector
    frontend.chunks = [msgspec.structs.replace(chunks[0], embedding=VECTOR)]
    with openai.OpenAI(base_url=f"{served}/v1", api_key="x", max_retries=0, timeout=30) as c:
        yield c


def _close(got: list[float]) -> bool:
    return len(got) == len(VECTOR) and all(abs(a - b) < 1e-6 for a, b in zip(got, VECTOR))


def test_one_input_with_the_sdks_default_base64(client, frontend):
    reply = client.embeddings.create(model=MODEL, input="Hello there")
    (item,) = reply.data
    assert item.index == 0 and _close(item.embedding) and reply.model == MODEL
    assert (reply.usage.prompt_tokens, reply.usage.total_tokens) == (5, 5)
    (call,) = frontend.calls
    assert call["prompt"] == "Hello there" and call["prompts"] is None
    sampling = call["sampling"]
    assert sampling.embed and (sampling.max_tokens, sampling.temperature) == (1, 0.0)


def test_a_batch_of_strings_and_token_ids_as_floats(client, frontend):
    reply = client.embeddings.create(model=MODEL, input=["a", "b", "c"], encoding_format="float")
    assert [d.index for d in reply.data] == [0, 1, 2] and all(_close(d.embedding) for d in reply.data)
    assert frontend.calls[-1]["prompts"] == ["a", "b", "c"] and reply.usage.prompt_tokens == 15
    reply = client.embeddings.create(model=MODEL, input=[[1, 2, 3], [4, 5]], encoding_format="float")
    assert len(reply.data) == 2 and frontend.calls[-1]["prompts"] == [[1, 2, 3], [4, 5]]
    client.embeddings.create(model=MODEL, input=[7, 8, 9])
    assert frontend.calls[-1]["prompt_token_ids"] == [7, 8, 9]


def test_a_large_batch_goes_in_waves_in_order(client, frontend):
    texts = [f"text {i}" for i in range(300)]
    reply = client.embeddings.create(model=MODEL, input=texts, encoding_format="float")
    assert [d.index for d in reply.data] == list(range(300)) and all(_close(d.embedding) for d in reply.data)
    first, second = frontend.calls  # a wave of 256 inputs, then one of the other 44, each under its own id
    assert (first["prompts"], second["prompts"]) == (texts[:256], texts[256:])
    assert first["request_id"] != second["request_id"] and reply.usage.prompt_tokens == 300 * 5
    client.embeddings.create(model=MODEL, input=texts[:257])
    assert frontend.calls[-1]["prompt"] == "text 256"  # a wave of one is a plain prompt


def test_a_refused_wave_refuses_the_request(served, frontend):
    from controlplane.frontend import FrontendError
    from transport.messages import ErrorCode

    frontend.fail_before = FrontendError(ErrorCode.OVERLOADED, "queue full", retry_after_s=1.0)
    r = httpx.post(f"{served}/v1/embeddings", json=_body(input=["a"] * 300), timeout=30)
    assert r.status_code == 429 and r.headers["retry-after"] == "1"
    assert len(frontend.calls) == 1  # the first wave's refusal: the second was never sent


def test_base64_is_little_endian_float32(client, served):
    r = httpx.post(f"{served}/v1/embeddings", json={"input": "hi", "encoding_format": "base64"}, timeout=30)
    raw = base64.b64decode(r.json()["data"][0]["embedding"])
    assert _close(list(struct.unpack(f"<{len(raw) // 4}f", raw)))


def _body(**fields) -> dict:
    return {"model": MODEL, "input": "hi", **fields}


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        ({"model": MODEL}, 400, "input"),
        (_body(input=""), 400, "input"),
        (_body(input=[]), 400, "input"),
        (_body(input=["a", [1]]), 400, "input"),
        (_body(input=["a", ""]), 400, "input[1]"),
        (_body(input=["a"] * 2049), 400, "input"),
        (_body(input=[-1]), 400, "input"),
        (_body(encoding_format="int8"), 400, "encoding_format"),
        (_body(dimensions=64), 400, "dimensions"),
        (_body(truncate_prompt_tokens=0), 400, "truncate_prompt_tokens"),
        (_body(model="text-embedding-9"), 404, "model"),
    ],
)
def test_refusals_name_their_field(client, served, body, status, param):
    r = httpx.post(f"{served}/v1/embeddings", json=body, timeout=30)
    assert r.status_code == status, r.text
    assert r.json()["error"]["param"] == param
    assert httpx.post(f"{served}/v1/embeddings", json=_body(), timeout=30).status_code == 200  # nothing was lost


def test_a_finished_request_without_its_vector_is_a_server_error(served, frontend, script):
    frontend.chunks = script("x")  # no embedding on the chunk
    r = httpx.post(f"{served}/v1/embeddings", json=_body(), timeout=30)
    assert r.status_code == 502 and "embedding" in r.json()["error"]["message"]


def test_vllms_pooling_route_answers_the_same_vectors_in_its_shape(client, served, frontend):
    reply = httpx.post(f"{served}/pooling", json={"model": MODEL, "input": ["a", "b"]}, timeout=30)
    body = reply.json()
    assert reply.status_code == 200 and body["object"] == "list" and body["id"].startswith("pool-")
    assert body["model"] == MODEL and isinstance(body["created"], int) and body["usage"]["prompt_tokens"] == 10
    assert [(d["index"], d["object"]) for d in body["data"]] == [(0, "pooling"), (1, "pooling")]
    assert all(_close(d["data"]) for d in body["data"]) and frontend.calls[-1]["sampling"].embed
    encoded = httpx.post(f"{served}/pooling", json={"input": "a", "encoding_format": "base64"}, timeout=30).json()
    raw = base64.b64decode(encoded["data"][0]["data"])
    assert _close(list(struct.unpack(f"<{len(raw) // 4}f", raw)))
    refused = httpx.post(f"{served}/pooling", json={"input": []}, timeout=30)
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "input"
