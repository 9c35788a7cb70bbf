"""The KV data plane's and live migrations' metrics: zoo:kv_transfer_bytes_total{direction,peer},
zoo:kv_transfer_seconds, zoo:kv_transfer_refused_total{reason}, zoo:kv_events_batches_total{outcome} (agent) and
zoo:migrations_total (control plane)."""

from __future__ import annotations

import types

from prometheus_client import generate_latest

from observe.agent_exporter import AgentExporter
from observe.controlplane_exporter import ControlPlaneExporter
from transport.kv_transfer import KVRefusal
from transport.messages import HardwareInfo, KVInfo, NodeHello


def _hello() -> NodeHello:
    hw = HardwareInfo("cpu", "cpu", None, 1.0, 1.0, 1.0, "measured")
    return NodeHello(
        node_id="n1", model="m", backend="torch", hardware=hw, kv=KVInfo(8, 8, 16, 1024), max_model_len=64,
        power_score=1.0,
    )  # fmt: skip


def test_agent_exports_kv_transfers_and_refusals():
    exporter = AgentExporter()
    exporter.describe_node(_hello())
    refused = dict.fromkeys(KVRefusal, 0)
    exporter.describe_kv_plane(refused)
    exporter.observe_kv_transfer("out", "tcp://127.0.0.1:9", 4096, 0.002)
    exporter.observe_kv_transfer("in", "n2", 1000, 0.001)
    refused[KVRefusal.LAYOUT] += 1
    text = generate_latest(exporter.registry).decode()
    assert 'zoo:kv_transfer_bytes_total{cell="default",direction="out",gpu_type="cpu",model="m",node="n1",' in text
    assert 'peer="tcp://127.0.0.1:9"} 4096.0' in text and 'peer="n2"} 1000.0' in text
    assert 'zoo:kv_transfer_seconds_count{cell="default",direction="in"' in text
    assert 'reason="layout"} 1.0' in text and 'reason="checksum"} 0.0' in text


def test_agent_exports_its_kv_event_batches_by_outcome():
    exporter = AgentExporter()
    exporter.describe_node(_hello())
    assert "zoo:kv_events_batches" not in generate_latest(exporter.registry).decode()  # no publisher: no series
    publisher = types.SimpleNamespace(num_sent=0, num_dropped=0, replay_endpoint=None)
    exporter.describe_kv_events(publisher)
    publisher.num_sent, publisher.num_dropped = 41, 2  # read at each scrape
    text = generate_latest(exporter.registry).decode()
    assert 'zoo:kv_events_batches_total{cell="default",gpu_type="cpu",model="m",node="n1",outcome="sent"} 41.0' in text
    assert 'outcome="dropped"} 2.0' in text
    assert "zoo:kv_events_replay_requests" not in text  # no replay socket: no series
    publisher.replay_endpoint = "tcp://127.0.0.1:5558"
    publisher.replays, publisher.num_bad_replay_requests = {"streamed": 3, "batches": 1, "snapshot": 2}, 4
    text = generate_latest(exporter.registry).decode()
    assert (
        'zoo:kv_events_replay_requests_total{cell="default",gpu_type="cpu",model="m",node="n1",outcome="streamed"} 3.0'
        in text
    )
    assert 'outcome="snapshot"} 2.0' in text and 'outcome="refused"} 4.0' in text


def test_controlplane_exports_migrations_by_reason_and_outcome():
    stats = {"policy": "p", "nodes": {}, "refused": {}, "rejected_messages": {},
             "migrations": {"drain:ok": 2, "drain:failed": 1}}  # fmt: skip
    text = generate_latest(ControlPlaneExporter(lambda: stats).registry).decode()
    assert 'zoo:migrations_total{outcome="ok",reason="drain"} 2.0' in text
    assert 'zoo:migrations_total{outcome="failed",reason="drain"} 1.0' in text
