"""HTTP API keys: 401 in OpenAI's shape without / with a wrong key, the API as usual with the right one."""

from __future__ import annotations

import importlib.metadata

import httpx
import openai
import prometheus_client
import pytest

from controlplane.gateway import create_app
from controlplane.gateway.api_keys import (
    ApiKeyConfig,
    ApiKeyError,
    ApiKeyMiddleware,
    bearer_token,
    load_api_keys,
    parse_api_keys,
)

pytestmark = pytest.mark.anyio

KEY = "zk-test-0123456789abcdef"
OTHER_KEY = "zk-second-key"


def _client(frontend, **config) -> httpx.AsyncClient:
    metrics = prometheus_client.make_asgi_app(prometheus_client.CollectorRegistry())
    app = create_app(frontend, metrics_app=metrics, api_keys=ApiKeyConfig(frozenset({KEY, OTHER_KEY}), **config))
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gateway")


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _assert_401(r: httpx.Response, code: str | None) -> None:
    assert r.status_code == 401
    assert r.headers["content-type"] == "application/json"
    assert r.headers["www-authenticate"].startswith("Bearer")
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert (error["type"], error["param"], error["code"]) == ("invalid_request_error", None, code)


CHAT = {"model": "smol", "messages": [{"role": "user", "content": "hi"}]}


async def test_no_key_wrong_key_and_right_key(frontend):
    async with _client(frontend) as c:
        r = await c.post("/v1/chat/completions", json=CHAT)
        _assert_401(r, None)
        assert "didn't provide an API key" in r.json()["error"]["message"]
        for wrong in ("zk-wrong", KEY + "x", KEY[:-1], "Basic " + KEY):
            r = await c.post("/v1/chat/completions", json=CHAT, headers=_auth(wrong))
            _assert_401(r, "invalid_api_key")
            assert wrong not in r.text  # a wrong key is never echoed
        r = await c.post("/v1/chat/completions", json=CHAT, headers={"Authorization": KEY})  # no scheme
        _assert_401(r, None)
        assert frontend.calls == []  # nothing reached the control plane

        for key in (KEY, OTHER_KEY):
            r = await c.post("/v1/chat/completions", json=CHAT, headers=_auth(key))
            assert r.status_code == 200, r.text
            assert r.json()["choices"][0]["message"]["content"] == "Hello, world"
        r = await c.post("/v1/chat/completions", json=CHAT, headers={"authorization": f"bearer  {KEY} "})
        assert r.status_code == 200  # the scheme is case-insensitive, spaces around the token are not part of it
        assert len(frontend.calls) == 3


async def test_streams_pass_through_and_every_path_needs_a_key(frontend):
    async with _client(frontend) as c:
        async with c.stream("POST", "/v1/completions", json={"model": "smol", "prompt": "x", "stream": True},
                            headers=_auth(KEY)) as r:  # fmt: skip
            assert r.status_code == 200
            events = [line async for line in r.aiter_lines() if line.startswith("data: ")]
        assert events[-1] == "data: [DONE]" and len(events) >= 4  # 3 tokens (+ a finish event), [DONE]
        for path in ("/v1/models", "/v1/models/smol", "/no/such/path"):
            _assert_401(await c.get(path), None)
        assert (await c.get("/v1/models", headers=_auth(KEY))).json()["data"][0]["id"] == "smol"
        assert (await c.get("/no/such/path", headers=_auth(KEY))).status_code == 404


async def test_health_open_and_metrics_protected_by_default_and_both_configurable(frontend):
    async with _client(frontend) as c:
        assert (await c.get("/health")).status_code == 200
        assert (await c.get("/ping")).status_code == (await c.post("/ping")).status_code == 200  # SageMaker's path
        assert (await c.get("/version")).json() == {"version": importlib.metadata.version("silicon-zoo")}
        _assert_401(await c.get("/metrics"), None)
        assert (await c.get("/metrics", headers=_auth(KEY))).status_code == 200
    async with _client(frontend, protect_health=True, protect_metrics=False) as c:
        for path in ("/health", "/ping", "/version"):
            _assert_401(await c.get(path), None)
            assert (await c.get(path, headers=_auth(KEY))).status_code == 200
        assert (await c.get("/metrics")).status_code == 200


async def test_openai_sdk_raises_authentication_error(frontend):
    metrics = prometheus_client.make_asgi_app(prometheus_client.CollectorRegistry())
    app = create_app(frontend, metrics_app=metrics, api_keys=ApiKeyConfig(frozenset({KEY})))
    transport = httpx.ASGITransport(app=app)

    def sdk(key: str) -> openai.AsyncOpenAI:
        http = httpx.AsyncClient(transport=transport, base_url="http://gateway")
        return openai.AsyncOpenAI(api_key=key, base_url="http://gateway/v1", http_client=http, max_retries=0)

    with pytest.raises(openai.AuthenticationError) as info:
        await sdk("zk-wrong").chat.completions.create(model="smol", messages=[{"role": "user", "content": "hi"}])
    assert info.value.status_code == 401 and info.value.code == "invalid_api_key"
    reply = await sdk(KEY).chat.completions.create(model="smol", messages=[{"role": "user", "content": "hi"}])
    assert reply.choices[0].message.content == "Hello, world"


async def test_refusals_are_counted_by_kind():
    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    guard = ApiKeyMiddleware(app, ApiKeyConfig(frozenset({KEY})))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=guard), base_url="http://g") as c:
        statuses = [
            (await c.get("/v1/models")).status_code,
            (await c.get("/v1/models", headers=_auth("nope"))).status_code,
            (await c.get("/v1/models", headers=_auth(KEY))).status_code,
        ]
    assert statuses == [401, 401, 204]
    assert guard.refused == {"missing_api_key": 1, "invalid_api_key": 1}


def test_key_files_and_config_checks(tmp_path):
    path = tmp_path / "keys"
    path.write_text(f"# the team's keys\n{KEY}\n\n  {OTHER_KEY}  # ci\n")
    assert load_api_keys(path) == [KEY, OTHER_KEY]
    assert parse_api_keys("a, b c") == ["a", "b", "c"]
    with pytest.raises(ApiKeyError):
        load_api_keys(tmp_path / "missing")
    with pytest.raises(ApiKeyError):
        ApiKeyConfig(frozenset())
    with pytest.raises(ApiKeyError):
        ApiKeyConfig(frozenset({"has space"}))
    assert KEY not in repr(ApiKeyConfig(frozenset({KEY})))
    assert bearer_token([(b"authorization", b"Bearer abc")]) == b"abc"
    assert bearer_token([(b"authorization", b"Bearer ")]) is None
    assert bearer_token([(b"x-api-key", b"abc")]) == b"abc"  # Anthropic's SDK sends its key so (/v1/messages)
    assert bearer_token([(b"authorization", b"Basic x"), (b"x-api-key", b"abc")]) is None


async def test_websocket_without_a_key_is_closed_before_any_route():
    reached: list[str] = []

    async def app(scope, receive, send):
        reached.append(scope["type"])

    guard = ApiKeyMiddleware(app, ApiKeyConfig(frozenset({KEY})))
    sent: list[dict] = []

    async def send(message: dict) -> None:
        sent.append(message)

    async def receive() -> dict:
        return {"type": "websocket.connect"}

    await guard({"type": "websocket", "path": "/v1/x", "headers": []}, receive, send)
    assert sent == [{"type": "websocket.close", "code": 1008}] and reached == []
    await guard({"type": "websocket", "path": "/v1/x", "headers": [(b"authorization", f"Bearer {KEY}".encode())]},
                receive, send)  # fmt: skip
    await guard({"type": "lifespan"}, receive, send)
    assert reached == ["websocket", "lifespan"]
