"""HTTP edges: bounded fields (400 naming them), deep JSON (400, not 500), read deadlines (408), every error
body in OpenAI's shape (the router's 404/405, the server's own 400/408, an unexpected 500), HEAD answered."""

from __future__ import annotations

import contextlib
import json

import anyio
import httpx
import prometheus_client
import pytest

from controlplane.gateway import GatewayConfig, create_app
from controlplane.gateway.http_server import serve_gateway

pytestmark = pytest.mark.anyio

CHAT = {"model": "smol", "messages": [{"role": "user", "content": "hi"}]}
COMPLETION = {"model": "smol", "prompt": "hi"}


def _assert_openai_error(r: httpx.Response, status: int, param: str | None = None) -> dict:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and isinstance(error["message"], str)
    assert error["param"] == param
    assert len(error["message"]) < 1_000
    return error


# -- bounds, over HTTP ------------------------------------------------------------------------------------

HUGE = [
    ("max_tokens", 2**64, "max_tokens"),
    ("max_tokens", 2**31, "max_tokens"),
    ("max_completion_tokens", 2**64, "max_completion_tokens"),
    ("top_k", 2**64, "top_k"),
    ("top_k", 2**31, "top_k"),
    ("stop_token_ids", [2**64], "stop_token_ids"),
    ("stop_token_ids", [2**31], "stop_token_ids"),
    ("seed", 2**64, "seed"),
    ("temperature", 1e300, "temperature"),
    ("stop", ["x"] * 200_000, "stop"),
    ("stop", ["x"] * 17, "stop"),
    ("stop", ["x" * 1025], "stop"),
    ("stop_token_ids", list(range(257)), "stop_token_ids"),
    ("n", 2**64, "n"),
]


@pytest.mark.parametrize(("field", "value", "param"), HUGE, ids=[f"{f}-{i}" for i, (f, _, _) in enumerate(HUGE)])
async def test_an_out_of_bounds_field_is_a_400_naming_it(client, frontend, field, value, param):
    r = await client.post("/v1/chat/completions", json={**CHAT, field: value})
    _assert_openai_error(r, 400, param)
    assert frontend.calls == []  # refused before the control plane saw it


@pytest.mark.parametrize("ids", [[2**64], [2**31], [-1], [5, -(2**64)]])
async def test_prompt_token_ids_out_of_int32_are_a_400(client, frontend, ids):
    r = await client.post("/v1/completions", json={**COMPLETION, "prompt": ids})
    _assert_openai_error(r, 400, "prompt")
    assert frontend.calls == []


# -- deep nesting --------------------------------------------------------------------------------------------


def _deep(depth: int = 2_000) -> str:
    return "[" * depth + "]" * depth


DEEP_BODIES = {
    "the whole body": _deep(),
    "an unknown field": json.dumps(CHAT)[:-1] + f', "junk": {_deep()}}}',
    "tools": json.dumps(CHAT)[:-1] + f', "tools": [{{"x": {_deep()}}}]}}',
    "messages": '{"messages": ' + _deep() + "}",
    "100k deep": _deep(100_000),
}


@pytest.mark.parametrize("where", list(DEEP_BODIES))
@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
async def test_json_nested_2000_deep_is_a_400(client, frontend, path, where):
    r = await client.post(path, content=DEEP_BODIES[where].encode(), headers={"content-type": "application/json"})
    assert r.status_code == 400, r.text
    _assert_openai_error(r, 400, r.json()["error"]["param"])
    r = await client.post("/v1/chat/completions", json=CHAT)  # and the next request is served
    assert r.status_code == 200


# -- the router's and Starlette's own errors -------------------------------------------------------------------


async def test_404_and_405_are_openai_errors_with_allow(client):
    _assert_openai_error(await client.get("/nowhere/" + "x" * 10_000), 404)
    error = _assert_openai_error(r := await client.get("/v1/completions"), 405)
    assert "POST" in r.headers["allow"] and "GET /v1/completions" in error["message"]
    _assert_openai_error(await client.delete("/health"), 405)


async def test_head_is_answered_on_health_models_and_metrics(frontend):
    registry = prometheus_client.CollectorRegistry()
    app = create_app(frontend, metrics_app=prometheus_client.make_asgi_app(registry))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://g") as c:
        for path in ("/health", "/metrics", "/v1/models"):
            r = await c.head(path)
            assert r.status_code == 200 and r.content == b"", path
        _assert_openai_error(await c.post("/metrics"), 405)


async def test_an_unexpected_exception_is_a_json_500(frontend):
    async def broken_metrics(scope, receive, send):
        raise RuntimeError("exporter bug")

    app = create_app(frontend, metrics_app=broken_metrics)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://g") as c:
        error = _assert_openai_error(await c.get("/metrics"), 500)
        assert error["type"] == "server_error"


def test_gateway_config_rejects_bad_timeouts():
    for bad in (0, -1.0, float("inf")):
        with pytest.raises(ValueError, match="request_read_timeout_s"):
            GatewayConfig(request_read_timeout_s=bad)


# -- served by uvicorn: read deadlines, bad HTTP ---------------------------------------------------------------


@contextlib.asynccontextmanager
async def _serving(frontend, config: GatewayConfig):
    """The gateway served by serve_gateway on a free loopback port; yields (host, port)."""
    registry = prometheus_client.CollectorRegistry()
    app = create_app(frontend, metrics_app=prometheus_client.make_asgi_app(registry), config=config)
    async with anyio.create_task_group() as tg:
        server = await tg.start(serve_gateway, app, "127.0.0.1", 0, config)
        try:
            yield "127.0.0.1", server.servers[0].sockets[0].getsockname()[1]
        finally:
            tg.cancel_scope.cancel()


@pytest.fixture
async def gateway(frontend):
    """The gateway with 0.3 s read deadlines."""
    async with _serving(frontend, GatewayConfig(request_read_timeout_s=0.3, keep_alive_timeout_s=5.0)) as address:
        yield address


async def _exchange(address, data: bytes) -> bytes:
    """Send ``data`` on a new connection and read until the server closes it."""
    async with await anyio.connect_tcp(*address) as stream:
        await stream.send(data)
        reply = b""
        with anyio.fail_after(20):
            try:
                while True:
                    reply += await stream.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError, ConnectionResetError):
                pass
    return reply


def _parse(reply: bytes) -> tuple[int, dict[str, str], dict]:
    head, _, body = reply.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode().split("\r\n")
    headers = dict(line.split(": ", 1) for line in header_lines)
    headers = {k.lower(): v for k, v in headers.items()}
    return int(status_line.split()[1]), headers, json.loads(body)


async def test_headers_that_never_finish_get_a_408_and_the_connection_closes(gateway):
    reply = await _exchange(gateway, b"POST /v1/completions HTTP/1.1\r\nHost: g\r\nContent-Type: app")
    status, headers, body = _parse(reply)
    assert status == 408 and headers["connection"] == "close"
    assert body["error"]["code"] == "request_timeout"


async def test_a_silent_connection_gets_a_408(gateway):
    status, _, body = _parse(await _exchange(gateway, b""))
    assert status == 408 and body["error"]["type"] == "invalid_request_error"


async def test_a_body_that_never_finishes_gets_a_408_and_the_connection_closes(gateway, frontend):
    head = b"POST /v1/completions HTTP/1.1\r\nHost: g\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n"
    status, headers, body = _parse(await _exchange(gateway, head + b'{"prompt": "x'))
    assert status == 408 and headers["connection"] == "close"
    assert body["error"]["code"] == "request_timeout" and frontend.calls == []


async def test_bytes_that_are_not_http_get_a_json_400(gateway):
    status, headers, body = _parse(await _exchange(gateway, b"\x16\x03\x01 not http at all\r\n\r\n"))
    assert status == 400 and headers["connection"] == "close"
    assert body["error"]["type"] == "invalid_request_error"


async def test_after_the_edges_the_server_still_serves(gateway):
    await _exchange(gateway, b"GARBAGE\r\n\r\n")
    await _exchange(gateway, b"POST /v1/completions HTTP/1.1\r\nHost: g\r\n")
    async with httpx.AsyncClient(base_url=f"http://{gateway[0]}:{gateway[1]}") as c:
        r = await c.post("/v1/completions", json=COMPLETION)
        assert r.status_code == 200 and r.json()["choices"][0]["text"] == "Hello, world"
        assert (await c.head("/health")).status_code == 200
        assert (await c.head("/metrics")).status_code == 200
        _assert_openai_error(await c.get("/v1/completions"), 405)


async def test_a_kept_alive_connection_gets_the_header_deadline_again(gateway):
    request = b"GET /health HTTP/1.1\r\nHost: g\r\n\r\n"
    reply = await _exchange(gateway, request + b"GET /health HTTP/1.1\r\nHost: g\r\n")  # 2nd never finishes
    first, _, rest = reply.partition(b"\r\n\r\n")
    assert first.startswith(b"HTTP/1.1 200")
    assert b"HTTP/1.1 408" in rest


async def test_a_body_still_coming_after_a_413_is_cut_off_at_the_deadline(frontend):
    config = GatewayConfig(max_body_bytes=64, request_read_timeout_s=0.3, keep_alive_timeout_s=600.0)
    async with _serving(frontend, config) as address:
        head = b"POST /v1/completions HTTP/1.1\r\nHost: g\r\nContent-Length: 100000\r\n\r\n"
        reply = await _exchange(address, head + b"x" * 100)  # and then nothing: the connection must close
    assert reply.startswith(b"HTTP/1.1 413") and b"request_too_large" in reply
