"""RouterConfig.slo_tpot_harm_count: decode protection charges its penalty once per decoder a prompt pushes over the
TPOT target, from the decode lengths of the requests the control plane has seen decode on the node
(NodeView.decode_steps_hist, router/decode_steps.py); the histogram's rule, the registry's tracking, the scalar
reference and both decision paths alike."""

from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controlplane.registry import ClusterRegistry
from controlplane.router.decode_steps import (
    EDGES,
    NO_DECODERS,
    NUM_BINS,
    below,
    bin_of,
    cumulative,
    histogram,
    pushed_over,
)
from controlplane.router.policies import cost_kernel
from controlplane.router.policies.cost_reference import predict_cost_s
from controlplane.router.policies.hardware_aware import HardwareAwarePolicy
from controlplane.router.policies.node_predictions import decoders_pushed_over
from controlplane.router.policy import ClusterSnapshot
from controlplane.router.router_config import RouterConfig
from engine.clock import ManualClock
from tests.controlplane.router.test_cost_kernel import FLEET_CASES, GOODPUT_ONLY, KERNELS, _check_alike, _run
from tests.controlplane.router.test_harm_triage import PROTECTION_ONLY, _decoding_pair

CONFIG = PROTECTION_ONLY
ON = replace(CONFIG, slo_tpot_harm_count=True)


def test_the_bins_are_integer_edges_one_per_length_up_to_8_then_four_per_doubling():
    assert EDGES[:8] == (1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0) and EDGES[-1] == 65536.0
    assert all(e == int(e) for e in EDGES) and list(EDGES) == sorted(set(EDGES)) and len(EDGES) == NUM_BINS
    assert [bin_of(n) for n in (1, 2, 8, 9, 10, 65535, 65536, 10**9)] == [0, 1, 7, 7, 8, NUM_BINS - 2] + [
        NUM_BINS - 1
    ] * 2
    assert histogram([]) == NO_DECODERS == ()
    assert sum(histogram([3, 3, 500, 70_000])) == 4


def test_below_is_exact_at_the_edges_and_linear_in_between():
    cum = cumulative(histogram([1, 5, 100, 100, 300, 70_000]))
    assert below(cum, 1.0) == 0.0 and below(cum, 0.5) == 0.0 and below(cum, -3.0) == 0.0
    assert below(cum, 2.0) == 1.0 and below(cum, 6.0) == 2.0
    assert below(cum, 91.0) == 2.0 and below(cum, 108.0) == 4.0  # both 100s in the bin [91, 108)
    assert below(cum, 99.5) == pytest.approx(2.0 + 2 * 8.5 / 17)
    assert below(cum, 65536.0) == below(cum, math.inf) == below(cum, math.nan) == 5.0  # 70,000 never counted
    assert cumulative(NO_DECODERS) == (0.0,) * NUM_BINS


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 100_000), max_size=30), st.floats(0.0, 1e6), st.floats(0.0, 1e6))
def test_below_counts_exactly_at_every_edge_and_never_falls(steps, x, y):
    cum = cumulative(histogram(steps))
    for edge in EDGES:
        assert below(cum, edge) == sum(n < edge for n in steps)
    lo, hi = sorted((x, y))
    assert 0.0 <= below(cum, lo) <= below(cum, hi) <= len(steps)


def test_pushed_over_counts_the_decoders_whose_spare_time_the_prefill_uses_up():
    cum = cumulative(histogram([1, 1, 4, 999]))
    # 40 ms to spare a step: a 0.1 s prefill after no backlog pushes decoders of fewer than 2.5 steps over
    assert pushed_over(cum, 0.0, 0.1, 0.04) == 2.0
    # after 0.1 s of backlog: those of 2.5 to 5 steps (the 1-step ones are over already, by the backlog)
    assert pushed_over(cum, 0.1, 0.1, 0.04) == pytest.approx(below(cum, 5.0) - below(cum, 2.5))
    assert pushed_over(cum, 0.1, 0.1, 0.04) == 1.0
    for spare_s in (0.0, -0.01, math.nan):  # no time to spare: every decoder misses already, none is pushed
        assert pushed_over(cum, 0.0, 0.1, spare_s) == 0.0


def test_the_registry_counts_the_decoders_by_their_decode_steps(make_hello):
    registry = ClusterRegistry(ManualClock())
    registry.join(make_hello("a"))

    def hist():
        return registry.snapshot().nodes[0].decode_steps_hist

    registry.on_routed("a", "r1", 100, max_tokens=5)
    registry.on_routed("a", "r2", 100, max_tokens=1001)
    registry.on_routed("a", "r3", 100)  # max_tokens not known: never counted
    assert hist() == NO_DECODERS  # routed, none decoding yet
    registry.on_first_token("a", "r1")
    registry.on_first_token("a", "r2")
    registry.on_first_token("a", "r2")  # a second first token changes nothing
    registry.on_first_token("a", "r3")
    assert hist() == histogram([4, 1000])
    registry.on_finished("a", "r1")
    assert hist() == histogram([1000])
    registry.on_finished("a", "r2")
    registry.on_finished("a", "r3")
    assert hist() == NO_DECODERS
    for max_tokens in range(1, 3000):  # the bin comes back from 1 / steps exactly
        registry.on_routed("a", "x", 10, max_tokens=max_tokens)
        registry.on_first_token("a", "x")
        assert hist() == histogram([max(max_tokens - 1, 1)])
        registry.on_finished("a", "x")


def _nodes(make_node_view, long_steps: int = 999):
    """Two H100s decoding 4 sequences in 10 ms steps, prefilling 40k tokens/s: ``short`` runs decodes of one step
    each; ``long`` has 0.1 s of queue and runs decodes of ``long_steps`` steps each."""
    fields = dict(prefill_tok_per_s=40_000.0, decode_batch_size=4, decode_step_ms=10.0, num_running=4)
    short = make_node_view("short", "h100-sxm", decode_steps_hist=histogram([1] * 4), **fields)
    hist = histogram([long_steps] * 4)
    long = make_node_view("long", "h100-sxm", decode_steps_hist=hist, queued_prefill_tokens=4_000, **fields)
    return short, long


def test_the_reference_charges_the_penalty_per_decoder_pushed_over(make_node_view, make_route_request):
    short, long = _nodes(make_node_view)
    request = make_route_request(num_prompt_tokens=4_000, max_tokens=2)  # 0.1 s of prefill
    penalty = CONFIG.slo_tpot_harm_penalty_s
    assert decoders_pushed_over(short, 4_000, ON) == 4.0  # one-step decodes absorb nothing
    assert decoders_pushed_over(long, 4_000, ON) == 0.0  # 999-step decodes absorb 0.2 s
    assert decoders_pushed_over(short, 4_000, ON, num_cached_tokens=4_000) == 0.0  # 25 µs of prefill: absorbed
    assert predict_cost_s(short, request, ON) == pytest.approx(predict_cost_s(short, request, CONFIG) + 3 * penalty)
    assert predict_cost_s(long, request, ON) == pytest.approx(predict_cost_s(long, request, CONFIG) - penalty)
    behind = _nodes(make_node_view, long_steps=3)[1]  # 3-step decodes: absorb the backlog, not the prompt as well
    assert decoders_pushed_over(behind, 4_000, ON) == 4.0
    assert decoders_pushed_over(replace(behind, decode_steps_hist=NO_DECODERS), 4_000, ON) == 0.0  # none known


@pytest.mark.parametrize("use_kernel", [False, True], ids=["numpy", "kernel"])
def test_both_paths_send_the_prompt_where_it_pushes_fewest_over(make_node_view, make_route_request, use_kernel):
    short, long = _nodes(make_node_view)
    request = make_route_request(num_prompt_tokens=4_000, max_tokens=2)
    snapshot = ClusterSnapshot(0.0, (short, long))
    assert HardwareAwarePolicy(CONFIG, use_kernel).choose(request, snapshot) == "short"  # both charged: the quicker
    assert HardwareAwarePolicy(ON, use_kernel).choose(request, snapshot) == "long"
    unknown = ClusterSnapshot(0.0, (replace(short, decode_steps_hist=NO_DECODERS), long))  # none known on short
    assert HardwareAwarePolicy(ON, use_kernel).choose(request, unknown) == "short"


@pytest.mark.parametrize("kernel", KERNELS)
def test_hand_made_harm_count(kernel):
    """Two nodes decoding in 10 ms steps under a 50 ms target (40 ms to spare a step), a 1,000-token prompt (0.1 s):
    node 0's four decoders run one step each (all pushed over: 4 penalties), node 1's 999 (none), behind 0.5 s of
    queue. The flat charge falls on both and node 0 wins; counted, node 1. A cached prefix of 960 tokens on node 0
    leaves 4 ms of prefill, which its decoders absorb: the credit lifts all four penalties."""
    values = _decoding_pair((0.01, 0.01))
    values[cost_kernel.COL_CUM :, 0] = cumulative(histogram([1] * 4))
    values[cost_kernel.COL_CUM :, 1] = cumulative(histogram([999] * 4))
    knobs = dict(num_prompt_tokens=1000, slo_ttft_s=1.0, slo_tpot_s=0.05, harm_penalty_s=3.0)
    assert _run(kernel, values, **knobs)[0] == 0
    i, cost = _run(kernel, values, harm_count=1.0, **knobs)
    assert i == 1 and list(cost) == pytest.approx([0.1 + 4 * 3.0, 0.1 + 0.5])
    assert _run(kernel, values, harm_count=1.0, cand=(0,), cached=(960,), **knobs)[0] == 0
    values[cost_kernel.COL_STEP_S] = [0.06, 0.06]  # no time to spare: none pushed, the quicker wins
    assert _run(kernel, values, harm_count=1.0, **knobs)[0] == 0


@pytest.mark.parametrize("kernel", KERNELS)
def test_hand_made_harm_count_cap(kernel):
    """The cap bounds a node's charge, however many decoders are pushed over: node 0's four (12 s uncapped) cost
    at most the cap, so at 0.3 s it beats node 1's 0.5 s of queue. A cached prefix of 960 tokens on node 0 leaves
    4 ms of prefill, which its decoders absorb: the credit lifts the capped charge (10 s), and node 0 wins."""
    values = _decoding_pair((0.01, 0.01))
    values[cost_kernel.COL_CUM :, 0] = cumulative(histogram([1] * 4))
    values[cost_kernel.COL_CUM :, 1] = cumulative(histogram([999] * 4))
    knobs = dict(num_prompt_tokens=1000, slo_ttft_s=1.0, slo_tpot_s=0.05, harm_penalty_s=3.0, harm_count=1.0)
    assert _run(kernel, values, harm_cap_s=10.0, **knobs)[0] == 1  # 10 s > 0.5 s of queue
    i, cost = _run(kernel, values, harm_cap_s=0.3, **knobs)
    assert i == 0 and list(cost) == pytest.approx([0.1 + 0.3, 0.1 + 0.5])
    assert _run(kernel, values, harm_cap_s=10.0, cand=(0,), cached=(960,), **knobs)[0] == 0


def test_the_reference_caps_the_count_charge(make_node_view, make_route_request):
    short, _ = _nodes(make_node_view)
    request = make_route_request(num_prompt_tokens=4_000, max_tokens=2)
    capped = replace(ON, slo_tpot_harm_count_cap_s=5.0)
    assert predict_cost_s(short, request, capped) == pytest.approx(predict_cost_s(short, request, CONFIG) + 5.0 - 3.0)
    wide = replace(ON, slo_tpot_harm_count_cap_s=100.0)  # a cap above the charge changes nothing
    assert predict_cost_s(short, request, wide) == predict_cost_s(short, request, ON)
    with pytest.raises(ValueError, match="slo_tpot_harm_count_cap_s"):
        replace(ON, slo_tpot_harm_count_cap_s=-1.0)


COUNTED = (
    replace(GOODPUT_ONLY, slo_tpot_harm_count=True),
    RouterConfig(default_model_params_b=8.0, slo_ttft_s=2.0, slo_tpot_s=0.05, slo_tpot_harm_count=True),
    RouterConfig(default_model_params_b=1.0, slo_tpot_harm_count=True, slo_tpot_harm_decoders=True),
    RouterConfig(default_model_params_b=8.0, slo_tpot_harm_count=True, slo_tpot_harm_count_cap_s=10.0),
    RouterConfig(default_model_params_b=1.0, slo_tpot_harm_count=True, slo_tpot_harm_count_cap_s=4.0),
    RouterConfig(default_model_params_b=8.0, slo_tpot_harm_reported=True),
    RouterConfig(default_model_params_b=1.0, slo_tpot_harm_reported=True, slo_tpot_harm_count_cap_s=6.0),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(COUNTED), *FLEET_CASES)
def test_harm_count_chooses_alike_with_the_same_cost_bits(config, pool, picks, history, spec):
    """The three paths' check (test_cost_kernel.py) with the harm counted per decoder: the count, its charge and the
    prefix credit's lift of it agree, and the choice is the least predict_cost_s."""
    _check_alike(config, pool, picks, history, spec)


def test_zoo_sim_router_knobs_sets_it_and_refuses_a_value_that_is_not_a_bool():
    from sim.router_knobs import parse_router_knobs

    assert parse_router_knobs('{"slo_tpot_harm_count": true}') == {"slo_tpot_harm_count": True}
    with pytest.raises(ValueError, match="slo_tpot_harm_count"):
        parse_router_knobs('{"slo_tpot_harm_count": "yes"}')


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.integers(1, 100_000), max_size=12),
    st.floats(0.0, 100.0) | st.just(math.inf) | st.just(math.nan),
    st.floats(0.0, 100.0) | st.just(math.inf),
    st.floats(-0.1, 0.1) | st.just(math.nan) | st.floats(1e-9, 1e-6),
)
def test_the_kernels_count_is_the_references_bit_for_bit(steps, backlog_s, own_s, spare_s):
    """cost_kernel._pushed_over (its bin table; compiled where numba is, and as plain Python) gives
    decode_steps.pushed_over's float for every input, NaNs and infinities included."""
    values = np.zeros((cost_kernel.NUM_COLUMNS, 2))
    values[cost_kernel.COL_CUM :, 1] = cumulative(histogram(steps))
    expected = pushed_over(cumulative(histogram(steps)), backlog_s, own_s, spare_s)
    for helper in {cost_kernel._pushed_over, cost_kernel._pushed_over_py}:
        got = helper(values, 1, backlog_s, own_s, spare_s)
        assert got == expected or (math.isnan(got) and math.isnan(expected))


def test_the_kernels_bin_table_is_bisect_right_for_every_integer_below_the_last_edge():
    """cost_kernel.BIN_OF_INT[m]: the bin bisect_right gives every integer the kernel looks up (1 <= m < 65,536)."""
    table = cost_kernel.BIN_OF_INT
    assert len(table) == EDGES[-1]
    assert all(table[m] == bisect_right(EDGES, m) - 1 for m in range(1, len(table)))
