"""hardware_aware's overload mode (RouterConfig.overload_window_s, router/overload.py): the detector's window,
share and minimum count; the policy switching to the escalated charges after a sustained run of placements
predicted late, and back once they leave the window; one record per routed request (a refused placement tried
again counts once); on by default (GRID_14). Both implementations of the decision (numpy passes, compiled kernel)."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest

from controlplane.registry import ClusterRegistry
from controlplane.router.overload import OverloadDetector
from controlplane.router.policies.hardware_aware import HardwareAwarePolicy
from controlplane.router.policies.node_predictions import predict_ttft_s
from controlplane.router.policy import ClusterSnapshot, RouteRequest
from controlplane.router.router_config import RouterConfig
from engine.clock import ManualClock
from sim.router_knobs import parse_router_knobs
from tests.controlplane.router.test_hardware_aware_triage import BASE


def test_the_detector_needs_enough_placements_and_a_late_share_within_the_window():
    d = OverloadDetector(window_s=10.0, late_share=0.5, min_placements=4)
    for t in (0.0, 1.0, 2.0):
        d.record(t, True)
    assert not d.active(2.0)  # 3 placements < 4
    d.record(3.0, False)
    assert d.active(3.0) and d.late_share_now(3.0) == 0.75 and d.activations == 1
    d.record(4.0, False)
    d.record(5.0, False)
    assert d.active(5.0)  # 3 of 6 late: exactly the share, still on
    d.record(6.0, False)
    assert not d.active(6.0) and d.activations == 1  # 3 of 7


def test_the_detector_share_boundary_and_window_expiry():
    d = OverloadDetector(window_s=10.0, late_share=0.5, min_placements=2)
    d.record(0.0, True)
    d.record(1.0, False)
    assert d.active(1.0)  # 1 of 2 late: exactly the share, on
    d.record(2.0, False)
    assert not d.active(2.0)  # 1 of 3
    assert d.late_share_now(10.5) == 0.0  # t=0, the late one, left the window
    assert not d.active(11.5) and d.late_share_now(11.5) == 0.0  # 1.0 left too: one placement, too few
    assert d.late_share_now(100.0) == 0.0  # empty
    d.record(100.0, True)
    d.record(100.5, True)
    assert d.active(100.5) and d.activations == 2  # off in between, on again: a second activation


def test_a_reader_between_decisions_sees_the_mode_end_when_its_window_empties():
    d = OverloadDetector(window_s=10.0, late_share=0.5, min_placements=2)
    d.record(0.0, True)
    d.record(1.0, True)
    assert d.active(1.0) and d.still_on(5.0)
    asked = d.asked
    assert not d.still_on(10.5) and d.on and d.asked == asked  # t=0 left: too few; nothing counted
    assert not d.active(10.5) and not d.on


def test_the_share_must_hold_for_hold_s_so_a_burst_in_one_instant_is_not_an_overload():
    d = OverloadDetector(window_s=10.0, late_share=0.5, min_placements=2, hold_s=5.0)
    for _ in range(300):  # 300 late placements at one instant
        d.record(0.0, True)
        assert not d.active(0.0)
    assert not d.active(4.9)  # held 4.9 s
    assert d.active(5.0) and d.activations == 1  # held 5 s
    for t in (6.0, 7.0, 8.0, 9.0, 10.0, 11.0):  # in-time placements; at t=11 the 300 at t=0 have left the window
        d.record(t, False)
    assert not d.active(11.0)
    for t in (11.5, 12.0, 12.5, 13.0, 13.5, 14.0):  # 6 late of 12 at t=14: back at the share
        d.record(t, True)
        assert not d.active(t)  # it must hold again from t=14
    assert not d.active(18.9) and d.active(19.0) and d.activations == 2


@pytest.mark.parametrize(
    "bad",
    [
        dict(hold_s=-1.0),
        dict(hold_s=float("inf")),
        dict(window_s=0.0),
        dict(window_s=float("nan")),
        dict(late_share=0.0),
        dict(late_share=1.5),
        dict(min_placements=0),
    ],
)
def test_the_detector_refuses_bad_settings(bad):
    with pytest.raises(ValueError):
        OverloadDetector(**{"window_s": 10.0, "late_share": 0.5, "min_placements": 1, **bad})


@pytest.mark.parametrize(
    "bad",
    [
        dict(overload_window_s=-1.0),
        dict(overload_window_s=float("inf")),
        dict(overload_late_share=0.0),
        dict(overload_late_share=float("nan")),
        dict(overload_min_placements=0),
        dict(overload_triage_penalty_s=-1.0),
        dict(overload_hold_s=-1.0),
        dict(overload_sacrifice_weight=float("nan")),
        dict(slo_sacrifice_long_share=-0.1),
        dict(overload_sacrifice_long_share=float("nan")),
    ],
)
def test_router_config_refuses_bad_overload_settings(bad):
    with pytest.raises(ValueError):
        RouterConfig(**bad)


def test_overload_knobs_are_settable_from_zoo_sim_and_escalate_only_upward():
    knobs = parse_router_knobs(
        '{"overload_window_s": 20, "overload_triage_penalty_s": 15, "overload_sacrifice_weight": 0}'
    )
    config = RouterConfig(**knobs)
    assert config.overload_window_s == 20.0 and config.overload_late_share == 0.5
    escalated = config.in_overload()
    assert escalated.slo_triage_penalty_s == 15.0 and escalated.slo_sacrifice_weight == config.slo_sacrifice_weight
    default = RouterConfig()  # on by default: GRID_15's choice (10 s window, share 0.5, hold 10 s)
    assert (default.overload_window_s, default.overload_late_share, default.overload_hold_s) == (10.0, 0.5, 10.0)
    assert (default.in_overload().slo_triage_penalty_s, default.in_overload().slo_sacrifice_weight) == (10.0, 10.0)
    low = replace(config, overload_triage_penalty_s=1.0).in_overload()  # below the everyday 5 s: unchanged
    assert low.slo_triage_penalty_s == config.slo_triage_penalty_s
    assert HardwareAwarePolicy(replace(config, overload_window_s=0.0)).overload is None  # 0: off
    on = HardwareAwarePolicy(config)
    assert on.overload.window_s == 20.0 and on.overload.hold_s == config.overload_hold_s
    assert on._overload_config.slo_triage_penalty_s == 15.0


@pytest.fixture(params=[False, True], ids=["numpy", "kernel"])
def use_kernel(request):
    return request.param


def _fleet(make_node_view):
    """The code-trace case of test_hardware_aware_triage.py: a 4k-token prompt late everywhere (H100 1.63 s,
    L4 2.5 s); everyday sacrifice off sends it to the H100 (least TTFT), overload mode's weight 20 to the L4."""
    h100 = make_node_view("h100", "h100-sxm", prefill_tok_per_s=30_000.0, queued_prefill_tokens=45_000)
    a100 = make_node_view("a100", "a100-40gb", prefill_tok_per_s=10_000.0, queued_prefill_tokens=15_000)
    l4 = make_node_view("l4", "l4", prefill_tok_per_s=4_000.0, queued_prefill_tokens=6_000)
    return (h100, a100, l4)


CONFIG = replace(  # the triage tests' base, triage at its everyday 5 s, overload mode with sacrifice escalated alone
    BASE,
    slo_triage_penalty_s=5.0,
    overload_window_s=10.0,
    overload_late_share=0.5,
    overload_min_placements=3,
    overload_hold_s=0.0,  # the share alone (the hold: its own tests)
    overload_triage_penalty_s=0.0,
    overload_sacrifice_weight=20.0,
)


def _route(policy, request, nodes, now_s, exclude=()):
    snapshot = ClusterSnapshot(now_s, tuple(v for v in nodes if v.node_id not in exclude))
    node_id = policy.choose(request, snapshot)
    policy.on_routed(request, node_id)
    return node_id


def test_a_sustained_run_of_late_placements_turns_on_the_escalated_charges_and_its_end_turns_them_off(
    make_node_view, make_route_request, use_kernel
):
    nodes = _fleet(make_node_view)
    policy = HardwareAwarePolicy(CONFIG, use_kernel=use_kernel)
    assert all(predict_ttft_s(v, 4_000, CONFIG) > CONFIG.slo_ttft_s for v in nodes)
    hopeless = [make_route_request(request_id=f"r{k}", num_prompt_tokens=4_000, max_tokens=16) for k in range(6)]
    # three lost causes, each placed late on the H100 (everyday: sacrifice off)
    assert [_route(policy, hopeless[k], nodes, float(k)) for k in range(3)] == ["h100"] * 3
    assert policy.overload.active(3.0) and policy.overload.activations == 1
    assert _route(policy, hopeless[3], nodes, 3.0) == "l4"  # overload mode: sacrifice's weight 20
    # 11 s later the window holds one placement (t=3), fewer than 3: off, the everyday choice again
    assert _route(policy, hopeless[4], nodes, 14.0) == "h100"
    # a request that meets the target somewhere is placed in time and counts as such
    short = make_route_request(request_id="s", num_prompt_tokens=100, max_tokens=16)
    fresh = make_node_view("fresh", "a100-40gb", prefill_tok_per_s=10_000.0)
    assert _route(policy, short, (*nodes, fresh), 14.5) == "fresh"
    assert policy.overload.late_share_now(14.5) == 0.5  # t=14 late, t=14.5 in time (t=3 left the window)


def test_a_refused_placement_tried_again_is_recorded_once_where_it_went(make_node_view, make_route_request, use_kernel):
    nodes = _fleet(make_node_view)
    policy = HardwareAwarePolicy(CONFIG, use_kernel=use_kernel)
    request = make_route_request(request_id="r", num_prompt_tokens=4_000, max_tokens=16)
    first = policy.choose(request, ClusterSnapshot(0.0, nodes))  # refused by admission: not routed
    second = policy.choose(request, ClusterSnapshot(0.0, tuple(v for v in nodes if v.node_id != first)))
    assert first != second
    policy.on_routed(request, first)  # not the last decision: nothing recorded
    assert policy.overload.late_share_now(0.0) == 0.0
    policy.on_routed(request, second)
    policy.on_routed(request, second)  # a repeated hook records nothing more
    assert policy.overload.late_share_now(0.0) == 1.0 and len(policy.overload._events) == 1


def test_overload_mode_decides_as_the_escalated_configuration_would(make_node_view, make_route_request, use_kernel):
    """In overload the decision is exactly the everyday policy's with RouterConfig.in_overload()."""
    fresh = make_node_view("fresh", "a100-40gb", prefill_tok_per_s=10_000.0, queued_prefill_tokens=8_000)  # 0.8 s
    nodes = (*_fleet(make_node_view), fresh)
    policy = HardwareAwarePolicy(replace(CONFIG, overload_min_placements=1, overload_late_share=1.0), use_kernel)
    escalated = HardwareAwarePolicy(replace(CONFIG.in_overload(), overload_window_s=0.0), use_kernel)
    _route(policy, make_route_request(request_id="a", num_prompt_tokens=4_000, max_tokens=16), nodes, 0.0)
    assert policy.overload.active(0.0)  # one placement, late
    chosen = []
    for k, prompt in enumerate((4_000, 8_000, 500, 2_000)):
        request = make_route_request(request_id=f"b{k}", num_prompt_tokens=prompt, max_tokens=16)
        chosen.append(policy.choose(request, ClusterSnapshot(0.0, nodes)))  # not routed: the mode stays on
        assert chosen[-1] == escalated.choose(request, ClusterSnapshot(0.0, nodes))
    assert chosen == ["l4", "l4", "fresh", "fresh"]  # lost causes sacrificed; the prompts that meet the target not


@pytest.mark.parametrize(("hold_s", "late_weight", "herds"), [(5.0, 0.0, False), (0.0, 0.0, True), (0.0, 1.0, False)])
def test_a_burst_in_one_instant_does_not_switch_the_mode_on_and_herd(
    make_hello, make_report, hold_s, late_weight, herds
):
    """test_no_herding.py's burst (300 requests at one instant on 2 identical idle nodes, reports acknowledging
    none of it) with overload mode as the fourteenth grid chose it (share 0.5 over 10 s, triage 10 s), lateness
    unpriced (slo_ttft_late_weight 0, the count off: the knobs then): without the hold the burst fills the window
    with late placements, the mode switches on and its triage charge sends most of the burst to one node; with it
    the mode stays off and the burst spreads within +-1. With lateness priced (the default since GRID_25) the
    burst spreads even without the hold: the later node costs more by how much later it is."""
    registry = ClusterRegistry(ManualClock(), 5.0)
    for i in range(2):
        registry.join(make_hello(f"n{i}", model="sim:llama-3-8b"))
    config = RouterConfig(
        model_params_b={"sim:llama-3-8b": 8.0},
        overload_window_s=10.0,
        overload_triage_penalty_s=10.0,
        overload_hold_s=hold_s,
        slo_ttft_late_weight=late_weight,
        slo_tpot_harm_count=bool(late_weight),
    )
    policy = HardwareAwarePolicy(config)
    counts: Counter[str] = Counter()
    for k in range(300):
        request = RouteRequest(f"r{k}", "sim:llama-3-8b", 300, 100, ())
        node_id = policy.choose(request, registry.snapshot(model="sim:llama-3-8b"))
        registry.on_routed(node_id, request.request_id, 300)
        policy.on_routed(request, node_id)
        counts[node_id] += 1
        if k % 5 == 4:
            for i in range(2):
                registry.report(make_report(f"n{i}", num_requests_received_total=0))
    assert (abs(counts["n0"] - counts["n1"]) > 2) == herds, counts
    if late_weight == 0.0:
        assert (policy.overload.activations > 0) == herds


def test_overload_mode_sacrifices_long_prompts_first(make_node_view, make_route_request, use_kernel):
    """overload_sacrifice_long_share (the everyday share off here): in overload a prompt whose prefill on the
    fastest node takes more than that share of the TTFT target is a lost cause even where a node still meets the
    target. An idle
    H100 (30k tokens/s) meets a 1 s target for a 6k-token prompt (0.2 s) and the L4 does not (1.5 s): off, or at
    share 0.3 (0.2 s is within 0.3 s), it goes to the H100; at share 0.15 it is long, sacrificed to the L4, and
    a short prompt still goes to the H100."""
    h100 = make_node_view("h100", "h100-sxm", prefill_tok_per_s=30_000.0)
    l4 = make_node_view("l4", "l4", prefill_tok_per_s=4_000.0)
    nodes = (h100, l4)
    long_prompt = make_route_request(request_id="long", num_prompt_tokens=6_000, max_tokens=16)
    short_prompt = make_route_request(request_id="short", num_prompt_tokens=1_000, max_tokens=16)
    for share, long_goes_to in ((0.0, "h100"), (0.3, "h100"), (0.15, "l4")):
        config = replace(CONFIG, slo_sacrifice_long_share=0.0, overload_sacrifice_long_share=share)
        assert config.slo_sacrifice_long_share == 0.0 and config.in_overload().slo_sacrifice_long_share == share
        everyday = HardwareAwarePolicy(replace(config, overload_window_s=0.0), use_kernel)
        escalated = HardwareAwarePolicy(replace(config.in_overload(), overload_window_s=0.0), use_kernel)
        assert everyday.choose(long_prompt, ClusterSnapshot(0.0, nodes)) == "h100"
        assert escalated.choose(long_prompt, ClusterSnapshot(0.0, nodes)) == long_goes_to, share
        assert escalated.choose(short_prompt, ClusterSnapshot(0.0, nodes)) == "h100"
