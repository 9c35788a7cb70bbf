"""Autoscaling in the fleet simulator (sim/autoscale.py): nodes asked for join after their provisioning, serve, and
are drained and leave when the load falls; WVA's rule steps one node per reconcile; runs are deterministic."""

from __future__ import annotations

import itertools
import math

import pytest

from backends.sim.cost_model import node_hardware_info
from controlplane.capacity_plan import CapacityPlanConfig, PlanNode
from controlplane.cold_start import HELD_RETRY_S
from sim.autoscale import AutoscaleConfig, Autoscaler
from sim.des import FleetSimulator
from sim.workload import TraceRequest, Workload
from transport.messages import ClientGenerate, ErrorCode, ErrorReply

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


def run_gap(small_fleet, cold_start_wait_s: float):
    """One request a second for 60 s, nothing for 240 s, then again, on a pool of min_nodes 0."""
    fleet = small_fleet(POOL)
    gpu_types = [node_hardware_info(n.hardware).gpu_type for n in fleet.nodes]
    first = [TraceRequest(float(i), 300, 20) for i in range(60)]
    again = [TraceRequest(300.0 + i, 300, 20) for i in range(60)]
    costs, pool = {"H100": 4.0, "L4": 1.0}, {"H100": 1, "L4": 4}
    plan = CapacityPlanConfig(scale_down_window_s=20.0, gpu_cost=costs, max_nodes=pool, default_min_nodes=0,
                              cold_start_wait_s=cold_start_wait_s)  # fmt: skip
    settings = AutoscaleConfig("zoo", 1.0, plan, provision_s=10.0, sample_s=1.0, zoo_interval_s=3.0,
                               zoo_scale_down_period_s=5.0)  # fmt: skip
    scaler = Autoscaler(settings, [n.node_id for n in fleet.nodes], gpu_types)
    result = FleetSimulator(fleet, Workload("gap", tuple(first + again)), "hardware_aware", seed=3, autoscaler=scaler)
    return scaler, result.run()


def test_a_pool_of_min_nodes_0_scales_to_zero_in_a_gap_and_back_when_asked_again(small_fleet):
    """Scale to zero and back in the simulator, with no wait for a node (cold_start_wait_s 0): the pool is shed to no
    node in the gap; the first requests after it are refused (no node serves), those refusals are arrivals, the plan
    asks for a node, and once it has joined the later requests are served."""
    scaler, result = run_gap(small_fleet, 0.0)
    assert any(t < 300 and not sum(counts.values()) for t, counts in scaler.timeline)  # none held in the gap
    late = result.records[60:]
    refused = [r for r in late if r.refusal == "no_node"]
    assert refused and all(r.arrival_s < 300 + 10 + 3 + 1 for r in refused)  # until a node asked for joins
    assert all(r.finish_s is not None for r in late if r.arrival_s > 300 + 10 + 3 + 1)
    assert all(r.finish_s is not None for r in result.records[:60])  # the first minute: a node held while asked
    assert sum(scaler.arrivals.values()) == 120  # each request once: placed, or refused for want of a node


def test_a_request_for_a_pool_at_zero_waits_for_its_first_node_as_the_control_plane_holds_it(small_fleet):
    """controlplane/cold_start.py in the simulator: the requests after the gap are held (cold_start_wait_s 300), the
    pool kept asked for while they wait; the node joins and serves every one of them, none refused, each one's TTFT
    counting its wait from its arrival; each counts as its pool's arrival once, at its first refusal."""
    scaler, result = run_gap(small_fleet, 300.0)
    late = result.records[60:]
    assert not any(r.refusal for r in result.records) and all(r.finish_s is not None for r in result.records)
    held = scaler.num_held["held"]
    assert held > 0 and scaler.num_held == {"held": held, "served": held, "refused": 0} and not scaler.holding
    asked = min(t for t, counts in scaler.timeline if t >= 300 and sum(counts.values()))
    joined = asked + 10.0  # provision_s after it was asked for
    waited = [r for r in late if r.arrival_s < joined]
    assert len(waited) == held and all(r.first_token_s >= joined for r in waited)
    assert waited[0].ttft_s >= 10.0  # its wait shows in its TTFT
    assert sum(scaler.arrivals.values()) == 120 and scaler.planner.waiting == {}


def test_a_held_request_is_refused_past_its_wait():
    """A request held for a node (Autoscaler.hold) waits for a join; tried again after one and refused for the pool's
    full queues, it tries again HELD_RETRY_S later; it is refused once its wait is past. One not for want of a node,
    or of a model the plan does not hold at zero, is not held."""
    plan = CapacityPlanConfig(default_min_nodes=0, cold_start_wait_s=30.0)
    scaler = Autoscaler(AutoscaleConfig("zoo", 1.0, plan), ["n0"], ["L4"])
    scaler.planner.plan(0.0, [PlanNode("n0", "m", "default", "L4", 0.24, 0.0, 0, 0, 0.0)], 1.0)
    scaler.planner.plan(1.0, [], 1.0)  # its node gone: "m" held at zero nodes
    assert scaler.planner.cold_start_wait_s("m") == 30.0

    class Rec:
        refusal = None

    rec, msg = Rec(), ClientGenerate(request_id="r0")
    no_node = ErrorReply(code=ErrorCode.NO_NODE, message="no live node")
    full = ErrorReply(code=ErrorCode.OVERLOADED, message="full")
    assert scaler.hold(0.0, 0, rec, msg, full, ["m"]) is None  # a first try's full queues: not held
    assert scaler.hold(0.0, 0, rec, ClientGenerate(request_id="r0", model="x"), no_node, ["m", "x"]) is None
    assert scaler.hold(0.0, 0, rec, msg, no_node, ["m"]) == math.inf and scaler.planner.waiting == {"m": 1}
    assert scaler.release() == [0] and scaler.take(0).msg is msg and scaler.planner.waiting == {}  # a node joined
    assert scaler.take(0) is None  # taken already: a second event for it does nothing
    assert scaler.hold(20.0, 0, rec, msg, full, ["m"]) == 20.0 + HELD_RETRY_S  # the pool's queues full: again soon
    scaler._expire(29.0)
    assert scaler.holding and rec.refusal is None
    scaler._expire(30.0)
    assert not scaler.holding and rec.refusal == "no_node" and scaler.planner.waiting == {}
    assert scaler.num_held == {"held": 1, "served": 0, "refused": 1}
