"""Autoscaling in the fleet simulator (sim/autoscale.py): nodes asked for join after their provisioning, serve, and
are drained and leave when the load falls; WVA's rule steps one node per reconcile; runs are deterministic."""

from __future__ import annotations

import itertools

import pytest

from backends.sim.cost_model import node_hardware_info
from controlplane.capacity_plan import CapacityPlanConfig
from sim.autoscale import AutoscaleConfig, Autoscaler
from sim.des import FleetSimulator
from sim.workload import TraceRequest, Workload

POOL = [{"name": "c", "pools": [{"gpu": "h100-sxm", "count": 1}, {"gpu": "l4", "count": 4}]}]


def burst_then_quiet() -> Workload:
    """40 s of 40 requests/s (far over one H100 and one L4), then one request every 2 s for 200 s."""
    busy = [TraceRequest(i / 40, 1500, 60) for i in range(1600)]
    quiet = [TraceRequest(40 + 2 * i, 300, 20) for i in range(100)]
    return Workload("burst", tuple(busy + quiet))


def run(small_fleet, rule: str, **overrides):
    fleet = small_fleet(POOL)
    gpu_types = [node_hardware_info(n.hardware).gpu_type for n in fleet.nodes]
    settings = {"provision_s": 10.0, "sample_s": 1.0, "zoo_interval_s": 3.0, "zoo_scale_down_period_s": 5.0,
                "wva_interval_s": 10.0, "wva_window_s": 10.0, **overrides}  # fmt: skip
    # an L4 node costs a quarter of an H100 node (WVA scales the cheaper node up); per unit of power the H100 is
    # the cheaper (4 / 2.28 against 1 / 0.24), so the plan adds H100s first, and overflows to L4s at the pool's one
    plan = CapacityPlanConfig(
        scale_down_window_s=20.0, gpu_cost={"H100": 4.0, "L4": 1.0}, max_nodes={"H100": 1, "L4": 4}
    )
    scaler = Autoscaler(AutoscaleConfig(rule, 1.0, plan, **settings), [n.node_id for n in fleet.nodes], gpu_types)
    result = FleetSimulator(fleet, burst_then_quiet(), "hardware_aware", seed=3, autoscaler=scaler).run()
    return fleet, scaler, result


def held(scaler, gpu_type: str) -> list[int]:
    return [entry[1].get(gpu_type, 0) for entry in scaler.timeline]


def test_the_plan_adds_nodes_under_load_and_sheds_them_after(small_fleet):
    fleet, scaler, result = run(small_fleet, "zoo")
    assert result.drained and all(r.num_output_tokens == r.max_tokens for r in result.records)  # nothing lost
    l4 = held(scaler, "L4")
    assert l4[0] == 1 and max(l4) == 4 and l4[-1] < 4  # one at the start, the pool's four under load, fewer after
    assert scaler.actions["up"] >= 3 and scaler.actions["down"] >= 1
    # nodes that joined later served requests, and none before it had joined (10 s after it was asked for)
    first_ask = next(t for t, counts in scaler.timeline if counts.get("L4", 0) > 1)
    late = {n.node_id for n in fleet.nodes[2:]}  # the L4s other than the first
    served = [r for r in result.records if r.node_id in late]
    assert served and min(r.arrival_s for r in served) >= first_ask + 10.0
    # the GPUs held: the two at the start all along, the others part of the time
    assert 2 * result.end_s / 3600 < sum(scaler.node_seconds.values()) / 3600 < 5 * result.end_s / 3600


def test_wva_steps_one_replica_per_reconcile(small_fleet):
    _, scaler, result = run(small_fleet, "wva")
    assert result.drained
    total = [sum(counts.values()) for _, counts in scaler.timeline]
    assert all(b - a <= 1 for a, b in itertools.pairwise(total))  # +1 at a time
    assert max(total) > 2  # it did scale up


@pytest.mark.parametrize("rule", ["zoo", "wva"])
def test_same_seed_same_scaling(small_fleet, rule):
    _, first, one = run(small_fleet, rule)
    _, second, two = run(small_fleet, rule)
    assert first.timeline == second.timeline
    assert [(r.req_id, r.node_id, r.finish_s) for r in one.records] == [
        (r.req_id, r.node_id, r.finish_s) for r in two.records
    ]


def test_an_unknown_rule_is_refused():
    with pytest.raises(ValueError, match="autoscale rule"):
        AutoscaleConfig("hpa", 1.0)


def test_a_node_cancelled_and_asked_for_again_joins_at_its_second_time():
    scaler = Autoscaler(AutoscaleConfig("zoo", 1.0, provision_s=60.0), ["a", "b"], ["L4", "L4"])
    scaler.start()  # node 0 joined
    (first,) = scaler._grow(0.0, "L4", 2)
    assert first == (60.0, 1)
    scaler.pending.pop(1)  # cancelled (as _shrink does), then asked for again
    scaler._held_since.pop(1)
    (second,) = scaler._grow(30.0, "L4", 2)
    assert second == (90.0, 1)
    assert not scaler.join(60.0, 1)  # the first request's event: not yet
    assert scaler.join(90.0, 1) and 1 in scaler.joined


def test_the_plan_counts_the_pools_arrivals_and_its_forecast_asks_for_nodes_earlier_on_a_ramp(small_fleet):
    """A ramp of arrivals from 1/s to 26/s over 200 s: with its forecast (a node's start, 30 s ahead) the plan asks
    for the whole pool sooner than the same plan following the load of now (which asks for it in two steps)."""
    ramp = []
    t = 0.0
    while t < 200:
        ramp.append(TraceRequest(t, 1500, 60))
        t += 1 / (1 + t / 8)
    workload = Workload("ramp", tuple(ramp))

    def whole_pool_asked(lead_s: float):
        fleet = small_fleet(POOL)
        gpu_types = [node_hardware_info(n.hardware).gpu_type for n in fleet.nodes]
        plan = CapacityPlanConfig(max_nodes={"H100": 1, "L4": 4}, forecast_lead_s=lead_s, trend_window_s=40.0)
        config = AutoscaleConfig("zoo", 1.0, plan, provision_s=30.0, sample_s=1.0, zoo_interval_s=3.0)
        scaler = Autoscaler(config, [n.node_id for n in fleet.nodes], gpu_types)
        result = FleetSimulator(fleet, workload, "hardware_aware", seed=3, autoscaler=scaler).run()
        assert result.drained
        asked = sum(r.node_id is not None or r.refusal in ("overloaded", "no_node") for r in result.records)
        assert scaler.arrivals == {(fleet.model.name, "c"): asked}
        return next(t for t, counts in scaler.timeline if sum(counts.values()) == 5)

    assert whole_pool_asked(30.0) < whole_pool_asked(0.0)


def test_a_pool_of_min_nodes_0_scales_to_zero_in_a_gap_and_back_when_asked_again(small_fleet):
    """Scale to zero and back in the simulator: one request a second for 60 s, nothing for 240 s, then again. The pool
    is shed to no node in the gap; the first requests after it are refused (no node serves), those refusals are
    arrivals, the plan asks for a node, and once it has joined the later requests are served."""
    fleet = small_fleet(POOL)
    gpu_types = [node_hardware_info(n.hardware).gpu_type for n in fleet.nodes]
    first = [TraceRequest(float(i), 300, 20) for i in range(60)]
    again = [TraceRequest(300.0 + i, 300, 20) for i in range(60)]
    plan = CapacityPlanConfig(
        scale_down_window_s=20.0, gpu_cost={"H100": 4.0, "L4": 1.0}, max_nodes={"H100": 1, "L4": 4}, default_min_nodes=0
    )
    settings = AutoscaleConfig("zoo", 1.0, plan, provision_s=10.0, sample_s=1.0, zoo_interval_s=3.0,
                               zoo_scale_down_period_s=5.0)  # fmt: skip
    scaler = Autoscaler(settings, [n.node_id for n in fleet.nodes], gpu_types)
    result = FleetSimulator(fleet, Workload("gap", tuple(first + again)), "hardware_aware", seed=3, autoscaler=scaler)
    result = result.run()
    assert any(t < 300 and not sum(counts.values()) for t, counts in scaler.timeline)  # none held in the gap
    late = result.records[60:]
    refused = [r for r in late if r.refusal == "no_node"]
    assert refused and all(r.arrival_s < 300 + 10 + 3 + 1 for r in refused)  # until a node asked for joins
    assert all(r.finish_s is not None for r in late if r.arrival_s > 300 + 10 + 3 + 1)
    assert all(r.finish_s is not None for r in result.records[:60])  # the first minute: a node held while asked
    assert sum(scaler.arrivals.values()) == 120  # each request once: placed, or refused for want of a node
