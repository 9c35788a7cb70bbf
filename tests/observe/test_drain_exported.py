"""A draining control plane (ControlPlane.start_drain: `zoo controlplane` at SIGTERM) says so on /metrics
(zoo:controlplane_draining) and in the stats zoo top reads (FleetStats.draining; its status line: tests/tui)."""

from __future__ import annotations

import pytest
from prometheus_client import generate_latest


@pytest.mark.anyio
async def test_the_drain_is_exported_and_streamed(observed_controlplane):
    async with observed_controlplane() as (cp, exporter, observer):
        assert "zoo:controlplane_draining 0.0" in generate_latest(exporter.registry).decode()
        assert observer.fleet_stats(1).draining is False
        cp.start_drain()
        assert "zoo:controlplane_draining 1.0" in generate_latest(exporter.registry).decode()
        assert observer.fleet_stats(2).draining is True
