"""Factories for control-plane tests (registry, admission, router policies), exposed as fixtures because
``--import-mode=importlib`` keeps test modules from importing each other."""

from __future__ import annotations

from dataclasses import replace

import pytest

from backends.gpu_table import gpu_profile, power_score
from controlplane.router.policy import ClusterSnapshot, NodeView, RouteRequest
from transport.messages import KVInfo, LoadReport, NodeHello


def _node_view(node_id: str = "n0", gpu: str = "a100-80gb", **overrides) -> NodeView:
    hw = gpu_profile(gpu)
    base = NodeView(
        node_id=node_id,
        gpu_type=hw.gpu_type,
        cell="default",
        model="m",
        power_score=power_score(hw),
        memory_bandwidth_gbps=hw.memory_bandwidth_gbps,
        peak_tflops=hw.peak_tflops,
        max_model_len=8192,
        block_size=16,
        num_device_blocks=4096,
        num_free_device_blocks=4096,
        kv_usage=0.0,
        num_running=0,
        num_waiting=0,
        num_swapped=0,
        queued_prefill_tokens=0,
        decode_batch_size=0,
        prefill_tok_per_s=0.0,
        decode_step_ms=0.0,
        num_inflight=0,
        inflight_prefill_tokens=0,
    )
    return replace(base, **overrides)


def _snapshot(*nodes: NodeView, now_s: float = 0.0) -> ClusterSnapshot:
    return ClusterSnapshot(now_s, tuple(nodes))


def _route_request(
    num_prompt_tokens: int = 100,
    max_tokens: int = 16,
    block_hashes: tuple[int, ...] = (),
    request_id: str = "r",
    model: str = "m",
    traffic_class: str = "default",
    lora_name: str | None = None,
) -> RouteRequest:
    return RouteRequest(
        request_id, model, num_prompt_tokens, max_tokens, block_hashes, traffic_class, lora_name=lora_name
    )


def _hello(
    node_id: str = "n0", model: str = "m", cell: str = "default", gpu: str = "a100-80gb", **overrides
) -> NodeHello:
    hw = gpu_profile(gpu)
    fields = dict(
        node_id=node_id,
        model=model,
        backend="sim",
        hardware=hw,
        kv=KVInfo(num_device_blocks=1024, num_host_blocks=0, block_size=16, bytes_per_block=4096),
        max_model_len=4096,
        power_score=power_score(hw),
        cell=cell,
    )
    fields.update(overrides)
    return NodeHello(**fields)


def _report(node_id: str = "n0", **overrides) -> LoadReport:
    fields = dict(
        node_id=node_id,
        num_running=0,
        num_waiting=0,
        num_swapped=0,
        kv_usage=0.0,
        num_free_device_blocks=1024,
        queued_prefill_tokens=0,
        decode_batch_size=0,
        recent_step_ms=[],
        prefill_tok_per_s=0.0,
        decode_step_ms=0.0,
        num_preemptions_total=0,
        num_requests_finished_total=0,
        prefix_cache_hit_rate=0.0,
    )
    fields.update(overrides)
    return LoadReport(**fields)


@pytest.fixture
def make_node_view():
    return _node_view


@pytest.fixture
def make_snapshot():
    return _snapshot


@pytest.fixture
def make_route_request():
    return _route_request


@pytest.fixture
def make_hello():
    return _hello


@pytest.fixture
def make_report():
    return _report
