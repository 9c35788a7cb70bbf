"""What every policy shares: chosen by name, None on an empty snapshot, and incremental tables that give
the same answer as a fresh policy."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from controlplane.router.policies import POLICIES, make_policy
from controlplane.router.router_config import RouterConfig


def test_make_policy_by_name():
    for name in POLICIES:
        assert make_policy(name, RouterConfig(policy=name)).name == name
    with pytest.raises(ValueError, match=r"unknown routing policy 'fastest'.*hardware_aware.*round_robin"):
        make_policy("fastest", RouterConfig())


@pytest.mark.parametrize(
    "kwargs",
    [
        {"prefill_mfu": 0.0},
        {"prefill_mfu": 1.5},
        {"tpot_weight": -1},
        {"prefix_balance_rel_threshold": 0.5},
        {"prefix_max_candidates": 0},
        {"model_params_b": {"m": 0.0}},
        {"policy": ""},
    ],
)
def test_router_config_validation(kwargs):
    with pytest.raises(ValueError):
        RouterConfig(**kwargs)


def test_cell_for_traffic_class():
    config = RouterConfig(cells_by_traffic_class={"batch": "cheap"})
    assert config.cell_for("batch") == "cheap" and config.cell_for("default") is None


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_empty_snapshot_gives_none(name, make_snapshot, make_route_request):
    assert make_policy(name).choose(make_route_request(), make_snapshot()) is None


@pytest.mark.parametrize("name", ["least_requests", "hardware_aware", "prefix_aware"])
def test_incremental_tables_agree_with_a_fresh_policy(name, make_node_view, make_snapshot, make_route_request):
    """One long-lived policy sees snapshots that differ by a few replaced views (the registry's pattern),
    plus joins and leaves; each answer must equal that of a policy built for that snapshot alone."""
    rng = random.Random(7)
    config = RouterConfig(policy=name, hardware_aware_use_prefix=False)
    nodes = [make_node_view(f"n{i:03d}", rng.choice(["h100-sxm", "a100-80gb", "l4"])) for i in range(150)]
    live = make_policy(name, config)
    for step in range(150):
        for _ in range(rng.randrange(0, 4)):
            i = rng.randrange(len(nodes))
            nodes[i] = replace(
                nodes[i],
                num_inflight=rng.randrange(0, 20),
                num_running=rng.randrange(0, 20),
                queued_prefill_tokens=rng.randrange(0, 10_000),
                num_free_device_blocks=rng.randrange(0, 4096),
                max_model_len=rng.choice([8192, 8192, 1024]),
            )
        if step % 37 == 0:
            nodes.append(make_node_view(f"x{step:03d}", "h200"))
        if step % 53 == 0:
            nodes.pop(rng.randrange(len(nodes)))
        snap = make_snapshot(*nodes)
        request = make_route_request(num_prompt_tokens=rng.randrange(1, 3000), max_tokens=rng.randrange(1, 300))
        assert live.choose(request, snap) == make_policy(name, config).choose(request, snap)


@pytest.mark.parametrize("name", ["least_requests", "hardware_aware", "prefix_aware"])
def test_fresh_inflight_counts_spread_a_burst(name, make_hello, make_route_request):
    """Between two load reports, the registry's own in-flight counts keep a burst from piling onto one node."""
    from controlplane.registry import ClusterRegistry
    from engine.clock import ManualClock

    registry = ClusterRegistry(ManualClock())
    for node_id in ("a", "b", "c"):
        registry.join(make_hello(node_id, gpu="h100-sxm"))
    registry.join(make_hello("other", model="m2"))
    policy = make_policy(name)
    picks = []
    for i in range(6):
        request = make_route_request(num_prompt_tokens=1000, request_id=f"r{i}")
        node_id = policy.choose(request, registry.snapshot(model="m"))
        policy.on_routed(request, node_id)
        registry.on_routed(node_id, request.request_id, request.num_prompt_tokens)
        picks.append(node_id)
    assert sorted(picks) == ["a", "a", "b", "b", "c", "c"]
