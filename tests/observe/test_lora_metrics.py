"""vllm:lora_requests_info on an agent's /metrics: vLLM's labels, the adapters of running and waiting
requests from the node's LoadReports; zoo:lora_adapters_loaded, those in device slots; nothing on a node that
serves no adapters."""

from __future__ import annotations

from prometheus_client import generate_latest

from backends.fake import cpu_test_hardware
from observe.agent_exporter import AgentExporter
from observe.metrics_names import LORA_ADAPTERS_LOADED, LORA_REQUESTS_INFO
from transport.messages import KVInfo, LoadReport, NodeHello

HELLO = NodeHello(
    node_id="n0", model="m", backend="torch", hardware=cpu_test_hardware(),
    kv=KVInfo(num_device_blocks=8, num_host_blocks=0, block_size=16, bytes_per_block=64),
    max_model_len=128, power_score=1.0, max_loras=4,
)  # fmt: skip


def _report(**lora) -> LoadReport:
    return LoadReport(
        node_id="n0", num_running=2, num_waiting=1, num_swapped=0, kv_usage=0.1, num_free_device_blocks=7,
        queued_prefill_tokens=0, decode_batch_size=2, recent_step_ms=[], prefill_tok_per_s=0.0, decode_step_ms=0.0,
        num_preemptions_total=0, num_requests_finished_total=0, prefix_cache_hit_rate=0.0, **lora,
    )  # fmt: skip


def _scrape(exporter: AgentExporter) -> str:
    from agent.node_core import EngineObservation
    from engine.scheduler_stats import SchedulerStats

    stats = SchedulerStats(2, 1, 0, 0.1, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0)
    exporter.observe(EngineObservation(stats, [], [], []))
    return generate_latest(exporter.registry).decode()


def test_lora_requests_info_has_vllms_labels():
    exporter = AgentExporter()
    exporter.describe_node(HELLO)
    exporter.observe_lora(4, _report(lora_running=["chat", "sql"], lora_waiting=["poetry"], lora_resident=["sql"]))
    lines = [line for line in _scrape(exporter).splitlines() if line.startswith(LORA_REQUESTS_INFO + "{")]
    assert len(lines) == 1
    for label in ('max_lora="4"', 'running_lora_adapters="chat,sql"', 'waiting_lora_adapters="poetry"', 'node="n0"'):
        assert label in lines[0]
    assert float(lines[0].rsplit(" ", 1)[1]) > 1e9  # vLLM's value: a unix time
    loaded = [line for line in _scrape(exporter).splitlines() if line.startswith(LORA_ADAPTERS_LOADED + "{")]
    assert len(loaded) == 1 and 'node="n0"' in loaded[0] and loaded[0].endswith(" 1.0")  # adapters in slots


def test_no_lora_info_without_adapters():
    exporter = AgentExporter()
    exporter.describe_node(HELLO)
    exporter.observe_lora(0, _report())
    assert LORA_REQUESTS_INFO not in _scrape(exporter) and LORA_ADAPTERS_LOADED not in _scrape(exporter)
