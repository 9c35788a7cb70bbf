"""vLLM's tokens-in, tokens-out API (gateway/tokens_api.py, ``POST /inference/v1/generate``): a token prompt and
vLLM's sampling_params in, each choice's token ids (and logprobs named "token_id:N") out, whole or streamed; the
sampling fields reach the engine's parameters; what is not supported is refused by name."""

from __future__ import annotations

import json

import httpx
import pytest

from controlplane.gateway import create_app
from transport.messages import TokenChunk

pytestmark = pytest.mark.anyio


def _client(frontend) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(frontend)), base_url="http://gw")


async def test_token_ids_in_and_out_whole(make_frontend):
    chunks = [
        TokenChunk(token_ids=[7], text="a", num_prompt_tokens=3, num_output_tokens=1,
                   logprobs=[(7, -0.25, [(7, -0.25), (9, -1.5)])]),
        TokenChunk(token_ids=[8], text="b", finished=True, finish_reason="length", num_prompt_tokens=3,
                   num_output_tokens=2, logprobs=[(8, -0.5, [(8, -0.5), (9, -2.0)])]),
    ]  # fmt: skip
    frontend = make_frontend(chunks=chunks)
    body = {
        "token_ids": [1, 2, 3], "request_id": "rollout-17",
        "sampling_params": {"temperature": 0.7, "top_k": 5, "max_tokens": 2, "logprobs": 1, "seed": 4,
                            "stop_token_ids": [2], "detokenize": False},
    }  # fmt: skip
    async with _client(frontend) as http:
        reply = await http.post("/inference/v1/generate", json=body)
    assert reply.status_code == 200, reply.text
    out = reply.json()
    assert out["request_id"] == "rollout-17" and out["usage"]["completion_tokens"] == 2
    (choice,) = out["choices"]
    assert (choice["index"], choice["token_ids"], choice["finish_reason"]) == (0, [7, 8], "length")
    first = choice["logprobs"]["content"][0]
    assert (first["token"], first["logprob"]) == ("token_id:7", -0.25)
    assert [t["token"] for t in first["top_logprobs"]] == ["token_id:7", "token_id:9"]
    call = frontend.calls[0]
    assert call["prompt_token_ids"] == [1, 2, 3]
    sampling = call["sampling"]
    assert (sampling.temperature, sampling.top_k, sampling.max_tokens, sampling.seed) == (0.7, 5, 2, 4)
    assert tuple(sampling.stop_token_ids) == (2,) and sampling.logprobs == 1


async def test_streamed_each_chunks_new_ids_then_the_usage(make_frontend, script):
    frontend = make_frontend(chunks=script("x", "y", "z"))
    body = {"token_ids": [5], "sampling_params": {"n": 2}, "stream": True, "stream_options": {"include_usage": True}}
    async with _client(frontend) as http:
        reply = await http.post("/inference/v1/generate", json=body)
    events = [line[6:] for line in reply.text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    objects = [json.loads(e) for e in events[:-1]]
    ids = {0: [], 1: []}
    for obj in objects[:-1]:
        for choice in obj["choices"]:
            ids[choice["index"]] += choice["token_ids"]
    assert ids == {0: [100, 101, 102], 1: [100, 101, 102]}  # two choices, each its ids in order
    assert objects[-1]["usage"]["completion_tokens"] == 6 and objects[-1]["choices"] == []
    assert all(o["request_id"] == objects[0]["request_id"] for o in objects)


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"token_ids": []}, "token_ids"),
        ({"sampling_params": {}}, "token_ids"),
        ({"token_ids": ["a"]}, "token_ids"),
        ({"token_ids": [1], "sampling_params": {"best_of": 2}}, "sampling_params.best_of"),
        ({"token_ids": [1], "sampling_params": {"temperature": -1}}, "temperature"),
        ({"token_ids": [1], "features": {"mm_hashes": {}}}, "features"),
        ({"token_ids": [1], "kv_transfer_params": {"do_remote_decode": True}}, "kv_transfer_params"),
        ({"token_ids": [1], "request_id": "r" * 129}, "request_id"),
    ],
)
async def test_what_is_refused_is_named(make_frontend, body, says):
    async with _client(make_frontend()) as http:
        reply = await http.post("/inference/v1/generate", json=body)
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert says in (error["param"] or "") + error["message"]


@pytest.mark.parametrize("raw", [b"{", b"[1]", b'{"token_ids": [1], "x": ' + b'{"a":' * 5000 + b"1" + b"}" * 5001])
async def test_bytes_that_are_no_request_are_a_400_in_openais_shape(make_frontend, raw):
    async with _client(make_frontend()) as http:
        reply = await http.post("/inference/v1/generate", content=raw)
    assert reply.status_code == 400 and reply.json()["error"]["message"]


async def test_render_gives_the_ids_the_intake_makes_and_generate_takes_them_as_they_are(make_frontend):
    frontend = make_frontend()
    chat = {"model": "smol", "messages": [{"role": "user", "content": "hi"}], "temperature": 0.5, "top_k": 3,
            "max_tokens": 7, "seed": 11, "stop": ["."], "n": 2}  # fmt: skip
    async with _client(frontend) as http:
        rendered = (await http.post("/v1/chat/completions/render", json=chat)).json()
        tokenized = (await http.post("/tokenize", json={"messages": chat["messages"]})).json()["tokens"]
        assert rendered["token_ids"] == tokenized and rendered["request_id"].startswith("chatcmpl-")
        sp = rendered["sampling_params"]
        assert (sp["temperature"], sp["top_k"], sp["max_tokens"], sp["seed"], sp["stop"], sp["n"]) == (
            0.5,
            3,
            7,
            11,
            ["."],
            2,
        )
        generated = await http.post("/inference/v1/generate", json=rendered)  # the rendered request, as it is
        assert generated.status_code == 200 and len(generated.json()["choices"]) == 2
        from_render, direct = frontend.calls[-1]["sampling"], None
        await http.post("/v1/chat/completions", json=chat)
        direct = frontend.calls[-1]["sampling"]
        assert (from_render.temperature, from_render.top_k, from_render.seed) == (direct.temperature, direct.top_k,
                                                                                    direct.seed)  # fmt: skip
        assert from_render.max_tokens == direct.max_tokens and tuple(from_render.stop) == tuple(direct.stop)
        batch = (await http.post("/v1/completions/render", json={"prompt": ["ab", "c"], "max_tokens": 3})).json()
        assert [r["token_ids"] for r in batch] == [[ord("a") + 3, ord("b") + 3], [ord("c") + 3]]  # the byte tokenizer's
        ids = (await http.post("/v1/completions/render", json={"prompt": [5, 6], "truncate_prompt_tokens": 1})).json()
        assert [r["token_ids"] for r in ids] == [[6]]  # the intake's left truncation, applied
        for refused, name in (({"use_beam_search": True, "n": 2}, "use_beam_search"),
                              ({"response_format": {"type": "json_object"}}, "structured_outputs")):  # fmt: skip
            reply = await http.post("/v1/chat/completions/render", json={**chat, "n": 1, **refused})
            assert reply.status_code == 400 and reply.json()["error"]["param"] == name, reply.text
