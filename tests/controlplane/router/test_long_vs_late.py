"""The long-prompt sacrifice's gate (RouterConfig.slo_sacrifice_long_vs_late, router/late_prompts.py): the median of
the recent late placements' prompt sizes over overload mode's window; a prompt long by the share is sacrificed only
when it is longer than that median, never with fewer late placements than the minimum in the window. Both
implementations of the decision (numpy passes, compiled kernel) and the scalar reference."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from controlplane.router.late_prompts import LatePrompts
from controlplane.router.policies.cost_reference import lost_cause_fastest_rate
from controlplane.router.policies.hardware_aware import HardwareAwarePolicy
from controlplane.router.policies.node_predictions import predict_ttft_s
from controlplane.router.policy import ClusterSnapshot
from controlplane.router.router_config import RouterConfig
from sim.router_knobs import parse_router_knobs
from tests.controlplane.router.test_hardware_aware_triage import BASE


def test_the_median_needs_enough_late_placements_in_the_window():
    late = LatePrompts(window_s=10.0, min_placements=3)
    late.record(0.0, 5_000)
    late.record(1.0, 1_000)
    assert late.median(1.0) == math.inf and not late.longer(10**9, 1.0)  # 2 < 3
    late.record(2.0, 3_000)
    assert late.median(2.0) == 3_000.0 and len(late) == 3
    assert late.longer(3_001, 2.0) and not late.longer(3_000, 2.0)  # strictly longer
    late.record(3.0, 2_000)
    assert late.median(3.0) == 2_000.0  # the lower median of 1k, 2k, 3k, 5k
    assert late.median(10.5) == 2_000.0  # t=0 left the window (10.5 - 10 > 0): 1k, 2k, 3k
    assert late.median(12.5) == math.inf and len(late) == 1  # t=1 and t=2 left too: 2k alone


def test_equal_sizes_expire_one_at_a_time():
    late = LatePrompts(window_s=1.0, min_placements=1)
    for t in (0.0, 0.5, 0.9):
        late.record(t, 4_000)
    late.record(1.2, 100)  # t=0 leaves
    assert late.median(1.2) == 4_000.0 and len(late) == 3
    assert late.median() == 4_000.0 and len(late) == 3  # a reader without a clock: what is held, nothing expired
    assert late.median(1.6) == 100.0  # t=0.5 left: 4k (t=0.9), 100: the lower median


@pytest.mark.parametrize(("window_s", "min_placements"), [(0.0, 1), (math.nan, 1), (math.inf, 1), (1.0, 0)])
def test_bad_windows_are_refused(window_s, min_placements):
    with pytest.raises(ValueError):
        LatePrompts(window_s, min_placements)


def test_the_knob_is_settable_from_zoo_sim_and_uses_overload_modes_window():
    off = RouterConfig(**parse_router_knobs('{"slo_sacrifice_long_vs_late": false}'))
    assert not off.slo_sacrifice_long_vs_late and HardwareAwarePolicy(off).late_prompts is None
    on = HardwareAwarePolicy(RouterConfig())  # on by default since GRID_30
    assert on.late_prompts.window_s == on.config.overload_window_s
    assert on.late_prompts.min_placements == on.config.overload_min_placements
    assert HardwareAwarePolicy(RouterConfig(overload_window_s=0.0)).late_prompts is None  # no window: no gate
    no_share = RouterConfig(slo_sacrifice_long_share=0.0, overload_sacrifice_long_share=0.0)
    assert HardwareAwarePolicy(no_share).late_prompts is None  # no long-prompt test to gate: nothing kept
    in_overload_only = RouterConfig(slo_sacrifice_long_share=0.0, overload_sacrifice_long_share=0.2)
    assert HardwareAwarePolicy(in_overload_only).late_prompts is not None
    with pytest.raises(ValueError, match="slo_sacrifice_long_vs_late"):
        parse_router_knobs('{"slo_sacrifice_long_vs_late": "yes"}')  # typed as the field: a bool, not a string


@pytest.fixture(params=[False, True], ids=["numpy", "kernel"])
def use_kernel(request):
    return request.param


GATED = replace(  # sacrifice on; a prompt long when its prefill on the fastest node is above 0.15 s (1 s target)
    BASE,
    slo_sacrifice_weight=20.0,
    slo_sacrifice_long_share=0.15,
    slo_sacrifice_long_vs_late=True,
    overload_window_s=10.0,
    overload_min_placements=3,
    overload_triage_penalty_s=0.0,
    overload_sacrifice_weight=0.0,  # overload mode, on or off, decides alike here
)


def _route(policy, request, nodes, now_s):
    node_id = policy.choose(request, ClusterSnapshot(now_s, nodes))
    policy.on_routed(request, node_id)
    return node_id


@pytest.mark.parametrize(("late_size", "long_goes_to"), [(1_000, "l4"), (8_000, "h100")])
def test_a_long_prompt_is_sacrificed_only_for_shorter_late_requests(
    make_node_view, make_route_request, use_kernel, late_size, long_goes_to
):
    """An idle H100 (30k tokens/s) serves a 6k-token prompt in 0.2 s, within the 1 s target; the L4 (4k tokens/s)
    takes 1.5 s. By the share (0.15 s) the prompt is long. With no late placement yet the gate is shut: the H100.
    After three placements predicted late on a busy fleet (every node's queue over the target), of 1k-token
    prompts, the 6k prompt is longer than the median late one: sacrificed to the L4. Late 8k-token prompts: not
    longer, the H100. Once they leave the 10 s window, the gate is shut again."""
    idle = (
        make_node_view("h100", "h100-sxm", prefill_tok_per_s=30_000.0),
        make_node_view("l4", "l4", prefill_tok_per_s=4_000.0),
    )
    busy = (
        make_node_view("h100", "h100-sxm", prefill_tok_per_s=30_000.0, queued_prefill_tokens=45_000),
        make_node_view("l4", "l4", prefill_tok_per_s=4_000.0, queued_prefill_tokens=6_000),
    )
    policy = HardwareAwarePolicy(GATED, use_kernel=use_kernel)
    long_prompt = make_route_request(request_id="long", num_prompt_tokens=6_000, max_tokens=16)
    assert predict_ttft_s(idle[0], 6_000, GATED) <= GATED.slo_ttft_s < predict_ttft_s(idle[1], 6_000, GATED)
    assert policy.choose(long_prompt, ClusterSnapshot(0.0, idle)) == "h100"
    ungated = HardwareAwarePolicy(replace(GATED, slo_sacrifice_long_vs_late=False), use_kernel=use_kernel)
    assert ungated.choose(long_prompt, ClusterSnapshot(0.0, idle)) == "l4"  # the share alone sacrifices it
    for k in range(3):
        late = make_route_request(request_id=f"late{k}", num_prompt_tokens=late_size, max_tokens=16)
        assert all(predict_ttft_s(v, late_size, GATED) > GATED.slo_ttft_s for v in busy)
        _route(policy, late, busy, float(k))
    assert policy.late_prompts.median(3.0) == late_size
    assert policy.choose(long_prompt, ClusterSnapshot(3.0, idle)) == long_goes_to
    short = make_route_request(request_id="short", num_prompt_tokens=500, max_tokens=16)
    assert policy.choose(short, ClusterSnapshot(3.0, idle)) == "h100"  # in time everywhere it is fast: not long
    assert policy.choose(long_prompt, ClusterSnapshot(12.5, idle)) == "h100"  # t=0..2 left the window


def test_the_scalar_reference_takes_the_gate_as_the_policy_gives_it(make_node_view, make_route_request):
    idle = (
        make_node_view("h100", "h100-sxm", prefill_tok_per_s=30_000.0),
        make_node_view("l4", "l4", prefill_tok_per_s=4_000.0),
    )
    long_prompt = make_route_request(request_id="long", num_prompt_tokens=6_000, max_tokens=16)
    assert lost_cause_fastest_rate(idle, long_prompt, GATED, GATED.slo_ttft_s) == 30_000.0  # long: a lost cause
    assert lost_cause_fastest_rate(idle, long_prompt, GATED, GATED.slo_ttft_s, long_ok=False) == 0.0
