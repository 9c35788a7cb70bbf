"""The SLO forecast (controlplane/slo_forecast.py): each placement's TTFT forecast on its node, in time or late
against the request's TTFT target (its class's, else the router's), and the share late over a recent window."""

from __future__ import annotations

import dataclasses

import pytest

from controlplane.router.policies.node_predictions import predict_ttft_s
from controlplane.router.router_config import RouterConfig
from controlplane.slo_forecast import SloForecast

# a measured 10,000 prompt tokens/s: a 1,000-token prompt alone takes 0.1 s, behind 20,000 queued 2.1 s
RATE = 10_000.0


@pytest.fixture
def node(make_node_view):
    return make_node_view("n0", prefill_tok_per_s=RATE)


def test_an_idle_node_is_forecast_in_time_and_a_long_queue_late(node, make_route_request):
    forecast = SloForecast(RouterConfig(slo_ttft_s=1.0))
    route = make_route_request(num_prompt_tokens=1000)
    assert forecast.on_placed(route, node) == pytest.approx(0.1)
    queued = dataclasses.replace(node, queued_prefill_tokens=20_000)
    assert forecast.on_placed(route, queued) == pytest.approx(predict_ttft_s(queued, 1000, forecast.config))
    assert forecast.on_placed(route, queued) == pytest.approx(2.1)
    assert forecast.summary() == {
        "decisions": {"default:in_time": 1, "default:late": 2},
        "recent_late_share": pytest.approx(2 / 3),
        "recent_decisions": 3,
        "targets": {"default": {"ttft": 1.0, "tpot": RouterConfig().slo_tpot_s}},  # the router's
        "overload": None,  # the policy has no overload mode on
        "long_prompt_gate": None,  # nor a long-prompt gate
        "tpot_lost": None,  # nor the TPOT lost-cause rule
    }


def test_routed_but_unreported_prefill_counts_as_queued(node, make_route_request):
    """What the control plane sent since the node's last report is in the forecast (as hardware_aware sees it)."""
    forecast = SloForecast(RouterConfig(slo_ttft_s=1.0))
    forecast.on_placed(
        make_route_request(num_prompt_tokens=1000), dataclasses.replace(node, inflight_prefill_tokens=9_500)
    )
    assert forecast.counts == {("default", "late"): 1}


def test_the_class_target_overrides_the_routers(node, make_route_request):
    from observe.controlplane_exporter import _forecast_metrics
    from observe.metrics_names import CLASS_SLO_TARGET

    forecast = SloForecast(RouterConfig(slo_ttft_s=1.0))
    strict = dataclasses.replace(make_route_request(num_prompt_tokens=1000, traffic_class="vip"), slo_ttft_s=0.05)
    loose = dataclasses.replace(make_route_request(num_prompt_tokens=1000, traffic_class="batch"), slo_ttft_s=5.0)
    forecast.on_placed(strict, node)  # 0.1 s > 0.05 s
    forecast.on_placed(loose, dataclasses.replace(node, queued_prefill_tokens=20_000))  # 2.1 s <= 5 s
    assert forecast.counts == {("vip", "late"): 1, ("batch", "in_time"): 1}
    # each class's targets, exported for alerts on its quantiles: its own TTFT target, the router's TPOT one
    tpot = RouterConfig().slo_tpot_s
    assert forecast.summary()["targets"] == {"batch": {"ttft": 5.0, "tpot": tpot}, "vip": {"ttft": 0.05, "tpot": tpot}}
    families = {f.name: f for f in _forecast_metrics(forecast.summary())}
    samples = {(s.labels["class"], s.labels["kind"]): s.value for s in families[CLASS_SLO_TARGET].samples}
    assert samples == {("batch", "ttft"): 5.0, ("batch", "tpot"): tpot, ("vip", "ttft"): 0.05, ("vip", "tpot"): tpot}
    strict_tpot = dataclasses.replace(strict, slo_tpot_s=0.02)
    forecast.on_placed(strict_tpot, node)
    assert forecast.summary()["targets"]["vip"] == {"ttft": 0.05, "tpot": 0.02}


def test_the_late_share_covers_only_the_recent_window(node, make_route_request):
    forecast = SloForecast(RouterConfig(slo_ttft_s=1.0), window=2)
    assert forecast.recent_late_share() == 0.0
    route = make_route_request(num_prompt_tokens=1000)
    late = dataclasses.replace(node, queued_prefill_tokens=20_000)
    for view in (late, late, node):
        forecast.on_placed(route, view)
    assert forecast.recent_late_share() == 0.5  # the first late one left the window
    forecast.on_placed(route, node)
    assert forecast.recent_late_share() == 0.0
    assert forecast.counts == {("default", "late"): 2, ("default", "in_time"): 2}  # totals keep everything


def test_a_window_below_one_is_refused():
    with pytest.raises(ValueError, match="window"):
        SloForecast(RouterConfig(), window=0)


def test_the_policys_overload_mode_is_reported_beside_and_exported_only_when_on():
    from controlplane.router.overload import OverloadDetector
    from observe.controlplane_exporter import _forecast_metrics
    from observe.metrics_names import ROUTER_OVERLOAD_ACTIVATIONS, ROUTER_OVERLOAD_MODE

    plain = SloForecast(RouterConfig())
    assert plain.summary()["overload"] is None
    assert {f.name for f in _forecast_metrics(plain.summary())}.isdisjoint({ROUTER_OVERLOAD_MODE})
    detector = OverloadDetector(window_s=10.0, late_share=0.5, min_placements=1)
    forecast = SloForecast(RouterConfig(), overload=detector)
    assert forecast.summary()["overload"] == {"on": False, "activations": 0}
    detector.record(0.0, True)
    assert detector.active(0.0)
    families = {f.name: f for f in _forecast_metrics(forecast.summary())}
    assert families[ROUTER_OVERLOAD_MODE].samples[0].value == 1.0
    activations = families[ROUTER_OVERLOAD_ACTIVATIONS]
    assert activations.samples[0].value == 1


def test_the_long_prompt_gates_median_is_reported_and_exported_only_when_on():
    """RouterConfig.slo_sacrifice_long_vs_late: the median late prompt the policy sacrifices only above, on /metrics
    as zoo:router_late_prompt_median_tokens (+Inf, and None in the stats, while too few placements were late)."""
    import math

    from controlplane.router.late_prompts import LatePrompts
    from observe.controlplane_exporter import _forecast_metrics
    from observe.metrics_names import ROUTER_LATE_PROMPT_MEDIAN

    plain = SloForecast(RouterConfig())
    assert ROUTER_LATE_PROMPT_MEDIAN not in {f.name for f in _forecast_metrics(plain.summary())}
    late = LatePrompts(window_s=10.0, min_placements=2)
    clock = [0.0]
    forecast = SloForecast(RouterConfig(), late_prompts=late, now=lambda: clock[0])
    assert forecast.summary()["long_prompt_gate"] == {"median_late_tokens": None}
    families = {f.name: f for f in _forecast_metrics(forecast.summary())}
    assert families[ROUTER_LATE_PROMPT_MEDIAN].samples[0].value == math.inf
    late.record(0.0, 3_000)
    late.record(1.0, 9_000)
    assert forecast.summary()["long_prompt_gate"] == {"median_late_tokens": 3_000.0}
    families = {f.name: f for f in _forecast_metrics(forecast.summary())}
    assert families[ROUTER_LATE_PROMPT_MEDIAN].samples[0].value == 3_000.0
    clock[0] = 10.5  # a reader later: the t=0 placement left the window, one is too few
    assert forecast.summary()["long_prompt_gate"] == {"median_late_tokens": None}


def test_the_tpot_lost_rules_redirects_are_reported_and_exported_only_when_on(make_node_view, make_route_request):
    """RouterConfig.slo_tpot_lost_to_doomed: the requests hardware_aware moved to a node that misses their TPOT target
    at any load, on /metrics as zoo:router_tpot_lost_redirects_total (absent with the rule off)."""
    from dataclasses import replace

    from controlplane.router.policies.hardware_aware import HardwareAwarePolicy
    from controlplane.router.policy import ClusterSnapshot
    from observe.controlplane_exporter import _forecast_metrics
    from observe.metrics_names import ROUTER_TPOT_LOST_REDIRECTS

    off = RouterConfig(default_model_params_b=8.0, slo_ttft_s=2.0, slo_tpot_s=0.05, slo_sacrifice_weight=0.0,
                       slo_triage_penalty_s=0.0, tpot_weight=0.0, slo_tpot_miss_penalty_s=0.0)  # fmt: skip
    assert HardwareAwarePolicy(off).tpot_lost is None
    assert SloForecast(off).summary()["tpot_lost"] is None
    assert ROUTER_TPOT_LOST_REDIRECTS not in {f.name for f in _forecast_metrics(SloForecast(off).summary())}
    policy = HardwareAwarePolicy(replace(off, slo_tpot_lost_to_doomed=True))
    forecast = SloForecast(policy.config, tpot_lost=policy.tpot_lost)
    assert forecast.summary()["tpot_lost"] == {"redirects": 0}
    h100 = make_node_view("h100", "h100-sxm", prefill_tok_per_s=40_000.0, queued_prefill_tokens=200_000)
    l4 = make_node_view("l4", "l4", prefill_tok_per_s=4_000.0, queued_prefill_tokens=40_000)
    request = make_route_request(num_prompt_tokens=1_000, max_tokens=64)
    assert policy.choose(request, ClusterSnapshot(0.0, (h100, l4))) == "l4"  # the H100 decodes it past 50 ms
    assert policy.choose(request, ClusterSnapshot(0.0, (replace(h100, queued_prefill_tokens=0), l4))) == "h100"
    assert forecast.summary()["tpot_lost"] == {"redirects": 1}
    families = {f.name: f for f in _forecast_metrics(forecast.summary())}
    assert families[ROUTER_TPOT_LOST_REDIRECTS].samples[0].value == 1
