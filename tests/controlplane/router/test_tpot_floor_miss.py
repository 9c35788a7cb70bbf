"""RouterConfig.slo_tpot_floor_miss: a node whose fastest decode step (one sequence: the roofline's, or its
measured step where lower) is above the TPOT target is charged as missing the SLO, on the scalar reference and
on both decision paths alike; on the zoo fleets it marks the L4s at a 50 ms TPOT target and no node at the
default SLO (100 ms)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controlplane.router.policies import cost_kernel
from controlplane.router.policies.cost_reference import lost_cause_fastest_rate, predict_cost_s, tpot_floor_missed
from controlplane.router.policies.hardware_aware import HardwareAwarePolicy
from controlplane.router.policies.node_predictions import decode_floor_s
from controlplane.router.policy import ClusterSnapshot
from controlplane.router.router_config import RouterConfig
from engine.clock import ManualClock
from sim.des import SimNode, default_router_config
from sim.fleet import load_fleet
from tests.controlplane.router.test_cost_kernel import FLEET_CASES, GOODPUT_ONLY, KERNELS, _check_alike, _run, _values

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


FLOORED = (
    # a node whose one-sequence decode step is above the TPOT target charged as a miss (8B: the L4's and T4's
    # roofline step ~70 ms, the L40S's ~25, the A100's ~14, the H200's ~3; a measured 5 ms one is lower)
    RouterConfig(default_model_params_b=8.0, slo_ttft_s=2.0, slo_tpot_s=0.02, slo_tpot_floor_miss=True),
    RouterConfig(
        default_model_params_b=8.0,
        slo_tpot_s=0.02,
        slo_tpot_floor_miss=True,
        slo_sacrifice_weight=5.0,
        slo_pack_weight=1.0,
    ),
    replace(
        GOODPUT_ONLY,
        default_model_params_b=8.0,
        slo_ttft_miss_penalty_s=10.0,
        slo_tpot_floor_miss=True,
        slo_sacrifice_weight=30.0,
        slo_sacrifice_max_ttft_s=1.5,
    ),
    RouterConfig(slo_tpot_s=0.005, slo_tpot_floor_miss=True, slo_pack_weight=2.0, slo_pack_needs_tpot=True),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(FLOORED), *FLEET_CASES)
def test_tpot_floor_miss_chooses_alike_with_the_same_cost_bits(config, pool, picks, history, spec):
    """The same check with the nodes that miss the TPOT target at any load charged as a miss
    (slo_tpot_floor_miss), with sacrifice and bin packing: the floor against the class's TPOT target, the charge,
    the lost-cause test and the prefix credit's refusal to lift it agree on all three paths."""
    _check_alike(config, pool, picks, history, spec)


@pytest.mark.parametrize("kernel", KERNELS)
def test_hand_made_tpot_floor_miss(kernel):
    """slo_tpot_floor_miss: a node whose fastest decode step is above the TPOT target pays the TTFT miss penalty
    where its TTFT meets the target (once where it misses), counts as missing toward a lost cause, and keeps the
    charge when a cached prefix brings its TTFT under the target."""
    values = _values(2)
    values[cost_kernel.COL_INV_RATE] = [1e-3, 2e-3]  # 100 tokens: 0.1 s on node 0 (the fast one), 0.2 s on node 1
    values[cost_kernel.COL_BASE_S] = [0.5, 0.0]
    values[cost_kernel.COL_FLOOR_S] = [0.01, 0.07]  # node 1 decodes one sequence in 70 ms
    knobs = dict(slo_ttft_s=1.0, slo_tpot_s=0.05, ttft_penalty_s=10.0)
    i, cost = _run(kernel, values, **knobs)
    assert i == 1 and list(cost) == [0.1 + 0.5, 0.2]  # off: node 1 is quicker to its first token
    i, cost = _run(kernel, values, tpot_floor_miss=1.0, **knobs)
    assert i == 0 and list(cost) == [0.1 + 0.5, 0.2 + 10.0]
    assert _run(kernel, values, tpot_floor_miss=1.0, **{**knobs, "slo_tpot_s": 0.07})[0] == 1  # 70 ms: within it
    values[cost_kernel.COL_BASE_S] = [2.0, 2.0]  # both miss the TTFT target: one penalty each
    i, cost = _run(kernel, values, tpot_floor_miss=1.0, **knobs)
    assert list(cost) == [0.1 + 2.0 + 10.0, 0.2 + 2.0 + 10.0]
    # a lost cause: node 0 misses TTFT, node 1 can never meet TPOT; sacrifice sends it to the slower one
    values[cost_kernel.COL_BASE_S] = [2.0, 0.0]
    i, cost = _run(kernel, values, tpot_floor_miss=1.0, sacrifice_s=5.0, **knobs)
    assert i == 1 and list(cost) == [0.1 + 2.0 + 10.0 + 5.0, 0.2 + 10.0 + 2.5]
    assert _run(kernel, values, tpot_floor_miss=0.0, sacrifice_s=5.0, **knobs)[1][0] == 0.1 + 2.0 + 10.0  # not lost
    # a prefix cached on node 1 brings its TTFT (1.15 s, the whole prompt) under 1 s (0.958 s): off, the credit
    # lifts the penalty and node 1 beats node 0's 1.0 s; on, the charge stays
    values[cost_kernel.COL_BASE_S] = [0.9, 0.95]
    cand = dict(cand=(1,), cached=(96,))
    assert _run(kernel, values, tpot_floor_miss=0.0, **knobs, **cand)[0] == 1
    assert _run(kernel, values, tpot_floor_miss=1.0, **knobs, **cand)[0] == 0


def test_zoo_sim_router_knobs_sets_it_and_refuses_a_value_that_is_not_a_bool():
    from sim.router_knobs import parse_router_knobs

    assert parse_router_knobs('{"slo_tpot_floor_miss": true}') == {"slo_tpot_floor_miss": True}
    with pytest.raises(ValueError, match="slo_tpot_floor_miss"):
        parse_router_knobs('{"slo_tpot_floor_miss": "yes"}')
