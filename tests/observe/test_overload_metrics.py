"""hardware_aware's overload mode seen by operators on a real ControlPlane: zoo:router_overload_mode and
zoo:router_overload_activations_total on /metrics, FleetStats.overload_mode on the stats stream (round_robin,
which has no overload mode, exports neither: tests/observe/test_stats_stream.py)."""

from __future__ import annotations

import json

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.anyio


async def test_a_hardware_aware_control_plane_exports_its_overload_mode(observed_controlplane):
    async with observed_controlplane(policy="hardware_aware") as (cp, exporter, observer):
        text = generate_latest(exporter.registry).decode()
        assert "zoo:router_overload_mode 0.0" in text  # on by default, not in an overload
        assert "zoo:router_overload_activations_total 0.0" in text
        assert "zoo:router_late_prompt_median_tokens +Inf" in text  # the long-prompt gate, on: nothing late yet
        assert cp.path.forecast.late_prompts is cp.path.policy.late_prompts
        assert cp.stats()["slo_forecast"]["overload"] == {"on": False, "activations": 0}
        assert observer.fleet_stats(1).overload_mode is False  # what zoo top shows
        detector = cp.path.policy.overload  # the policy's own detector, as the control plane reports it
        now = cp.registry.clock.now()  # the policy's clock
        for k in range(221):  # a late placement every 0.1 s for the last 22 s: on after 10 s held (the window is
            t = now - 22.0 + k / 10  # full from its 20th), and a reader seconds later still finds 20 in the window
            detector.record(t, True)
            detector.active(t)
        assert detector.on
        text = generate_latest(exporter.registry).decode()
        assert "zoo:router_overload_mode 1.0" in text and "zoo:router_overload_activations_total 1.0" in text
        assert observer.fleet_stats(2).overload_mode is True
        cp.path.forecast._now = lambda: now + 50.0  # a reader 50 s later, no decision since: the window is empty
        assert cp.stats()["slo_forecast"]["overload"] == {"on": False, "activations": 1}


async def test_the_tpot_lost_rule_is_exported_only_when_configured_on(observed_controlplane):
    """RouterConfig.slo_tpot_lost_to_doomed: the control plane's forecast reads the policy's own counter, and
    /metrics carries zoo:router_tpot_lost_redirects_total only with the rule on."""
    async with observed_controlplane(policy="hardware_aware") as (cp, exporter, observer):
        assert cp.path.policy.tpot_lost is None and observer.fleet_stats(1).tpot_lost_redirects_total is None
        assert "zoo:router_tpot_lost_redirects" not in generate_latest(exporter.registry).decode()
    knobs = {"slo_tpot_lost_to_doomed": True}
    async with observed_controlplane(policy="hardware_aware", router_knobs=knobs) as (cp, exporter, observer):
        assert cp.path.forecast.tpot_lost is cp.path.policy.tpot_lost is not None
        assert "zoo:router_tpot_lost_redirects_total 0.0" in generate_latest(exporter.registry).decode()
        cp.path.policy.tpot_lost.moved = 3
        assert "zoo:router_tpot_lost_redirects_total 3.0" in generate_latest(exporter.registry).decode()
        assert cp.stats()["slo_forecast"]["tpot_lost"] == {"redirects": 3}
        assert observer.fleet_stats(1).tpot_lost_redirects_total == 3  # what zoo top shows


def _router_config_info(text: str) -> list[tuple[dict, float]]:
    return [
        (sample.labels, sample.value)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "zoo:router_config_info"
    ]


async def test_the_router_config_is_exported_as_an_info_metric(observed_controlplane):
    """zoo:router_config_info: the policy, the SLO and the knobs set off their defaults as one JSON label (vLLM's
    vllm:cache_config_info shape), on /metrics and in what zoo top reads."""
    async with observed_controlplane(policy="hardware_aware") as (_cp, exporter, observer):
        labels = {"policy": "hardware_aware", "slo_ttft_s": "1.0", "slo_tpot_s": "0.1", "knobs": "{}"}
        assert _router_config_info(generate_latest(exporter.registry).decode()) == [(labels, 1.0)]
        assert observer.fleet_stats(1).router_knobs == {}
    knobs = {"slo_ttft_s": 2.0, "slo_tpot_s": 0.05, "model_params_b": {"m": 8.0}}
    async with observed_controlplane(policy="hardware_aware", router_knobs=knobs) as (_cp, exporter, observer):
        [(labels, value)] = _router_config_info(generate_latest(exporter.registry).decode())
        assert (labels["slo_ttft_s"], labels["slo_tpot_s"], value) == ("2.0", "0.05", 1.0)
        assert labels["knobs"] == '{"model_params_b":{"m":8.0},"slo_tpot_s":0.05,"slo_ttft_s":2.0}'  # sorted
        assert observer.fleet_stats(1).router_knobs == json.loads(labels["knobs"])
