"""RouterConfig.slo_tpot_floor_miss: a node whose fastest decode step (one sequence: the roofline's, or its
measured step where lower) is above the TPOT target is charged as missing the SLO, on the scalar reference and
on both decision paths alike; on the zoo fleets it marks the L4s at a 50 ms TPOT target and no node at the
default SLO (100 ms)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from controlplane.router.policies.cost_reference import lost_cause_fastest_rate, predict_cost_s, tpot_floor_missed
from controlplane.router.policies.hardware_aware import HardwareAwarePolicy
from controlplane.router.policies.node_predictions import decode_floor_s
from controlplane.router.policy import ClusterSnapshot
from controlplane.router.router_config import RouterConfig
from engine.clock import ManualClock
from sim.des import SimNode, default_router_config
from sim.fleet import load_fleet

# an 8B model: the L4's one-sequence step reads 16 GB at 300 GB/s x 0.75, ~71 ms; the H100's ~6 ms. Only the TTFT
# terms decide here (no TPOT weight or charge, no triage, harm or sacrifice)
CONFIG = RouterConfig(
    default_model_params_b=8.0, hardware_aware_use_prefix=False, tpot_weight=0.0, slo_tpot_miss_penalty_s=0.0,
    slo_triage_penalty_s=0.0, slo_tpot_harm_penalty_s=0.0, slo_sacrifice_weight=0.0, slo_ttft_s=2.0,
    slo_tpot_s=0.05,
)  # fmt: skip
ON = replace(CONFIG, slo_tpot_floor_miss=True)


def _nodes(make_node_view):
    """An idle L4 and an H100 with a queue: both give the prompt its first token within 2 s, the L4 sooner."""
    l4 = make_node_view("l4", "l4", prefill_tok_per_s=4_000.0)
    h100 = make_node_view("h100", "h100-sxm", prefill_tok_per_s=40_000.0, queued_prefill_tokens=40_000)
    return l4, h100


def test_the_floor_is_the_one_sequence_step_or_the_measured_one_where_lower(make_node_view):
    l4, h100 = _nodes(make_node_view)
    assert 0.06 < decode_floor_s(l4, CONFIG) < 0.08 and decode_floor_s(h100, CONFIG) < 0.01
    assert decode_floor_s(replace(l4, decode_step_ms=40.0), CONFIG) == 0.04  # measured lower: it
    assert decode_floor_s(replace(l4, decode_step_ms=400.0), CONFIG) == decode_floor_s(l4, CONFIG)
    assert tpot_floor_missed(l4, ON) and not tpot_floor_missed(l4, CONFIG) and not tpot_floor_missed(h100, ON)
    assert not tpot_floor_missed(l4, replace(ON, slo_tpot_s=0.1))


@pytest.mark.parametrize("use_kernel", [False, True], ids=["numpy", "kernel"])
def test_both_paths_send_the_request_off_the_node_that_cannot_meet_tpot(make_node_view, make_route_request, use_kernel):
    l4, h100 = _nodes(make_node_view)
    request = make_route_request(num_prompt_tokens=1_000, max_tokens=64)
    snapshot = ClusterSnapshot(0.0, (l4, h100))
    assert HardwareAwarePolicy(CONFIG, use_kernel).choose(request, snapshot) == "l4"
    assert HardwareAwarePolicy(ON, use_kernel).choose(request, snapshot) == "h100"
    assert predict_cost_s(l4, request, ON) == predict_cost_s(l4, request, CONFIG) + ON.slo_ttft_miss_penalty_s
    assert predict_cost_s(h100, request, ON) == predict_cost_s(h100, request, CONFIG)
    # at a TPOT target the L4 can meet, nothing changes
    at_100ms = replace(ON, slo_tpot_s=0.1)
    assert HardwareAwarePolicy(at_100ms, use_kernel).choose(request, snapshot) == "l4"


@pytest.mark.parametrize("use_kernel", [False, True], ids=["numpy", "kernel"])
def test_a_lost_cause_goes_to_the_node_that_cannot_meet_tpot(make_node_view, make_route_request, use_kernel):
    """The H100 misses the TTFT target (a long queue), the L4 cannot meet TPOT: a lost cause on every node, and
    sacrifice sends it to the less capable one (without the rule the L4 is where it meets the SLO: no sacrifice)."""
    l4, h100 = _nodes(make_node_view)
    h100 = replace(h100, queued_prefill_tokens=200_000)  # 5 s of queue
    request = make_route_request(num_prompt_tokens=1_000, max_tokens=64)
    sacrifice = replace(ON, slo_sacrifice_weight=5.0)
    assert lost_cause_fastest_rate((l4, h100), request, sacrifice, 2.0) == 40_000.0
    assert lost_cause_fastest_rate((l4, h100), request, replace(sacrifice, slo_tpot_floor_miss=False), 2.0) == 0.0
    snapshot = ClusterSnapshot(0.0, (l4, h100))
    assert HardwareAwarePolicy(sacrifice, use_kernel).choose(request, snapshot) == "l4"


def _zoo_views(fleet_name: str):
    fleet = load_fleet(fleet_name)
    clock = ManualClock()
    registry = fleet.make_registry(clock)
    for spec in fleet.nodes:
        registry.join(SimNode(spec, fleet, clock).hello)
    return fleet, registry.snapshot().nodes


@pytest.mark.parametrize("fleet_name", ["zoo", "zoo_long"])
def test_on_the_zoo_fleets_it_marks_the_l4s_at_50_ms_and_nothing_at_the_default_slo(fleet_name):
    fleet, views = _zoo_views(fleet_name)
    config = replace(default_router_config(fleet, "hardware_aware"), slo_tpot_floor_miss=True)
    assert config.slo_tpot_s == 0.1 and not any(tpot_floor_missed(v, config) for v in views)
    slo2 = replace(config, slo_tpot_s=0.05)
    assert {v.gpu_type for v in views if tpot_floor_missed(v, slo2)} == {"L4"}
