"""The control plane's FleetStats stream over a real PUB/SUB pair, and eBPF figures from probe snapshots."""

from __future__ import annotations

import anyio
import pytest

from client import AsyncZooClient
from observe.latency_window import EbpfFigures, LatencyWindows
from observe.stats_stream import FleetObserver, StatsPublisher, subscribe
from transport.messages import FleetStats

pytestmark = pytest.mark.anyio


async def _first(stream, predicate, timeout_s: float = 20.0) -> FleetStats:
    with anyio.fail_after(timeout_s):
        async for stats in stream:
            if predicate(stats):
                return stats
    raise AssertionError("the stream ended")


async def test_the_stream_delivers_fleet_stats_with_nodes_and_app_latencies(observed_controlplane, spawn_agent):
    async with observed_controlplane() as (cp, _exporter, observer), anyio.create_task_group() as tg:
        endpoint = await tg.start(StatsPublisher(observer, "tcp://127.0.0.1:0", interval_s=0.05).run)
        stream = subscribe(endpoint)
        try:
            spawn_agent(cp.agent_endpoint, "a", "--fake-gpu-type", "L4", "--cell", "west")
            await cp.wait_until(lambda: "a" in cp.registry, 30)
            async with AsyncZooClient(cp.client_endpoint, timeout_s=20) as c:
                await c.generate("hello", max_tokens=3)
            stats = await _first(
                stream, lambda s: any(f.name == "router_to_node_hop" and f.node_id == "a" for f in s.latencies)
            )
        finally:
            await stream.aclose()
            tg.cancel_scope.cancel()
    [node] = stats.nodes
    assert (node.node_id, node.state, node.gpu_type, node.cell, node.model) == ("a", "up", "L4", "west", "fake-bytes")
    assert node.num_served_total == node.num_routed_total == 1 and node.ttft_p50_s is not None
    assert stats.num_requests_total["completed"] == 1 and stats.policy == "round_robin"
    figures = {(f.name, f.source, f.node_id): f for f in stats.latencies}
    assert figures[("router_queue_wait", "app", "a")].count_total == 1
    assert figures[("node_to_router_return", "app", "")].count_total == 3  # one chunk per token
    assert figures[("router_to_node_hop", "app", "a")].p50_s > 0
    assert figures[("predicted_ttft", "app", "a")].count_total == 1  # the SLO forecast of its placement
    assert stats.slo_forecast_late_share == 0.0  # a short prompt on an idle node: forecast in time
    assert stats.overload_mode is None  # round_robin has no overload mode
    assert stats.ebpf_status == ""  # no probe


def test_latency_windows_report_the_interval_since_the_last_snapshot():
    w = LatencyWindows()
    for v in (0.001, 0.002, 0.003):
        w.add("router_queue_wait", "a", v)
    first = {(f.name, f.node_id): f for f in w.figures()}
    assert first[("router_queue_wait", "a")].interval_p50_s == 0.002
    assert first[("router_queue_wait", "")].count_total == 3
    again = {(f.name, f.node_id): f for f in w.figures()}
    assert again[("router_queue_wait", "a")].interval_count == 0
    assert again[("router_queue_wait", "a")].interval_p50_s is None
    assert again[("router_queue_wait", "a")].p50_s == 0.002  # the window keeps the samples


def _hist(*buckets: tuple[int, int, int]) -> dict:
    return {"count": sum(b[2] for b in buckets), "buckets": [list(b) for b in buckets]}


def test_ebpf_figures_from_cumulative_probe_snapshots():
    ebpf = EbpfFigures()
    # the shape ZooProbe.read() returns (observe/ebpf/probe.py)
    snap1 = {"hop_mode": "wire", "hops_by_node": {"a": {"router->agent": _hist((100_000, 112_500, 4))}}}
    snap2 = {
        "hop_mode": "wire",
        "hops_by_node": {"a": {"router->agent": _hist((100_000, 112_500, 4), (200_000, 225_000, 2))}},
        "sched": {"a": {"loop_offcpu": _hist((1_000, 2_000, 3)), "loop_switches": 3}},
    }
    ebpf.update(snap1)
    figures = {(f.name, f.node_id): f for f in ebpf.update(snap2)}
    hop = figures[("router_to_node_hop", "a")]
    assert (hop.source, hop.count_total, hop.interval_count) == ("ebpf", 6, 2)
    assert 200e-6 <= hop.interval_p50_s <= 225e-6  # only the new samples
    assert 100e-6 <= hop.p50_s <= 112.5e-6
    assert figures[("engine_offcpu", "a")].count_total == 3
    assert ebpf.status == "attached (wire)"
    assert ebpf.update(None) == [] and ebpf.status == ""


async def test_a_probe_snapshot_pushed_to_the_control_plane_reaches_the_stream(observed_controlplane):
    from observe.ebpf.probe import SnapshotPusher

    snapshot = {
        "hop_mode": "wire",
        "hops_by_node": {
            "a": {"router->agent": _hist((20_000, 22_500, 5)), "agent->router": _hist((30_000, 33_750, 5))}
        },
        "sched": {},
    }
    async with observed_controlplane() as (cp, _exporter, observer), anyio.create_task_group() as tg:
        endpoint = await tg.start(StatsPublisher(observer, "tcp://127.0.0.1:0", interval_s=0.05).run)
        stream = subscribe(endpoint)
        pusher = SnapshotPusher(cp.client_endpoint)  # what `zoo probe` does with each snapshot
        try:
            pusher.push(snapshot)
            await cp.wait_until(lambda: cp.latest_probe_snapshot() is not None, 20)
            stats = await _first(stream, lambda s: any(f.source == "ebpf" for f in s.latencies))
        finally:
            pusher.close()
            await stream.aclose()
            tg.cancel_scope.cancel()
    figures = {(f.name, f.source, f.node_id): f for f in stats.latencies}
    assert figures[("router_to_node_hop", "ebpf", "a")].count_total == 5
    assert 20e-6 <= figures[("node_to_router_return", "ebpf", "a")].p50_s <= 33.75e-6 * 1.2
    assert stats.ebpf_status == "attached (wire)"


def test_the_capacity_plan_reaches_the_stream_with_the_pools_whose_arrivals_grow():
    """FleetObserver.fleet_stats: each variant's nodes and wanted nodes, and the pools whose forecast growth is
    above 1 (a steady pool is left out: `zoo top` names only those growing)."""

    class _Cp:
        def __init__(self) -> None:
            self.hellos: dict = {}

        def take_events(self) -> list:
            return []

        def stats(self) -> dict:
            variant = {"gpu_type": "L4", "nodes": 2, "desired": 3}
            return {
                "policy": "hardware_aware",
                "nodes": {},
                "requests": {"inflight": 0},
                "refused": {},
                "rejected_messages": {},
                "capacity": [
                    {"model": "m", "cell": "chat", "growth": 1.25, "waiting": 0, "variants": [variant]},
                    {"model": "m", "cell": "vip", "growth": 1.0, "waiting": 0, "variants": [{**variant, "desired": 2}]},
                    {"model": "cold", "cell": "default", "growth": 1.0, "waiting": 2, "variants": [variant]},
                ],
            }

    stats = FleetObserver(_Cp()).fleet_stats(0)
    assert stats.capacity == [("m", "chat", "L4", 2, 3), ("m", "vip", "L4", 2, 2), ("cold", "default", "L4", 2, 3)]
    assert stats.capacity_growth == [("m", "chat", 1.25)]
    assert stats.capacity_waiting == {"cold": 2}  # requests held for a first node of a model (cold_start.py)
