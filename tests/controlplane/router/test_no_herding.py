"""No herding: what the router sent a node since its last report stays in view until the node says it has it,
and a node measured at start-up is priced by its measurement."""

from __future__ import annotations

from collections import Counter

import pytest

from controlplane.registry import ClusterRegistry
from controlplane.router.policies import make_policy
from controlplane.router.policy import RouteRequest
from controlplane.router.router_config import RouterConfig
from engine.clock import ManualClock


def _registry(make_hello, num_nodes: int, **hello_fields) -> ClusterRegistry:
    registry = ClusterRegistry(ManualClock(), 5.0)
    for i in range(num_nodes):
        registry.join(make_hello(f"n{i}", **hello_fields))
    return registry


def test_a_report_keeps_the_requests_the_node_has_not_received(make_hello, make_report):
    registry = _registry(make_hello, 1)
    for i in range(3):
        registry.on_routed("n0", f"r{i}", 100)
    registry.report(make_report("n0", queued_prefill_tokens=100, num_requests_received_total=1))
    (view,) = registry.snapshot().nodes
    assert (view.queued_prefill_tokens, view.inflight_prefill_tokens) == (100, 200)  # r1 and r2 still on the way
    registry.report(make_report("n0", queued_prefill_tokens=300, num_requests_received_total=3))
    assert registry.snapshot().nodes[0].inflight_prefill_tokens == 0
    registry.on_routed("n0", "r3", 50)
    registry.report(make_report("n0", queued_prefill_tokens=0))  # an old agent: no count, all taken as reported
    assert registry.snapshot().nodes[0].inflight_prefill_tokens == 0


@pytest.mark.parametrize(("num_requests", "num_nodes"), [(20, 3), (300, 2), (64, 8)])
def test_concurrent_requests_spread_over_identical_idle_nodes(make_hello, make_report, num_requests, num_nodes):
    """A burst routed while reports arrive that acknowledge none of it (the requests are still on the wire):
    hardware_aware spreads it within +-1 of N/K."""
    registry = _registry(make_hello, num_nodes, model="sim:llama-3-8b")
    policy = make_policy("hardware_aware", RouterConfig(model_params_b={"sim:llama-3-8b": 8.0}))
    counts: Counter[str] = Counter()
    for k in range(num_requests):
        request = RouteRequest(f"r{k}", "sim:llama-3-8b", 300, 100, ())
        node_id = policy.choose(request, registry.snapshot(model="sim:llama-3-8b"))
        registry.on_routed(node_id, request.request_id, 300)
        policy.on_routed(request, node_id)
        counts[node_id] += 1
        if k % 5 == 4:  # reports in the middle of the burst, from nodes that have received nothing yet
            for i in range(num_nodes):
                registry.report(make_report(f"n{i}", num_requests_received_total=0))
    share = num_requests / num_nodes
    assert all(abs(counts[f"n{i}"] - share) <= 1 for i in range(num_nodes)), counts


def test_a_node_measured_at_start_up_is_priced_by_its_measurement(make_hello, make_report):
    registry = _registry(make_hello, 1, prefill_tok_per_s=12345.0, decode_step_ms=7.5)
    (view,) = registry.snapshot().nodes
    assert (view.prefill_tok_per_s, view.decode_step_ms) == (12345.0, 7.5)
    registry.report(make_report("n0"))  # a report with nothing measured yet keeps the start-up figures
    assert registry.snapshot().nodes[0].prefill_tok_per_s == 12345.0
    registry.report(make_report("n0", prefill_tok_per_s=9000.0, decode_step_ms=9.0))
    assert registry.snapshot().nodes[0].prefill_tok_per_s == 9000.0
