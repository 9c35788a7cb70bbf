"""The gateway's HTTP server span (gateway/http_span.py): one per request, named and attributed by OpenTelemetry's
HTTP semantic conventions, the caller's child and the parent of what the control plane records for the request;
5xx is an error and 4xx is not; probes' paths, unsampled callers and a gateway without tracing record nothing."""

from __future__ import annotations

import httpx
import pytest

from controlplane.frontend import FrontendError
from controlplane.gateway import create_app
from controlplane.gateway.api_keys import ApiKeyConfig
from controlplane.gateway.app import GatewayConfig
from controlplane.request_spans import RequestSpans
from transport.messages import ErrorCode
from transport.trace_context import SpanRecord, incoming

pytestmark = pytest.mark.anyio

MODEL = "smol"
CALLER = f"00-{0xABC:032x}-{0x123:016x}-01"
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}


class Sink:
    def __init__(self) -> None:
        self.records: list[SpanRecord] = []

    def emit(self, record: SpanRecord) -> None:
        self.records.append(record)


def _client(frontend, sink: Sink, ratio: float = 1.0, **kwargs) -> httpx.AsyncClient:
    frontend.request_spans = RequestSpans(sink, sample_ratio=ratio)  # a control plane that traces
    transport = httpx.ASGITransport(app=create_app(frontend, **kwargs), client=("10.1.2.3", 5555))
    return httpx.AsyncClient(transport=transport, base_url="http://gateway.test:8000")


async def test_a_request_has_a_server_span_under_the_callers_and_over_the_control_planes(frontend):
    sink = Sink()
    async with _client(frontend, sink) as c:
        headers = {"traceparent": CALLER, "user-agent": "t/1", "x-request-id": "proxy-42"}
        r = await c.post("/v1/chat/completions", json=CHAT, headers=headers)
    assert r.status_code == 200
    (span,) = sink.records
    assert span.name == "POST /v1/chat/completions" and span.kind == "server" and span.error is None
    assert (span.context.trace_id, span.context.parent_span_id) == (0xABC, 0x123)
    assert span.attributes == {
        "http.request.method": "POST",
        "url.scheme": "http",
        "url.path": "/v1/chat/completions",
        "http.route": "/v1/chat/completions",
        "http.response.status_code": 200,
        "network.protocol.version": "1.1",
        "server.address": "gateway.test",
        "server.port": 8000,
        "client.address": "10.1.2.3",
        "user_agent.original": "t/1",
        "http.request.header.x-request-id": ["proxy-42"],  # the proxy's id: the reply's too (gateway/request_ids.py)
        "http.response.header.x-request-id": ["proxy-42"],
    }
    assert r.headers["x-request-id"] == "proxy-42" and r.json()["id"] == "chatcmpl-proxy-42"
    assert span.start_ns <= span.end_ns
    (call,) = frontend.calls
    parent = incoming(call["trace_headers"])  # what the control plane's llm_request span is made the child of
    assert (parent.trace_id, parent.span_id) == (0xABC, span.context.span_id)


async def test_a_route_with_parameters_is_named_by_its_template_and_a_stream_ends_its_span_once(frontend):
    sink = Sink()
    async with _client(frontend, sink) as c:
        assert (await c.get(f"/v1/models/{MODEL}")).status_code == 200
        async with c.stream("POST", "/v1/chat/completions", json={**CHAT, "stream": True}) as r:
            body = b"".join([part async for part in r.aiter_bytes()])
    assert b"[DONE]" in body
    model, stream = sink.records
    assert model.name == "GET /v1/models/{model:path}" and model.attributes["url.path"] == f"/v1/models/{MODEL}"
    assert stream.name == "POST /v1/chat/completions" and stream.attributes["http.response.status_code"] == 200
    assert model.context.trace_id != stream.context.trace_id  # no caller: each a new trace


async def test_a_4xx_is_the_clients_error_and_a_5xx_the_servers(frontend):
    sink = Sink()
    async with _client(frontend, sink) as c:
        assert (await c.post("/v1/chat/completions", json={**CHAT, "model": "nope"})).status_code == 404
        assert (await c.post("/v1/nothing-here", json={})).status_code == 404
        frontend.fail_before = FrontendError(ErrorCode.NO_NODE, "no node serves it")
        assert (await c.post("/v1/chat/completions", json=CHAT)).status_code == 503
    unknown_model, no_route, no_node = sink.records
    assert unknown_model.error is None and unknown_model.attributes["http.response.status_code"] == 404
    assert no_route.name == "POST" and "http.route" not in no_route.attributes  # no route matched: the method alone
    assert no_node.error == "HTTP 503" and no_node.attributes["error.type"] == "503"


async def test_an_unexpected_failure_is_a_500_and_an_error_and_untraced_paths_are_configured(frontend):
    def broken(request_id, **fields):
        raise RuntimeError("boom")

    sink = Sink()
    async with _client(frontend, sink, config=GatewayConfig(untraced_paths=())) as c:
        assert (await c.get("/health")).status_code == 200  # traced now: none is left out
        frontend.generate = broken
        assert (await c.post("/v1/chat/completions", json=CHAT)).status_code == 500
    health, failed = sink.records
    assert health.name == "GET /health" and health.error is None
    assert failed.error == "HTTP 500" and failed.attributes["error.type"] == "500"


async def test_probes_paths_and_unsampled_requests_record_nothing_and_pass_their_decision_on(frontend):
    sink = Sink()
    async with _client(frontend, sink) as c:
        assert (await c.get("/health")).status_code == 200  # a probe's path: untraced by default
        unsampled = CALLER[:-2] + "00"
        assert (await c.post("/v1/chat/completions", json=CHAT, headers={"traceparent": unsampled})).status_code == 200
    assert sink.records == []
    (call,) = frontend.calls
    assert incoming(call["trace_headers"]).trace_flags.sampled is False  # the node records nothing either
    async with _client(frontend, sink, ratio=0.0) as c:  # new traces sampled at 0: none recorded
        assert (await c.post("/v1/chat/completions", json=CHAT)).status_code == 200
    assert sink.records == [] and incoming(frontend.calls[-1]["trace_headers"]).trace_flags.sampled is False


async def test_a_host_header_whose_port_is_no_port_records_no_port(frontend):
    sink = Sink()
    async with _client(frontend, sink) as c:
        for host in ("example.test:99999999999999999999999", "example.test:http", "[::1]:8080"):
            assert (await c.post("/v1/chat/completions", json=CHAT, headers={"host": host})).status_code == 200
    huge, named, v6 = (span.attributes for span in sink.records)
    assert "server.port" not in huge and huge["server.address"] == "example.test:99999999999999999999999"
    assert "server.port" not in named and (v6["server.address"], v6["server.port"]) == ("[::1]", 8080)


async def test_a_malformed_traceparent_starts_a_new_trace(frontend):
    sink = Sink()
    async with _client(frontend, sink) as c:
        bad = {"traceparent": "00-" + "0" * 32 + "-" + "1" * 16 + "-01", "tracestate": "x" * 600}
        assert (await c.post("/v1/chat/completions", json=CHAT, headers=bad)).status_code == 200
    (span,) = sink.records
    assert span.context.trace_id != 0 and span.context.parent_span_id == 0 and span.context.tracestate == ""


async def test_the_key_check_runs_inside_the_span_which_names_the_tenant(make_frontend):
    class Tenanted(make_frontend):
        def generate(self, request_id, *, tenant="", **fields):
            return super().generate(request_id, **fields)

    sink = Sink()
    keys = ApiKeyConfig(frozenset({"sk-a", "sk-b"}), tenant_of={"sk-a": "acme"})
    async with _client(Tenanted(), sink, api_keys=keys) as c:
        assert (await c.post("/v1/chat/completions", json=CHAT)).status_code == 401
        ok = await c.post("/v1/chat/completions", json=CHAT, headers={"authorization": "Bearer sk-a"})
        assert ok.status_code == 200
    refused, served = sink.records
    assert refused.attributes["http.response.status_code"] == 401 and "zoo.tenant" not in refused.attributes
    assert served.attributes["zoo.tenant"] == "acme"
    assert not any("authorization" in str(v).lower() or "sk-a" in str(v) for v in served.attributes.values())


async def test_a_gateway_that_does_not_trace_passes_the_callers_headers_on_unchanged(frontend):
    transport = httpx.ASGITransport(app=create_app(frontend))
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as c:
        assert (await c.post("/v1/chat/completions", json=CHAT, headers={"traceparent": CALLER})).status_code == 200
    assert frontend.calls[0]["trace_headers"] == {"traceparent": CALLER}
