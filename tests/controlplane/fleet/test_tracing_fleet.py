"""`zoo controlplane` and `zoo agent` as real processes with ``--otlp-traces-endpoint`` pointed at a collector on
loopback: an HTTP request carrying a traceparent becomes one trace of three spans (the gateway's HTTP span under the
caller's, the control plane's request span under it, the node's under that), exported over OTLP/HTTP by each
process."""

from __future__ import annotations

import anyio
import httpx
import pytest

from observe.otlp_receiver import OtlpReceiver

pytestmark = pytest.mark.anyio

TRACE, PARENT = 0x5EED, 0xCAFE
CHAT = "/v1/chat/completions"
HTTP = f"POST {CHAT}"  # the gateway's HTTP server span


async def test_one_http_request_is_one_trace_across_both_processes(spawn_controlplane, spawn_agent):
    with OtlpReceiver() as rx:
        cp = spawn_controlplane(None, "--otlp-traces-endpoint", rx.endpoint)
        spawn_agent(cp.agent_endpoint, "a", "--otlp-traces-endpoint", rx.endpoint)
        async with httpx.AsyncClient(base_url=f"http://{cp.http}", timeout=30) as c:
            with anyio.fail_after(60):
                while (await _models(c)) == []:  # the agent has joined
                    await anyio.sleep(0.1)
            r = await c.post(
                "/v1/chat/completions",
                json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3},
                headers={"traceparent": f"00-{TRACE:032x}-{PARENT:016x}-01", "tracestate": "zoo=test"},
            )
            assert r.status_code == 200, r.text
            refused = await c.post("/v1/chat/completions", json={"model": "nope", "messages": []})
            assert refused.status_code in (400, 404)
            spans = await anyio.to_thread.run_sync(
                rx.wait_for,
                lambda s: {x["name"] for x in s if x["trace_id"] == TRACE} == {HTTP, "llm_request", "node_request"},
            )
            metrics = (await c.get("/metrics")).text  # the control plane's spans counted on its /metrics
        assert 'zoo:trace_spans_total{outcome="queued",service="zoo-controlplane"}' in metrics
    ours = {s["name"]: s for s in spans if s["trace_id"] == TRACE}
    http, top, node = ours[HTTP], ours["llm_request"], ours["node_request"]
    assert (http["service"], top["service"], node["service"]) == ("zoo-controlplane", "zoo-controlplane", "zoo-agent")
    assert http["parent_span_id"] == PARENT and top["parent_span_id"] == http["span_id"]
    assert node["parent_span_id"] == top["span_id"]
    assert http["trace_state"] == top["trace_state"] == node["trace_state"] == "zoo=test"
    assert http["attributes"]["http.response.status_code"] == 200 and http["attributes"]["http.route"] == CHAT
    assert top["attributes"]["gen_ai.usage.completion_tokens"] == node["attributes"]["gen_ai.usage.completion_tokens"]
    assert top["attributes"]["zoo.node_id"] == node["attributes"]["zoo.node_id"] == "a"
    assert node["attributes"]["gen_ai.latency.time_in_queue"] >= 0
    assert top["start_ns"] <= node["start_ns"] <= node["end_ns"] and top["error"] is None


async def _models(c: httpx.AsyncClient) -> list:
    try:
        r = await c.get("/v1/models")
    except httpx.TransportError:  # not listening yet
        return []
    return r.json().get("data", []) if r.status_code == 200 else []
