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


def test_node_states_and_membership_events_are_exported():
    """zoo:node_state (1 for each node's state) and zoo:node_membership_events_total (the registry's counts, as
    ControlPlane.stats()["registry"] carries them): a node drained then resumed, one drained, one gone, one leaving."""
    import dataclasses

    from backends.gpu_table import gpu_profile, power_score
    from controlplane.registry import ClusterRegistry
    from engine.clock import ManualClock
    from observe.controlplane_exporter import ControlPlaneExporter
    from transport.messages import KVInfo, NodeHello

    hw = gpu_profile("l4")
    registry = ClusterRegistry(ManualClock(), heartbeat_timeout_s=5.0)
    kv = KVInfo(num_device_blocks=64, num_host_blocks=0, block_size=16, bytes_per_block=4096)
    for node_id in ("a", "b", "c", "d"):
        registry.join(NodeHello(node_id=node_id, model="m", backend="sim", hardware=hw, kv=kv, max_model_len=512,
                                power_score=power_score(hw)))  # fmt: skip
    registry.drain("a")
    assert registry.resume("a") == "resumed"
    registry.drain("b")
    registry.leave("c")
    registry.drain("d", leaving=True)  # its agent's SIGTERM: the control plane's stats call it "leaving"
    states = {"a": "up", "b": "draining", "c": "dead", "d": "leaving"}
    nodes = {
        node_id: {"model": "m", "gpu_type": hw.gpu_type, "cell": "default", "alive": node_id != "c", "state": state}
        for node_id, state in states.items()
    }  # fmt: skip
    stats = {"policy": "round_robin", "nodes": nodes, "refused": {}, "rejected_messages": {},
             "registry": dataclasses.asdict(registry.make_stats())}  # fmt: skip
    text = generate_latest(ControlPlaneExporter(lambda: stats).registry).decode()

    def state_of(node_id: str) -> list[str]:
        lines = [line for line in text.splitlines() if line.startswith("zoo:node_state{") and line.endswith(" 1.0")]
        return [line.split('state="')[1].split('"')[0] for line in lines if f'node="{node_id}"' in line]

    assert {node_id: state_of(node_id) for node_id in states} == {k: [v] for k, v in states.items()}
    for event, n in (("joins", 4), ("drains", 3), ("resumes", 1), ("leaves", 1), ("expired", 0)):
        assert f'zoo:node_membership_events_total{{event="{event}"}} {n}.0' in text
