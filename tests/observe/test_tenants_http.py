"""Tenants and classes end to end over HTTP: a real control plane with two cells, two fake-runner agent
processes, the gateway with a key file that maps keys to tenants. A tenant's class beats the request's
``x-zoo-class``; past its requests/min or its tokens/min it gets OpenAI's 429 with Retry-After; /metrics
counts per class (P50 and P99 with a ``class`` label) and per tenant."""

from __future__ import annotations

import anyio
import httpx
import pytest
import zmq
import zmq.asyncio
from prometheus_client.parser import text_string_to_metric_families

from controlplane.cells import parse_cells
from controlplane.gateway.api_keys import ApiKeyConfig, parse_api_keys
from controlplane.gateway.app import create_app
from controlplane.tenants import parse_key_tenants
from engine.sampling_params import SamplingParams
from transport.codec import decode, encode
from transport.messages import ClientGenerate, ErrorReply, TokenChunk

pytestmark = pytest.mark.anyio

KEY_FILE = """
zk-crawl tenant=crawler class=batch rpm=2
zk-gold tenant=gold
zk-tok tenant=tokens tpm=12
"""
CELLS = {
    "cells": [{"name": "vip"}, {"name": "bulk", "gpu_types": ["L4"]}],
    "traffic_classes": [{"name": "vip", "cell": "vip", "priority": 2}, {"name": "batch", "cell": "bulk"}],
}
MAX_TOKENS = 3


async def _zmq_generate(endpoint: str, tenant: str) -> str:
    ctx = zmq.asyncio.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    try:
        msg = ClientGenerate(
            request_id="zmq-1", prompt="hi", sampling=SamplingParams(max_tokens=1), traffic_class="batch", tenant=tenant
        )
        await sock.send_multipart(encode(msg))
        with anyio.fail_after(20):
            while True:
                reply, _ = decode(await sock.recv_multipart())
                if isinstance(reply, ErrorReply):
                    return reply.code.value
                if isinstance(reply, TokenChunk) and reply.finished:
                    return "finished"
    finally:
        sock.close(linger=0)
        ctx.term()


def _samples(text: str) -> dict[tuple[str, frozenset], float]:
    return {
        (s.name, frozenset(s.labels.items())): s.value for f in text_string_to_metric_families(text) for s in f.samples
    }


async def test_tenant_class_rate_limit_and_metrics(observed_controlplane, spawn_agent):
    tenant_of, tenants = parse_key_tenants(KEY_FILE)
    api_keys = ApiKeyConfig(frozenset(parse_api_keys(KEY_FILE)), tenant_of=tenant_of)
    async with observed_controlplane(tenants=tenants) as (cp, exporter, observer):
        cp.config.router.cells = parse_cells(CELLS)  # before any node joins: cells by label and GPU type
        spawn_agent(cp.agent_endpoint, "bulk-0", "--fake-gpu-type", "L4")
        spawn_agent(cp.agent_endpoint, "vip-0", "--cell", "vip")
        await cp.wait_until(lambda: "bulk-0" in cp.registry and "vip-0" in cp.registry, 30)
        assert {v.node_id: v.cell for v in cp.registry.snapshot().nodes} == {"bulk-0": "bulk", "vip-0": "vip"}

        app = create_app(cp, metrics_app=exporter.asgi_app(observer.poll), api_keys=api_keys)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://cp") as http:

            async def complete(key: str, traffic_class: str | None = None, prompt: str = "hello") -> httpx.Response:
                headers = {"authorization": f"Bearer {key}"}
                if traffic_class is not None:
                    headers["x-zoo-class"] = traffic_class
                body = {"prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0}
                return await http.post("/v1/completions", json=body, headers=headers)

            remaining = []
            for _ in range(2):  # the crawler asks for vip and gets its own class, batch, in the bulk cell
                served = await complete("zk-crawl", "vip")
                assert served.status_code == 200 and served.headers["x-ratelimit-limit-requests"] == "2"
                remaining.append(served.headers["x-ratelimit-remaining-requests"])  # OpenAI's headers, each reply
            assert remaining == ["1", "0"] and "x-ratelimit-limit-tokens" not in served.headers  # no token limit
            limited = await complete("zk-crawl")
            assert limited.status_code == 429
            assert int(limited.headers["retry-after"]) >= 1
            assert limited.headers["x-ratelimit-remaining-requests"] == "0"
            assert limited.headers["x-ratelimit-reset-requests"].endswith("s")  # a bucket of 2 a minute: ~1 min
            error = limited.json()["error"]
            assert error["type"] == "rate_limit_error" and error["code"] == "rate_limit_exceeded"
            assert "crawler" in error["message"] and "2 requests/min" in error["message"]

            # 12 tokens/min (0.2 a second): 5 prompt tokens (+ 3 output, charged at the end) leave at most 7, and
            # 12 prompt tokens need a full bucket: > 25 s away whatever the machine's speed
            first = await complete("zk-tok")
            assert first.status_code == 200 and first.headers["x-ratelimit-limit-tokens"] == "12"
            assert 4 <= int(first.headers["x-ratelimit-remaining-tokens"]) <= 7  # 5 prompt, 3 output charged at end
            over_tokens = await complete("zk-tok", prompt="hello, zoo!!")
            assert over_tokens.status_code == 429 and int(over_tokens.headers["retry-after"]) >= 25
            error = over_tokens.json()["error"]
            assert error["code"] == "rate_limit_exceeded" and "12 tokens/min" in error["message"]

            gold = await complete("zk-gold", "vip")  # no class of its own: asks for vip
            assert gold.status_code == 200 and "x-ratelimit-limit-requests" not in gold.headers  # no limits
            unknown = await complete("zk-gold", "platinum")
            assert unknown.status_code == 400 and unknown.json()["error"]["param"] == "traffic_class"
            metrics = _samples((await http.get("/metrics", headers={"authorization": "Bearer zk-gold"})).text)
        # a ZeroMQ client naming the crawler is not the crawler (which is out of requests): not refused
        assert await _zmq_generate(cp.client_endpoint, tenant="crawler") == "finished"
        assert cp.stats()["tenants"]["crawler"]["num_refused"] == 1

    classes = cp.stats()["classes"]
    assert classes["batch"]["cells"] == {"bulk": 3} and classes["batch"]["requests_refused"] == 1
    assert classes["vip"]["cells"] == {"vip": 2}

    def metric(name: str, **labels: str) -> float:
        return metrics[(name, frozenset(labels.items()))]

    assert metric("zoo:tenant_requests_total", tenant="crawler", outcome="admitted") == 2
    assert metric("zoo:tenant_requests_total", tenant="crawler", outcome="rate_limited") == 1
    assert metric("zoo:tenant_tokens_total", tenant="crawler", kind="completion") == 2 * MAX_TOKENS
    assert metric("zoo:tenant_tokens_total", tenant="gold", kind="prompt") == len(b"hello")
    assert metric("zoo:tenant_requests_total", tenant="tokens", outcome="admitted") == 1
    assert metric("zoo:tenant_requests_total", tenant="tokens", outcome="rate_limited") == 1
    assert metric("zoo:class_requests_total", **{"class": "vip", "outcome": "served"}) == 2
    for name in ("zoo:class_time_to_first_token_seconds", "zoo:class_time_per_output_token_seconds"):
        for traffic_class in ("vip", "batch"):
            p50 = metric(name, **{"class": traffic_class, "quantile": "0.5"})
            assert 0 < p50 <= metric(name, **{"class": traffic_class, "quantile": "0.99"})
