"""The gateway's HTTP requests under vLLM's metric names (observe/http_metrics.py: prometheus-fastapi-instrumentator,
as vLLM's API server uses it): counted by route template and status class, a route-less path as "none", the probes'
and the scrapers' paths not at all, a 401 from the key check and a streamed reply included."""

from __future__ import annotations

import httpx
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from controlplane.gateway import create_app
from controlplane.gateway.api_keys import ApiKeyConfig
from observe.http_metrics import instrument_gateway

pytestmark = pytest.mark.anyio

CHAT = {"model": "smol", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}


def _samples(registry: CollectorRegistry, name: str) -> dict[tuple, float]:
    families = text_string_to_metric_families(generate_latest(registry).decode())
    return {tuple(sorted(s.labels.items())): s.value for f in families for s in f.samples if s.name == name}


async def test_requests_are_counted_by_route_and_status_class(make_frontend):
    registry = CollectorRegistry()
    app = create_app(make_frontend(), api_keys=ApiKeyConfig(frozenset({"k"})))
    instrument_gateway(app, registry)
    auth = {"authorization": "Bearer k"}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://g") as c:
        for _ in range(2):
            assert (await c.post("/v1/chat/completions", json=CHAT, headers=auth)).status_code == 200
        assert (await c.post("/v1/chat/completions", json={**CHAT, "stream": True}, headers=auth)).status_code == 200
        assert (await c.post("/v1/chat/completions", json=CHAT)).status_code == 401  # the key check's refusal
        assert (await c.post("/v1/chat/completions", json={"messages": []}, headers=auth)).status_code == 400
        assert (await c.get("/v1/nothing", headers=auth)).status_code == 404
        assert (await c.get(f"/v1/models/{'x' * 40}", headers=auth)).status_code == 404
        assert (await c.get("/health")).status_code == 200  # a probe: not counted
    counts = _samples(registry, "http_requests_total")
    chat = (("handler", "/v1/chat/completions"), ("method", "POST"))
    assert counts[(*chat, ("status", "2xx"))] == 3  # the stream too
    assert counts[(*chat, ("status", "4xx"))] == 2  # the 401 and the 400
    assert counts[(("handler", "none"), ("method", "GET"), ("status", "4xx"))] == 1  # no route: one series for all
    assert counts[(("handler", "/v1/models/{model:path}"), ("method", "GET"), ("status", "4xx"))] == 1
    assert not any(("handler", "/health") in key for key in counts)
    durations = _samples(registry, "http_request_duration_seconds_count")
    assert durations[chat] == 5
    assert _samples(registry, "http_request_duration_highr_seconds_count")[()] == 7
