"""The gateway's OpenAI details on the ASGI app with the scripted fake frontend: the arrival clock handed to the
frontend, n choices, continuous usage, cached tokens, /tokenize and /detokenize refusals, /v1/models waiting for
a node, and OPTIONS on every route (ahead of the API-key check)."""

from __future__ import annotations

import json
import time

import anyio
import httpx
import pytest

from controlplane.gateway import create_app
from controlplane.gateway.api_keys import ApiKeyConfig
from transport.messages import TokenChunk

MODEL = "smol"
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}]}


def _events(response: httpx.Response) -> list[dict]:
    lines = [line.removeprefix("data: ") for line in response.text.splitlines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    return [json.loads(line) for line in lines[:-1]]


@pytest.mark.anyio
async def test_the_frontend_gets_the_arrival_time_before_the_body_was_read(client, frontend):
    before_ns = time.monotonic_ns()
    r = await client.post("/v1/chat/completions", json=CHAT)
    assert r.status_code == 200
    assert before_ns <= frontend.calls[0]["arrival_ns"] <= time.monotonic_ns()


@pytest.mark.anyio
async def test_n_choices_non_streamed_and_streamed(client, frontend):
    r = await client.post("/v1/completions", json={"model": MODEL, "prompt": "x", "n": 3, "seed": 5})
    body = r.json()
    assert frontend.calls[0]["num_choices"] == 3
    assert [c["index"] for c in body["choices"]] == [0, 1, 2]
    assert {c["text"] for c in body["choices"]} == {"Hello, world"}
    assert body["usage"]["prompt_tokens"] == 5 and body["usage"]["completion_tokens"] == 9

    r = await client.post("/v1/chat/completions", json={**CHAT, "n": 2, "stream": True})
    events = _events(r)
    roles = [e["choices"][0]["index"] for e in events if e["choices"][0]["delta"].get("role")]
    assert roles == [0, 1]  # one role delta per choice, then the choices interleaved
    texts = {0: "", 1: ""}
    for e in events:
        texts[e["choices"][0]["index"]] += e["choices"][0]["delta"].get("content") or ""
    assert texts == {0: "Hello, world", 1: "Hello, world"}
    finishes = [e["choices"][0]["index"] for e in events if e["choices"][0]["finish_reason"]]
    assert sorted(finishes) == [0, 1]


@pytest.mark.anyio
async def test_usage_reports_cached_tokens_and_continuous_usage(client, frontend, script):
    chunks = script("a", "b", "c", num_prompt_tokens=40)
    frontend.chunks = [
        TokenChunk(**{f: getattr(c, f) for f in c.__struct_fields__ if f != "num_cached_tokens"}, num_cached_tokens=32)
        for c in chunks
    ]
    body = (await client.post("/v1/chat/completions", json=CHAT)).json()
    assert body["usage"]["prompt_tokens_details"] == {"cached_tokens": 32}

    stream = {**CHAT, "stream": True, "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    events = _events(await client.post("/v1/chat/completions", json=stream))
    assert [e["usage"]["completion_tokens"] for e in events] == [0, 1, 2, 3, 3, 3]  # role, a, b, c, finish, usage
    assert {e["usage"]["prompt_tokens"] for e in events} == {40}

    stream["stream_options"] = {"include_usage": False, "continuous_usage_stats": True}  # vLLM's: with include_usage
    events = _events(await client.post("/v1/chat/completions", json=stream))
    assert all("usage" not in e for e in events)


@pytest.mark.parametrize(
    ("path", "body", "status", "param"),
    [
        ("/tokenize", {"prompt": "a", "messages": [{"role": "user", "content": "a"}]}, 400, "prompt"),
        ("/tokenize", {}, 400, "prompt"),
        ("/tokenize", {"messages": []}, 400, "messages"),
        ("/tokenize", {"prompt": "a", "model": "gpt-9"}, 404, "model"),
        ("/tokenize", {"prompt": 5}, 400, "prompt"),
        (
            "/tokenize",
            {
                "messages": [{"role": "user", "content": "a"}],
                "tools": [{"type": "function", "function": {"name": "a b"}}],
            },
            400,
            "tools",
        ),
        (
            "/tokenize",
            {
                "messages": [{"role": "user", "content": "a"}],
                "tools": [{"type": "function", "function": {"name": "f", "parameters": {"a": [[[[1]]]]}}}],
            },
            200,
            None,
        ),
        ("/detokenize", {"tokens": [1, 2**40]}, 400, "tokens"),
        ("/detokenize", {"tokens": "abc"}, 400, "tokens"),
        ("/detokenize", {}, 400, "tokens"),
    ],
)
@pytest.mark.anyio
async def test_tokenize_refusals(client, path, body, status, param):
    r = await client.post(path, json=body)
    assert r.status_code == status, r.text
    if status != 200:
        assert r.json()["error"]["param"] == param


@pytest.mark.anyio
async def test_tokenize_renders_a_chats_tools_as_a_chat_completion_does(client, frontend):
    messages = [{"role": "user", "content": "Weather?"}]
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    plain = (await client.post("/tokenize", json={"messages": messages})).json()
    with_tools = (await client.post("/tokenize", json={"messages": messages, "tools": tools})).json()
    text = frontend.tokenizer.decode(with_tools["tokens"])
    assert with_tools["count"] > plain["count"] and '"name":"get_weather"' in text and "<tools>" in text


@pytest.mark.anyio
async def test_tokenize_without_a_tokenizer_is_501(client, frontend):
    frontend.tokenizer = None
    r = await client.post("/tokenize", json={"prompt": "a"})
    assert r.status_code == 501 and r.json()["error"]["code"] == "not_implemented"


@pytest.mark.anyio
async def test_models_wait_for_a_node(frontend):
    frontend.model_names = []
    waiting, joined = anyio.Event(), anyio.Event()
    replies = []

    async def wait_for_models(timeout_s: float) -> list[str]:
        waiting.set()
        await joined.wait()
        return [MODEL]

    frontend.wait_for_models = wait_for_models
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(frontend)), base_url="http://gateway")
    async with client, anyio.create_task_group() as tg:

        async def get_models() -> None:
            replies.append(await client.get("/v1/models"))

        tg.start_soon(get_models)
        await waiting.wait()
        assert replies == []  # no node yet: the request waits
        joined.set()
    assert [m["id"] for m in replies[0].json()["data"]] == [MODEL]


@pytest.mark.parametrize(
    ("path", "allow"),
    [
        ("/v1/completions", {"POST", "OPTIONS"}),
        ("/v1/chat/completions", {"GET", "HEAD", "POST", "OPTIONS"}),  # the create, and the stored ones' list
        ("/v1/chat/completions/chatcmpl-1", {"GET", "HEAD", "POST", "DELETE", "OPTIONS"}),
        ("/v1/models", {"GET", "HEAD", "OPTIONS"}),
        ("/v1/models/smol", {"GET", "HEAD", "OPTIONS"}),
        ("/tokenize", {"POST", "OPTIONS"}),
        ("/health", {"GET", "HEAD", "OPTIONS"}),
        ("/v1/responses/resp_1", {"GET", "HEAD", "DELETE", "OPTIONS"}),
    ],
)
@pytest.mark.anyio
async def test_options_answers_every_route_without_a_key(frontend, path, allow):
    app = create_app(frontend, api_keys=ApiKeyConfig(frozenset({"sk-test"})))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gateway") as client:
        r = await client.request("OPTIONS", path)
        assert r.status_code == 204, r.text
        assert {m.strip() for m in r.headers["allow"].split(",")} == allow
        assert (await client.request("OPTIONS", "/nowhere")).status_code == 401  # unknown: the key check says no


def test_options_asterisk_names_every_method_the_server_serves(frontend):
    from controlplane.gateway.http_methods import OptionsMiddleware

    routes = create_app(frontend).routes
    scope = {"type": "http", "method": "OPTIONS", "path": "*", "raw_path": b"*", "root_path": ""}
    assert OptionsMiddleware(None, routes).allowed_methods(scope) == {"GET", "HEAD", "POST", "DELETE"}
