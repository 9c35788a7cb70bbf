"""The agent exports zoo:decode_roofline_fraction from its engine observations."""

from __future__ import annotations

from prometheus_client import generate_latest

from agent.node_core import EngineObservation
from backends.fake import cpu_test_hardware
from engine.scheduler_stats import SchedulerStats
from observe.agent_exporter import AgentExporter
from transport.messages import KVInfo, NodeHello


def test_decode_roofline_fraction_is_a_gauge_per_node():
    exporter = AgentExporter()
    hello = NodeHello(request_id="", node_id="n0", model="m", backend="torch", hardware=cpu_test_hardware(),
                      kv=KVInfo(8, 0, 4, 256), max_model_len=64, power_score=1.0, cell="c")  # fmt: skip
    exporter.describe_node(hello)
    stats = SchedulerStats(*([0] * 3), 0.0, *([0] * 10))
    exporter.observe(EngineObservation(stats, [], [], [], decode_roofline_fraction=0.375))
    text = generate_latest(exporter.registry).decode()
    line = next(x for x in text.splitlines() if x.startswith("zoo:decode_roofline_fraction{"))
    assert 'node="n0"' in line and line.endswith(" 0.375")
