"""hardware_aware's overload mode seen by operators on a real ControlPlane: zoo:router_overload_mode and
zoo:router_overload_activations_total on /metrics, FleetStats.overload_mode on the stats stream (round_robin,
which has no overload mode, exports neither: tests/observe/test_stats_stream.py)."""

from __future__ import annotations

import pytest
from prometheus_client import generate_latest

pytestmark = pytest.mark.anyio


async def test_a_hardware_aware_control_plane_exports_its_overload_mode(observed_controlplane):
    async with observed_controlplane(policy="hardware_aware") as (cp, exporter, observer):
        text = generate_latest(exporter.registry).decode()
        assert "zoo:router_overload_mode 0.0" in text  # on by default, not in an overload
        assert "zoo:router_overload_activations_total 0.0" in text
        assert cp.stats()["slo_forecast"]["overload"] == {"on": False, "activations": 0}
        assert observer.fleet_stats(1).overload_mode is False  # what zoo top shows
        detector = cp.path.policy.overload  # the policy's own detector, as the control plane reports it
        for k in range(45):  # a late placement every 0.5 s for 22 s: 20 in the window from 9.5 s, held 10 s by 19.5 s
            detector.record(k / 2, True)
            detector.active(k / 2)
        assert detector.on
        text = generate_latest(exporter.registry).decode()
        assert "zoo:router_overload_mode 1.0" in text and "zoo:router_overload_activations_total 1.0" in text
        assert observer.fleet_stats(2).overload_mode is True
