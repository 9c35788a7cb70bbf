"""RouterConfig.slo_tpot_harm_decoders: decode protection spreads a prompt's prefill over the decode steps of the
requests it would slow (the control plane's own tracking: NodeView.decode_inv_steps, the mean of 1 / (max_tokens -
1) over the requests it has seen decode on the node), not over the new request's own; the registry's tracking, the
scalar reference and both decision paths alike."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controlplane.registry import ClusterRegistry
from controlplane.router.policies import cost_kernel
from controlplane.router.policies.cost_reference import predict_cost_s
from controlplane.router.policies.hardware_aware import HardwareAwarePolicy
from controlplane.router.policies.node_predictions import harm_inv_steps, predict_decoders_tpot_s
from controlplane.router.policy import ClusterSnapshot
from controlplane.router.router_config import RouterConfig
from engine.clock import ManualClock
from tests.controlplane.router.test_cost_kernel import (
    FLEET_CASES,
    GOODPUT_ONLY,
    KERNELS,
    _check_alike,
    _run,
)
from tests.controlplane.router.test_harm_triage import PROTECTION_ONLY, _decoding_pair

CONFIG = PROTECTION_ONLY
ON = replace(CONFIG, slo_tpot_harm_decoders=True)


def test_the_registry_tracks_the_max_tokens_of_the_requests_decoding_on_each_node(make_hello):
    registry = ClusterRegistry(ManualClock())
    registry.join(make_hello("a"))
    registry.join(make_hello("b"))

    def inv(node_id):
        return next(v for v in registry.snapshot().nodes if v.node_id == node_id).decode_inv_steps

    registry.on_routed("a", "r1", 100, max_tokens=5)
    registry.on_routed("a", "r2", 100, max_tokens=101)
    registry.on_routed("a", "r3", 100)  # max_tokens not known: never counted
    registry.on_routed("b", "r4", 100, max_tokens=1)
    assert inv("a") == 0.0 and inv("b") == 0.0  # routed, none decoding yet
    registry.on_first_token("a", "r1")
    assert inv("a") == 0.25  # 4 decode steps
    registry.on_first_token("a", "r2")
    registry.on_first_token("a", "r3")
    registry.on_first_token("a", "r2")  # a second first token changes nothing
    assert inv("a") == pytest.approx((0.25 + 0.01) / 2)  # the harmonic mean of 4 and 100 steps
    registry.on_first_token("b", "r4")
    assert inv("b") == 1.0  # one token: at least one step
    registry.on_finished("a", "r1")
    assert inv("a") == pytest.approx(0.01)
    registry.on_finished("a", "r2")
    registry.on_finished("b", "r4")
    assert inv("a") == 0.0 and inv("b") == 0.0
    registry.on_first_token("a", "gone")  # unknown requests and nodes: ignored
    registry.on_first_token("nowhere", "r3")
    assert inv("a") == 0.0


def _nodes(make_node_view):
    """Two H100s decoding 4 sequences in 10 ms steps, prefilling 40k tokens/s (a 2,048-token chunk: 51 ms, so a
    prompt's chunks can push either one's decodes over 50 ms). ``short`` runs decodes of one step each; ``long``
    has 0.1 s of queue and runs decodes of 999 steps each."""
    fields = dict(prefill_tok_per_s=40_000.0, decode_batch_size=4, decode_step_ms=10.0, num_running=4)
    short = make_node_view("short", "h100-sxm", decode_inv_steps=1.0, **fields)
    long = make_node_view("long", "h100-sxm", decode_inv_steps=1.0 / 999, queued_prefill_tokens=4_000, **fields)
    return short, long


def test_the_harm_is_spread_over_the_decoders_steps_where_the_node_has_any(make_node_view, make_route_request):
    short, long = _nodes(make_node_view)
    unknown = replace(long, decode_inv_steps=0.0)
    assert harm_inv_steps(long, CONFIG, 2) == 1.0  # off: this request's own
    assert harm_inv_steps(long, ON, 2) == 1.0 / 999 and harm_inv_steps(short, ON, 2) == 1.0
    assert harm_inv_steps(unknown, ON, 11) == 0.1  # none known: this request's own
    request = make_route_request(num_prompt_tokens=4_000, max_tokens=2)  # 0.1 s of prefill, one decode step
    assert predict_decoders_tpot_s(long, 4_000, CONFIG, 2) > 0.05  # a whole chunk per step
    assert predict_decoders_tpot_s(long, 4_000, ON, 2) < 0.05  # 0.2 s over 999 steps
    penalty = CONFIG.slo_tpot_harm_penalty_s
    assert predict_cost_s(long, request, ON) == pytest.approx(predict_cost_s(long, request, CONFIG) - penalty)
    assert predict_cost_s(short, request, ON) == predict_cost_s(short, request, CONFIG)
    assert predict_cost_s(unknown, request, ON) == predict_cost_s(unknown, request, CONFIG)


@pytest.mark.parametrize("use_kernel", [False, True], ids=["numpy", "kernel"])
def test_both_paths_send_the_prompt_where_it_slows_long_decodes_little(make_node_view, make_route_request, use_kernel):
    short, long = _nodes(make_node_view)
    request = make_route_request(num_prompt_tokens=4_000, max_tokens=2)
    snapshot = ClusterSnapshot(0.0, (short, long))
    assert HardwareAwarePolicy(CONFIG, use_kernel).choose(request, snapshot) == "short"  # both charged: the quicker
    assert HardwareAwarePolicy(ON, use_kernel).choose(request, snapshot) == "long"
    # where the control plane knows of no decoders on it, the new request's own steps count again
    unknown = ClusterSnapshot(0.0, (short, replace(long, decode_inv_steps=0.0)))
    assert HardwareAwarePolicy(ON, use_kernel).choose(request, unknown) == "short"


def test_zoo_sim_router_knobs_sets_it_and_refuses_a_value_that_is_not_a_bool():
    from sim.router_knobs import parse_router_knobs

    assert parse_router_knobs('{"slo_tpot_harm_decoders": true}') == {"slo_tpot_harm_decoders": True}
    with pytest.raises(ValueError, match="slo_tpot_harm_decoders"):
        parse_router_knobs('{"slo_tpot_harm_decoders": 1}')


BY_DECODERS = (
    replace(GOODPUT_ONLY, slo_tpot_harm_decoders=True),
    RouterConfig(default_model_params_b=8.0, slo_ttft_s=2.0, slo_tpot_s=0.05, slo_tpot_harm_decoders=True),
    RouterConfig(default_model_params_b=8.0, slo_tpot_harm_decoders=True, slo_tpot_harm_triage=True),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(BY_DECODERS), *FLEET_CASES)
def test_harm_by_decoders_chooses_alike_with_the_same_cost_bits(config, pool, picks, history, spec):
    """The three paths' check (test_cost_kernel.py) with the harm spread over the decoders' steps: the harm, its
    charge and the prefix credit's lift of it agree, and the choice is the least predict_cost_s."""
    _check_alike(config, pool, picks, history, spec)


@pytest.mark.parametrize("kernel", KERNELS)
def test_hand_made_harm_by_decoders(kernel):
    """Two nodes decoding in 10 ms steps, a 1,000-token prompt (0.1 s at 1e-4 s/token, a chunk 50 ms) of one decode
    step: off, both pay the harm penalty and node 0 (no queue) wins; on, node 1's decoders run 1,000 steps (the
    prompt adds 0.1 ms to each) and it pays none. Node 0's decoders run one step: a prefix of 960 cached tokens there
    leaves 14 ms, within the target, and lifts its charge."""
    values = _decoding_pair((0.01, 0.01))
    values[cost_kernel.COL_DECODE_INV] = [1.0, 0.001]
    knobs = dict(num_prompt_tokens=1000, slo_ttft_s=1.0, slo_tpot_s=0.05, harm_penalty_s=3.0)
    i, cost = _run(kernel, values, **knobs)
    assert i == 0 and list(cost) == [0.1 + 3.0, 0.1 + 0.5 + 3.0]
    i, cost = _run(kernel, values, harm_decoders=1.0, **knobs)
    assert i == 1 and list(cost) == [0.1 + 3.0, 0.1 + 0.5]
    assert _run(kernel, values, harm_decoders=1.0, cand=(0,), cached=(960,), **knobs)[0] == 0
    values[cost_kernel.COL_DECODE_INV] = [1.0, 0.0]  # none known on node 1: this request's own step (inv_steps 1)
    i, cost = _run(kernel, values, harm_decoders=1.0, **knobs)
    assert i == 0 and list(cost) == [0.1 + 3.0, 0.1 + 0.5 + 3.0]
