"""RouterConfig.slo_tpot_harm_triage: decode protection charges only the nodes whose decodes can still meet the
TPOT target (the TPOT prediction's step term within it), on the scalar reference and on both decision paths
alike; a node whose decodes already miss the target is priced as one this prompt leaves within it."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controlplane.router.policies import cost_kernel
from controlplane.router.policies.cost_reference import harm_charged, predict_cost_s
from controlplane.router.policies.hardware_aware import HardwareAwarePolicy
from controlplane.router.policies.node_predictions import tpot_step_s
from controlplane.router.policy import ClusterSnapshot
from controlplane.router.router_config import RouterConfig
from tests.controlplane.router.test_cost_kernel import (
    FLEET_CASES,
    GOODPUT_ONLY,
    KERNELS,
    _check_alike,
    _run,
    _values,
)

# only the TTFT and decode protection decide (no TPOT weight or charge): an 8B model, targets 2 s / 50 ms (the
# decode-protection tests' configuration: test_harm_decoders.py's too)
PROTECTION_ONLY = RouterConfig(  # decode protection's flat charge (the count: test_harm_count.py)
    default_model_params_b=8.0, hardware_aware_use_prefix=False, tpot_weight=0.0, slo_tpot_miss_penalty_s=0.0,
    slo_ttft_s=2.0, slo_tpot_s=0.05, slo_tpot_harm_count=False, slo_tpot_harm_reported=False, slo_ttft_late_weight=0.0,
    slo_tpot_harm_penalty_s=3.0,
)  # fmt: skip


def _decoding_pair(step_s: tuple[float, float]) -> np.ndarray:
    """Two nodes decoding 4 sequences each in ``step_s`` steps, 2,000-token prompts at most, 1e-4 s a prompt token,
    a chunk 50 ms; node 0 has no queue, node 1 0.5 s of it (the decode-protection tests' table)."""
    values = _values(2)
    values[cost_kernel.COL_MAX_PROMPT] = 2000.0
    values[cost_kernel.COL_STEP_S] = step_s
    values[cost_kernel.COL_DECODERS] = [4.0, 4.0]
    values[cost_kernel.COL_CHUNK_S] = [0.05, 0.05]
    values[cost_kernel.COL_BASE_S] = [0.0, 0.5]
    return values


CONFIG = PROTECTION_ONLY
ON = replace(CONFIG, slo_tpot_harm_triage=True)


def _nodes(make_node_view):
    """Two H100s decoding 4 sequences, prefilling 40k tokens/s (a 2,048-token chunk: 51 ms, so a long prompt's
    chunks push either one's decodes over 50 ms). ``calm`` steps in 10 ms; ``late`` has measured a mean step of
    80 ms (its decodes already miss the target) and 0.1 s of queue."""
    fields = dict(prefill_tok_per_s=40_000.0, decode_batch_size=4, decode_step_ms=10.0, num_running=4)
    late = make_node_view("late", "h100-sxm", step_mean_ms=80.0, queued_prefill_tokens=4_000, **fields)
    calm = make_node_view("calm", "h100-sxm", **fields)
    return late, calm


def test_harm_is_charged_only_where_the_decode_step_is_within_the_target(make_node_view, make_route_request):
    late, calm = _nodes(make_node_view)
    assert tpot_step_s(late, ON) == 0.08 and tpot_step_s(calm, ON) < 0.05
    assert harm_charged(late, CONFIG) and harm_charged(calm, CONFIG)  # off: every node
    assert not harm_charged(late, ON) and harm_charged(calm, ON)
    request = make_route_request(num_prompt_tokens=4_000, max_tokens=2)
    penalty = CONFIG.slo_tpot_harm_penalty_s
    assert predict_cost_s(late, request, ON) == pytest.approx(predict_cost_s(late, request, CONFIG) - penalty)
    assert predict_cost_s(calm, request, ON) == predict_cost_s(calm, request, CONFIG)
    # a short prompt that leaves the calm node's decodes within the target is charged nowhere
    short = make_route_request(num_prompt_tokens=100, max_tokens=64)
    assert predict_cost_s(calm, short, ON) == predict_cost_s(calm, short, replace(ON, slo_tpot_harm_penalty_s=0.0))


@pytest.mark.parametrize("use_kernel", [False, True], ids=["numpy", "kernel"])
def test_both_paths_send_the_prompt_to_the_node_whose_decodes_already_miss(
    make_node_view, make_route_request, use_kernel
):
    late, calm = _nodes(make_node_view)
    request = make_route_request(num_prompt_tokens=4_000, max_tokens=2)
    snapshot = ClusterSnapshot(0.0, (late, calm))
    assert HardwareAwarePolicy(CONFIG, use_kernel).choose(request, snapshot) == "calm"  # both charged: the quicker
    assert HardwareAwarePolicy(ON, use_kernel).choose(request, snapshot) == "late"
    # at a target the late node's decodes meet (100 ms), it is protected again: the quicker one wins
    assert HardwareAwarePolicy(replace(ON, slo_tpot_s=0.1), use_kernel).choose(request, snapshot) == "calm"


def test_zoo_sim_router_knobs_sets_it_and_refuses_a_value_that_is_not_a_bool():
    from sim.router_knobs import parse_router_knobs

    assert parse_router_knobs('{"slo_tpot_harm_triage": true}') == {"slo_tpot_harm_triage": True}
    with pytest.raises(ValueError, match="slo_tpot_harm_triage"):
        parse_router_knobs('{"slo_tpot_harm_triage": "yes"}')


TRIAGED = (
    replace(GOODPUT_ONLY, slo_tpot_harm_triage=True),  # tight targets: many nodes over the TPOT one
    RouterConfig(default_model_params_b=8.0, slo_ttft_s=2.0, slo_tpot_s=0.05, slo_tpot_harm_triage=True),
    RouterConfig(
        default_model_params_b=8.0,
        slo_tpot_s=0.02,
        slo_tpot_harm_triage=True,
        slo_tpot_floor_miss=True,
        slo_pack_weight=1.0,
        slo_pack_needs_tpot=True,
    ),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(TRIAGED), *FLEET_CASES)
def test_harm_triage_chooses_alike_with_the_same_cost_bits(config, pool, picks, history, spec):
    """The three paths' check (test_cost_kernel.py) with harm triage on: the step against the class's TPOT target,
    the harm charge and the prefix credit's lift of it agree, and the choice is the least predict_cost_s."""
    _check_alike(config, pool, picks, history, spec)


@pytest.mark.parametrize("kernel", KERNELS)
def test_hand_made_harm_triage(kernel):
    """Two nodes decoding, a 1,000-token prompt (0.1 s at 1e-4 s/token, a chunk 50 ms): node 0 steps in 10 ms
    (its decodes pushed to 60 ms), node 1 in 80 ms (already over 50 ms) with 0.5 s of queue. Off, both pay the
    harm penalty and node 0 is quicker; on, node 1 pays none. A prefix cached on node 0 still lifts its charge."""
    values = _decoding_pair((0.01, 0.08))
    knobs = dict(num_prompt_tokens=1000, slo_ttft_s=1.0, slo_tpot_s=0.05, harm_penalty_s=3.0)
    i, cost = _run(kernel, values, **knobs)
    assert i == 0 and list(cost) == [0.1 + 3.0, 0.1 + 0.5 + 3.0]
    i, cost = _run(kernel, values, harm_triage=1.0, **knobs)
    assert i == 1 and list(cost) == [0.1 + 3.0, 0.1 + 0.5]
    # 960 of node 0's tokens cached: its decodes stay at 14 ms, the charge is lifted and it wins again
    assert _run(kernel, values, harm_triage=1.0, cand=(0,), cached=(960,), **knobs)[0] == 0
    # at a 100 ms target node 1's decodes are within it: protected (and not harmed: 80 + 50 > 100 is, 130 ms)
    i, cost = _run(kernel, values, harm_triage=1.0, **{**knobs, "slo_tpot_s": 0.1})
    assert list(cost) == [0.1, 0.1 + 0.5 + 3.0]
