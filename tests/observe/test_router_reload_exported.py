"""A router reload on a real ControlPlane (controlplane/router_reload.py): it routes with the new knobs from the
next request, says so on /metrics (zoo:router_config_info, zoo:router_config_reloads_total) and in the stats zoo top
reads, refuses a bad file or a policy it cannot reconfigure, and leaves the running router as it was then."""

from __future__ import annotations

import json

import pytest
from prometheus_client import generate_latest

from controlplane.router.router_config import RouterConfig
from controlplane.router_reload import reload_from_file, reload_router


def _info(exporter) -> dict[str, str]:
    from prometheus_client.parser import text_string_to_metric_families

    text = generate_latest(exporter.registry).decode()
    [labels] = [s.labels for f in text_string_to_metric_families(text) for s in f.samples
                if s.name == "zoo:router_config_info"]  # fmt: skip
    return labels


@pytest.mark.anyio
async def test_a_reload_routes_with_the_new_knobs_and_exports_them(observed_controlplane, tmp_path):
    async with observed_controlplane(policy="hardware_aware") as (cp, exporter, observer):
        old = cp.path.policy
        knobs = tmp_path / "knobs.json"
        knobs.write_text(json.dumps({"slo_ttft_s": 2.0, "tpot_weight": 0.3}))
        assert reload_from_file(cp, knobs)
        policy = cp.path.policy
        assert policy is not old and cp.policy is policy and cp.path.table.policy is policy
        assert policy.config.slo_ttft_s == 2.0 and policy.config.tpot_weight == 0.3
        assert cp.config.router is cp.path.router is policy.config and cp.path.forecast.config is policy.config
        assert cp.path.forecast.overload is policy.overload  # what the stats report of overload mode is the new one's
        assert _info(exporter)["knobs"] == '{"slo_ttft_s":2.0,"tpot_weight":0.3}'
        assert observer.fleet_stats(1).router_knobs == {"slo_ttft_s": 2.0, "tpot_weight": 0.3}
        text = generate_latest(exporter.registry).decode()
        assert 'zoo:router_config_reloads_total{outcome="ok"} 1.0' in text
        knobs.write_text('{"slo_ttft_s": "soon"}')  # refused: logged, counted, the router as it was
        assert not reload_from_file(cp, knobs)
        assert cp.path.policy is policy and _info(exporter)["knobs"] == '{"slo_ttft_s":2.0,"tpot_weight":0.3}'
        text = generate_latest(exporter.registry).decode()
        assert 'zoo:router_config_reloads_total{outcome="refused"} 1.0' in text
        knobs.write_text(json.dumps({"slo_ttft_s": 2.0, "tpot_weight": 0.3}))
        assert reload_from_file(cp, knobs) and cp.path.policy is policy  # the same knobs: nothing rebuilt
        knobs.write_text('{"tpot_weight": 0.3, "slo_ttft_s": 2}')
        assert reload_from_file(cp, knobs) and cp.path.policy is policy  # the same set, written otherwise
        knobs.write_text("{}")  # the whole set: a knob the file no longer names returns to its default
        assert reload_from_file(cp, knobs)
        assert cp.path.router == RouterConfig(policy="hardware_aware") and _info(exporter)["knobs"] == "{}"
        assert cp.path.router_reloads == {"ok": 4, "refused": 1}
        assert observer.fleet_stats(2).router_reloads == {"ok": 4, "refused": 1}  # what zoo top shows


@pytest.mark.anyio
async def test_a_policy_that_keeps_per_request_state_is_not_reloaded(observed_controlplane):
    async with observed_controlplane(policy="dynamo_kv") as (cp, _exporter, _observer):
        policy = cp.path.policy
        with pytest.raises(ValueError, match="restart the control plane to change its knobs"):
            reload_router(cp, {"slo_ttft_s": 2.0})
        assert cp.path.policy is policy and cp.path.router.slo_ttft_s == 1.0


@pytest.mark.anyio
async def test_a_policy_that_fails_to_rebuild_itself_leaves_the_router_running(observed_controlplane, tmp_path):
    """Whatever the rebuild raises, the SIGHUP handler's loop goes on: counted refused, the router as it was."""
    async with observed_controlplane(policy="hardware_aware") as (cp, _exporter, _observer):
        policy = cp.path.policy

        def broken(config):
            raise RuntimeError("numba fell over")

        policy.reconfigured = broken
        knobs = tmp_path / "knobs.json"
        knobs.write_text('{"slo_ttft_s": 2.0}')
        assert not reload_from_file(cp, knobs)
        assert cp.path.policy is policy and cp.path.router.slo_ttft_s == 1.0
        assert cp.path.router_reloads == {"ok": 0, "refused": 1}
