"""CORS: a browser page calling the gateway (Starlette's CORSMiddleware, outside the key check): the preflight is
answered without a key, every reply carries the origin headers (an error too, so the page can read it), the exposed
headers include x-request-id and Retry-After; origins can be listed or CORS turned off; bad origins are refused at
configuration; ``zoo controlplane --cors-origins`` builds the config."""

from __future__ import annotations

import argparse

import httpx
import pytest

from controlplane.gateway import GatewayConfig, create_app
from controlplane.gateway.api_keys import ApiKeyConfig
from zoo.serve import gateway_config_from_args

PAGE = "https://chat.example.com"
PREFLIGHT = {"origin": PAGE, "access-control-request-method": "POST", "access-control-request-headers": "authorization"}
BODY = {"model": "smol", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}

pytestmark = pytest.mark.anyio


def _client(frontend, **config) -> httpx.AsyncClient:
    app = create_app(frontend, config=GatewayConfig(**config), api_keys=ApiKeyConfig(frozenset({"sk-zoo"})))
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gateway")


async def test_any_origin_by_default_preflight_without_a_key(frontend):
    async with _client(frontend) as c:
        r = await c.options("/v1/chat/completions", headers=PREFLIGHT)
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "*"
        assert "POST" in r.headers["access-control-allow-methods"]
        assert "authorization" in r.headers["access-control-allow-headers"].lower()
        ok = await c.post("/v1/chat/completions", json=BODY, headers={"origin": PAGE, "authorization": "Bearer sk-zoo"})
        assert ok.status_code == 200 and ok.headers["access-control-allow-origin"] == "*"
        assert "x-request-id" in ok.headers["access-control-expose-headers"]
        refused = await c.post("/v1/chat/completions", json=BODY, headers={"origin": PAGE})
        assert refused.status_code == 401 and refused.headers["access-control-allow-origin"] == "*"
        plain = await c.options("/v1/chat/completions")  # not a preflight: the route's Allow, as before
        assert plain.status_code == 204 and "access-control-allow-origin" not in plain.headers


async def test_listed_origins_only_and_cors_off(frontend):
    async with _client(frontend, cors_allowed_origins=(PAGE,)) as c:
        assert (await c.options("/v1/models", headers=PREFLIGHT)).headers["access-control-allow-origin"] == PAGE
        other = await c.options("/v1/models", headers={**PREFLIGHT, "origin": "https://evil.example"})
        assert other.status_code == 400 and "access-control-allow-origin" not in other.headers
    async with _client(frontend, cors_allowed_origins=()) as c:
        r = await c.get("/health", headers={"origin": PAGE})
        assert r.status_code == 200 and "access-control-allow-origin" not in r.headers


def test_origins_are_checked_and_the_flag_builds_them():
    for bad in ("chat.example.com", "https://a.example/path", "javascript:alert(1)", ""):
        with pytest.raises(ValueError, match="cors_allowed_origins"):
            GatewayConfig(cors_allowed_origins=(bad,))
    assert gateway_config_from_args(argparse.Namespace(cors_origins="none")).cors_allowed_origins == ()
    listed = gateway_config_from_args(argparse.Namespace(cors_origins=f"{PAGE}, http://localhost:3000"))
    assert listed.cors_allowed_origins == (PAGE, "http://localhost:3000")
    with pytest.raises(SystemExit, match="--cors-origins"):
        gateway_config_from_args(argparse.Namespace(cors_origins="ftp://x"))


async def test_vllms_cors_flags_methods_headers_and_credentials(frontend, capsys):
    from zoo.cli import build_parser

    args = build_parser().parse_args([
        "controlplane", "--fake-tokenizer", "--allowed-origins", f'["{PAGE}"]', "--allowed-methods", '["POST"]',
        "--allowed-headers", '["authorization", "content-type"]', "--allow-credentials",
    ])  # fmt: skip
    config = gateway_config_from_args(args)
    assert config.cors_allowed_origins == (PAGE,) and config.cors_allow_credentials
    app = create_app(frontend, config=config, api_keys=ApiKeyConfig(frozenset({"sk-zoo"})))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gateway") as c:
        r = await c.options("/v1/chat/completions", headers=PREFLIGHT)
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == PAGE
        assert r.headers["access-control-allow-methods"] == "POST"
        assert r.headers["access-control-allow-credentials"] == "true"
        bad = await c.options("/v1/chat/completions", headers={**PREFLIGHT, "access-control-request-method": "DELETE"})
        assert bad.status_code == 400  # a method not allowed: the preflight fails
    for flags, says in (
        (["--allowed-origins", "*"], "JSON list of strings"),
        (["--allowed-methods", '"POST"'], "JSON list of strings"),
    ):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["controlplane", *flags])
        assert says in capsys.readouterr().err
    both = build_parser().parse_args(["controlplane", "--cors-origins", PAGE, "--allowed-origins", f'["{PAGE}"]'])
    with pytest.raises(SystemExit, match="give one"):
        gateway_config_from_args(both)
