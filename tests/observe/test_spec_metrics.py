"""The agent's /metrics carries vLLM's speculative-decoding counters when its engine speculates."""

from __future__ import annotations

import dataclasses

from prometheus_client import generate_latest

from agent.node_core import EngineObservation
from engine.scheduler_stats import SchedulerStats
from engine.spec.speculator import SpecDecodeStats
from observe.agent_exporter import AgentExporter


def _stats() -> SchedulerStats:
    return SchedulerStats(**{f.name: 0 for f in dataclasses.fields(SchedulerStats)})


def scrape(**observed) -> str:
    """The /metrics text after one EngineObservation carrying ``observed`` (spec=..., structured=...)."""
    exporter = AgentExporter()
    exporter._vllm_labels = {"model_name": "m", "node": "n", "gpu_type": "cpu", "cell": "c"}  # as describe_node
    exporter._zoo_labels = {"model": "m", "node": "n", "gpu_type": "cpu", "cell": "c"}
    exporter.observe(EngineObservation(_stats(), [], [], [], **observed))
    return generate_latest(exporter.registry).decode()


def _scrape(spec: SpecDecodeStats | None) -> str:
    return scrape(spec=spec)


def test_spec_decode_counters_use_vllms_names():
    text = _scrape(SpecDecodeStats(7, 20, 13, [6, 4, 3], 0, 40, 38))
    labels = 'cell="c",gpu_type="cpu",model_name="m",node="n"'
    # drafts from predicted outputs (OpenAI's prediction) apart, so vLLM's counters stay the proposer's
    assert f"zoo:spec_decode_prediction_draft_tokens_total{{{labels}}} 40.0" in text
    assert f"zoo:spec_decode_prediction_accepted_tokens_total{{{labels}}} 38.0" in text
    assert f"vllm:spec_decode_num_drafts_total{{{labels}}} 7.0" in text
    assert f"vllm:spec_decode_num_draft_tokens_total{{{labels}}} 20.0" in text
    assert f"vllm:spec_decode_num_accepted_tokens_total{{{labels}}} 13.0" in text
    assert f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{labels},position="2"}} 3.0' in text


def test_no_spec_counters_without_speculation():
    assert "spec_decode" not in _scrape(None)
