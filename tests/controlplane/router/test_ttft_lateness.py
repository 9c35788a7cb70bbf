"""RouterConfig.slo_ttft_late_weight: a node predicted to miss the TTFT target is charged by how late it is,
weight * (TTFT - target), on top of the miss penalty's step; the scalar reference, the kernel on hand-made
tables (the prefix credit lifting it, and the credit's skip bound leaving room for it), and the three decision
paths alike."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controlplane.router.policies import cost_kernel
from controlplane.router.policies.cost_reference import late_saved_s, predict_cost_s
from controlplane.router.policies.hardware_aware import HardwareAwarePolicy
from controlplane.router.policies.node_predictions import predict_ttft_s
from controlplane.router.policy import ClusterSnapshot
from controlplane.router.router_config import RouterConfig
from tests.controlplane.router.test_cost_kernel import FLEET_CASES, GOODPUT_ONLY, KERNELS, _check_alike, _run, _values

CONFIG = RouterConfig(
    default_model_params_b=8.0, hardware_aware_use_prefix=False, tpot_weight=0.0, slo_ttft_late_weight=0.0
)
LATE = replace(CONFIG, slo_ttft_late_weight=2.0)


def test_the_reference_charges_a_late_node_by_its_lateness_and_an_in_time_node_nothing(
    make_node_view, make_route_request
):
    queued = make_node_view("queued", queued_prefill_tokens=200_000)  # seconds of backlog: late
    idle = make_node_view("idle")
    request = make_route_request(num_prompt_tokens=100, max_tokens=4)
    ttft_s = predict_ttft_s(queued, request.num_prompt_tokens, CONFIG)
    assert ttft_s > CONFIG.slo_ttft_s
    assert predict_cost_s(queued, request, LATE) == pytest.approx(
        predict_cost_s(queued, request, CONFIG) + 2.0 * (ttft_s - CONFIG.slo_ttft_s)
    )
    assert predict_ttft_s(idle, request.num_prompt_tokens, CONFIG) <= CONFIG.slo_ttft_s
    assert predict_cost_s(idle, request, LATE) == predict_cost_s(idle, request, CONFIG)


def test_the_credit_lifts_the_lateness_the_cached_tokens_save():
    late = replace(CONFIG, slo_ttft_late_weight=3.0)
    assert late_saved_s(5.0, 3.0, 1.0, late) == pytest.approx(3.0 * 2.0)
    assert late_saved_s(5.0, 0.5, 1.0, late) == pytest.approx(3.0 * 4.0)  # in time with the cache: all of it
    assert late_saved_s(0.8, 0.5, 1.0, late) == 0.0  # in time either way: nothing to lift
    assert late_saved_s(5.0, 0.5, 1.0, CONFIG) == 0.0  # the knob off


@pytest.mark.parametrize("value", [-1.0, math.nan, math.inf])
def test_a_weight_that_is_not_a_finite_number_at_least_0_is_refused(value):
    with pytest.raises(ValueError, match="slo_ttft_late_weight"):
        replace(CONFIG, slo_ttft_late_weight=value)


@pytest.mark.parametrize("kernel", KERNELS)
def test_hand_made_lateness_outweighs_a_kv_charge(kernel):
    """Both nodes miss a 1 s target with a 1,000-token prompt (2 s of prefill each): node 0 has no queue but is
    short of KV room (4 s), node 1 has 3 s of queue. By TTFT and the step penalty node 1 wins (15 s against 16 s);
    priced by lateness (weight 1: 1 s against 4 s late) node 0 does (17 s against 19 s)."""
    values = _values(2)
    values[cost_kernel.COL_INV_RATE] = 2e-3
    values[cost_kernel.COL_BASE_S] = [0.0, 3.0]
    values[cost_kernel.COL_HEADROOM] = [0.0, 1e6]
    knobs = dict(num_prompt_tokens=1000, slo_ttft_s=1.0, ttft_penalty_s=10.0, kv_penalty_s=4.0)
    i, cost = _run(kernel, values, **knobs)
    assert i == 1 and list(cost) == pytest.approx([2.0 + 10.0 + 4.0, 5.0 + 10.0])
    i, cost = _run(kernel, values, late_weight=1.0, **knobs)
    assert i == 0 and list(cost) == pytest.approx([2.0 + 10.0 + 1.0 + 4.0, 5.0 + 10.0 + 4.0])


@pytest.mark.parametrize("kernel", KERNELS)
def test_hand_made_credit_lifts_the_lateness_past_the_skip_bound(kernel):
    """Weight 3, no penalties: node 0 (2 s of prefill, 1 s late) costs 5 s, node 1 (0.6 s more queue) 7.4 s. With
    900 of the prompt's tokens cached on node 1 it meets the target (0.8 s) and wins: its saving is the cached
    prefill (1.8 s) and the lateness (3 x 1.6 s). Without the lateness in the skip bound, 7.4 - 2 > 5 would skip
    it."""
    values = _values(2)
    values[cost_kernel.COL_INV_RATE] = 2e-3
    values[cost_kernel.COL_BASE_S] = [0.0, 0.6]
    knobs = dict(num_prompt_tokens=1000, slo_ttft_s=1.0, late_weight=3.0)
    i, cost = _run(kernel, values, **knobs)
    assert i == 0 and list(cost) == pytest.approx([2.0 + 3.0, 2.6 + 3.0 * 1.6])
    assert _run(kernel, values, cand=(1,), cached=(900,), **knobs)[0] == 1
    # 100 cached: 1.8 s of prefill after 0.6 s of queue, 1.4 s late: 2.4 + 4.2 = 6.6 s > 5 s, node 0 still wins
    assert _run(kernel, values, cand=(1,), cached=(100,), **knobs)[0] == 0


PRICED = RouterConfig(  # lateness alone among the TTFT terms: no miss, triage or sacrifice charge to lift
    default_model_params_b=8.0, tpot_weight=0.0, slo_ttft_late_weight=3.0, slo_ttft_miss_penalty_s=0.0,
    slo_triage_penalty_s=0.0, slo_sacrifice_weight=0.0,
)  # fmt: skip


@pytest.mark.parametrize("use_kernel", [False, True])
def test_both_paths_lift_the_lateness_a_cached_prefix_saves(make_node_view, make_route_request, use_kernel):
    """The kernel table above as nodes: 500 prompt tokens/s, node b 300 tokens of queue. A 1,000-token prompt is
    1 s late on a (5 s) and 1.6 s on b (7.4 s); 896 of its tokens cached on b make it 0.81 s there, in time, and b
    wins, as the reference says. Lifting the cached prefill alone (7.4 - 1.79 s > 5 s) would leave it on a."""
    a = make_node_view("a", prefill_tok_per_s=500.0)
    b = make_node_view("b", prefill_tok_per_s=500.0, queued_prefill_tokens=300)
    hashes = tuple(range(62))
    request = make_route_request(num_prompt_tokens=1000, max_tokens=16, block_hashes=hashes)
    snapshot = ClusterSnapshot(0.0, (a, b))
    policy = HardwareAwarePolicy(PRICED, use_kernel)
    assert policy.choose(request, snapshot) == "a"  # nothing cached yet
    policy.on_routed(make_route_request(num_prompt_tokens=896, block_hashes=hashes[:56], request_id="p"), "b")
    assert policy.choose(request, snapshot) == "b"
    assert (
        predict_cost_s(b, request, PRICED, 896)
        < predict_cost_s(a, request, PRICED)
        < predict_cost_s(b, request, PRICED)
    )


LATE_CONFIGS = (
    LATE,
    replace(GOODPUT_ONLY, slo_ttft_late_weight=1.0),
    RouterConfig(default_model_params_b=8.0, slo_ttft_late_weight=0.5),
    RouterConfig(default_model_params_b=1.0, slo_ttft_late_weight=3.0, slo_tpot_harm_reported=True),
    RouterConfig(default_model_params_b=8.0, slo_ttft_late_weight=1.0, slo_tpot_harm_count=True),
    RouterConfig(slo_ttft_s=0.5, slo_ttft_late_weight=2.0, slo_pack_weight=1.0, slo_ttft_miss_penalty_s=0.3),
    RouterConfig(slo_ttft_late_weight=1.0, slo_sacrifice_max_ttft_s=3.0, slo_tpot_floor_miss=True),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(LATE_CONFIGS), *FLEET_CASES)
def test_lateness_chooses_alike_with_the_same_cost_bits(config, pool, picks, history, spec):
    """The three paths' check (test_cost_kernel.py) with lateness priced: its charge, the prefix credit's lift of
    it and the skip bound agree, and the choice is the least predict_cost_s."""
    _check_alike(config, pool, picks, history, spec)


def test_zoo_sim_router_knobs_sets_it_and_refuses_a_value_that_is_not_a_number():
    from sim.router_knobs import parse_router_knobs

    assert parse_router_knobs('{"slo_ttft_late_weight": 2}') == {"slo_ttft_late_weight": 2.0}
    with pytest.raises(ValueError, match="slo_ttft_late_weight"):
        parse_router_knobs('{"slo_ttft_late_weight": "yes"}')
