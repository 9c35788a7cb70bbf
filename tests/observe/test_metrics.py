"""/metrics of a real control plane and a fake-runner agent process, parsed with prometheus_client's
parser: the values are exactly what the requests sent imply."""

from __future__ import annotations

import re

import anyio
import httpx
import pytest
import zmq
import zmq.asyncio
from prometheus_client.parser import text_string_to_metric_families

from client import AsyncZooClient, ZooUnknownModelError
from controlplane.gateway.app import create_app
from transport.codec import decode
from transport.messages import ErrorReply, MsgType

pytestmark = pytest.mark.anyio

JOIN_TIMEOUT_S = 30.0
# the third prompt twice: the second finds its first block (16 tokens) in the prefix cache
REQUESTS = [("hello zoo", 5), ("abc", 3), ("the tail is where the time goes", 2), ("x", 1),
            ("the tail is where the time goes", 2)]  # fmt: skip


def parse(text: str) -> dict[str, list]:
    """family name → its samples (name, labels, value)."""
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def value(families: dict, sample_name: str, **labels: str) -> float:
    """The one sample named ``sample_name`` whose labels include ``labels``."""
    family = sample_name.removesuffix("_total").removesuffix("_count").removesuffix("_sum")
    hits = [
        s.value
        for s in families.get(family, [])
        if s.name == sample_name and all(s.labels.get(k) == v for k, v in labels.items())
    ]
    assert len(hits) == 1, (sample_name, labels, families.get(family))
    return hits[0]


async def test_agent_and_controlplane_metrics_count_the_requests_sent(observed_controlplane, spawn_agent):
    async with observed_controlplane() as (cp, exporter, observer):
        spawn_agent(cp.agent_endpoint, "a", "--metrics-port", "0", "--fake-gpu-type", "L4", "--cell", "west")
        await cp.wait_until(lambda: cp.metrics_urls.get("a"), JOIN_TIMEOUT_S)
        async with AsyncZooClient(cp.client_endpoint, timeout_s=20) as c:
            for prompt, max_tokens in REQUESTS:
                done = await c.generate(prompt, max_tokens=max_tokens)
                assert done.num_output_tokens == max_tokens
            with pytest.raises(ZooUnknownModelError):
                await c.generate("x", model="gpt-17")
        await _send_malformed_frame(cp.client_endpoint)

        async with httpx.AsyncClient(timeout=10) as http:
            agent = parse((await http.get(cp.metrics_urls["a"])).text)
        n = len(REQUESTS)
        vllm = {"model_name": "fake-bytes", "node": "a", "gpu_type": "L4", "cell": "west"}
        assert value(agent, "vllm:prompt_tokens_total", **vllm) == sum(len(p.encode()) for p, _ in REQUESTS)
        assert value(agent, "vllm:generation_tokens_total", **vllm) == sum(k for _, k in REQUESTS)
        # each request admitted once (no preemption here): its cached prompt tokens are its prefix cache hits
        cached = value(agent, "vllm:prompt_tokens_cached_total", **vllm)
        assert cached == value(agent, "vllm:prefix_cache_hits_total", **vllm) == 16
        assert value(agent, "vllm:time_to_first_token_seconds_count", **vllm) == n
        assert value(agent, "vllm:e2e_request_latency_seconds_count", **vllm) == n
        assert value(agent, "vllm:request_queue_time_seconds_count", **vllm) == n
        assert value(agent, "vllm:inter_token_latency_seconds_count", **vllm) == sum(k - 1 for _, k in REQUESTS)
        assert value(agent, "vllm:request_success_total", finished_reason="length", **vllm) == n
        # vLLM's request-level histograms: one observation per request; its phases, sizes and the step's tokens
        prompt_tokens, generated = sum(len(p.encode()) for p, _ in REQUESTS), sum(k for _, k in REQUESTS)
        for phase in ("prefill", "decode", "inference"):
            assert value(agent, f"vllm:request_{phase}_time_seconds_count", **vllm) == n
        tpot_count = value(agent, "vllm:request_time_per_output_token_seconds_count", **vllm)
        assert tpot_count == sum(k > 1 for _, k in REQUESTS)  # none for a one-token request
        assert value(agent, "vllm:request_prompt_tokens_sum", **vllm) == prompt_tokens
        assert value(agent, "vllm:request_generation_tokens_sum", **vllm) == generated
        assert value(agent, "vllm:request_params_max_tokens_sum", **vllm) == generated  # each ran to its max_tokens
        assert value(agent, "vllm:request_prompt_tokens_count", **vllm) == n
        # every step's sampled tokens plus each prompt once, as it got its first token
        assert value(agent, "vllm:iteration_tokens_total_sum", **vllm) == prompt_tokens + generated
        assert value(agent, "vllm:num_preemptions_total", **vllm) == 0
        assert value(agent, "vllm:num_requests_running", **vllm) == 0
        assert value(agent, "vllm:prefix_cache_queries_total", **vllm) >= 0
        zoo = {"model": "fake-bytes", "node": "a", "gpu_type": "L4", "cell": "west"}
        assert value(agent, "zoo:router_to_node_hop_seconds_count", **zoo) == n
        assert value(agent, "zoo:swapped_blocks_total", direction="out", **zoo) == 0

        transport = httpx.ASGITransport(app=create_app(cp, metrics_app=exporter.asgi_app(observer.poll)))
        async with httpx.AsyncClient(transport=transport, base_url="http://cp") as http:
            response = await http.get("/metrics")
        assert response.status_code == 200
        control = parse(response.text)
        assert value(control, "zoo:router_queue_wait_seconds_count", **zoo) == n
        # one TokenChunk per sampled token (the trivial runner samples one per step)
        assert value(control, "zoo:node_to_router_return_seconds_count", **zoo) == sum(k for _, k in REQUESTS)
        assert value(control, "zoo:router_decisions_total", policy="round_robin", node="a") == n
        # the SLO forecast of each placement (controlplane/slo_forecast.py): short prompts on an idle node
        assert value(control, "zoo:router_predicted_ttft_seconds_count", **zoo) == n
        assert value(control, "zoo:router_slo_forecast_total", forecast="in_time") == n
        assert "late" not in {s.labels["forecast"] for s in control["zoo:router_slo_forecast"]}
        assert value(control, "zoo:router_slo_forecast_late_share") == 0.0
        assert value(control, "zoo:rejected_requests_total", reason="unknown_model") == 1
        assert value(control, "zoo:malformed_messages_total", kind="malformed", socket="clients") == 1
        assert value(control, "zoo:node_up", **zoo) == 1
        (info,) = [s for s in control["zoo:node_info"] if s.labels["node"] == "a"]  # what the node runs
        assert info.value == 1 and info.labels["backend"]
        assert re.fullmatch(r"[0-9a-f]{16}", info.labels["config_digest"])


async def _send_malformed_frame(endpoint: str) -> None:
    ctx = zmq.asyncio.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    try:
        await sock.send_multipart([bytes((MsgType.CLIENT_GENERATE,)), b"\xc1\xc1"])
        with anyio.fail_after(10):
            reply, _ = decode(await sock.recv_multipart())  # the error reply: it has been counted
        assert isinstance(reply, ErrorReply)
    finally:
        sock.close(linger=0)
        ctx.term()
