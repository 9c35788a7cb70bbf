"""FleetStats factories for the dashboard tests (fixtures: test modules cannot import each other)."""

from __future__ import annotations

import pytest

from transport.messages import FleetStats, LatencyFigure, NodeStats


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _node(node_id: str, gpu_type: str, cell: str, power: float, running: int, state: str = "up") -> NodeStats:
    return NodeStats(
        node_id=node_id, state=state, gpu_type=gpu_type, cell=cell, model="fake-bytes", power_score=power,
        num_running=running, num_waiting=running // 2, kv_usage=running / 100, ttft_p50_s=0.010 * power,
        ttft_p99_s=0.030 * power, tpot_p50_s=0.002, tpot_p99_s=0.004, num_served_total=10 * running,
        num_routed_total=10 * running, metrics_url=f"http://127.0.0.1:9{running:03d}/metrics",
    )  # fmt: skip


FLEET = (
    ("h100-0", "H100", "east", 3.5, 12),
    ("a100-0", "A100-80GB", "east", 2.0, 7),
    ("l4-0", "L4", "west", 0.6, 3),
    ("t4-0", "T4", "west", 0.3, 1),
)


def _stats(seq: int, *, started_ns: int = 1, dead: tuple[str, ...] = (), gone: tuple[str, ...] = (),
           ebpf: bool = True) -> FleetStats:  # fmt: skip
    nodes = [_node(*n, state="dead" if n[0] in dead else "up") for n in FLEET if n[0] not in gone]
    latencies = []
    for i, n in enumerate(nodes):
        for name, base_s in (
            ("router_queue_wait", 50e-6),
            ("router_to_node_hop", 120e-6),
            ("node_to_router_return", 90e-6),
        ):
            value_s = base_s * (1 + i) * (1 + seq % 5)
            latencies.append(LatencyFigure(name=name, source="app", node_id=n.node_id, count_total=100 + seq,
                                           p50_s=value_s, p99_s=3 * value_s, interval_count=5,
                                           interval_p50_s=value_s))  # fmt: skip
            if ebpf and name != "router_queue_wait":
                latencies.append(LatencyFigure(name=name, source="ebpf", node_id=n.node_id, count_total=100 + seq,
                                               p50_s=0.8 * value_s, p99_s=2 * value_s, interval_count=5,
                                               interval_p50_s=0.8 * value_s))  # fmt: skip
    for name in ("router_queue_wait", "router_to_node_hop", "node_to_router_return"):
        for source in ("app", "ebpf") if ebpf and name != "router_queue_wait" else ("app",):
            mine = [f for f in latencies if f.name == name and f.source == source]
            total = sum(f.count_total for f in mine)
            latencies.append(LatencyFigure(name=name, source=source, node_id="", count_total=total,
                                           p50_s=mine[0].p50_s, p99_s=mine[-1].p99_s, interval_count=5,
                                           interval_p50_s=mine[0].interval_p50_s))  # fmt: skip
    return FleetStats(
        seq=seq, started_ns=started_ns, policy="hardware_aware", nodes=nodes, latencies=latencies,
        num_requests_total={"routed": 40 * seq, "completed": 38 * seq, "failed": 0, "cancelled": 0, "refused": seq},
        num_inflight=2, rejected_requests_total={"overloaded": seq}, num_preemptions_total=seq,
        ebpf_status="attached" if ebpf else "", sent_ns=1_000_000_000 + seq * 500_000_000,
    )  # fmt: skip


@pytest.fixture
def make_stats():
    """``make_stats(seq, started_ns=1, dead=(), gone=(), ebpf=True) -> FleetStats`` of a four-node fleet."""
    return _stats
