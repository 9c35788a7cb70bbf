"""The agent's /metrics counts structured outputs: constrained requests, their grammars' forced tokens proposed as
drafts and accepted (engine/spec/grammar_drafts.py)."""

from __future__ import annotations

from prometheus_client import generate_latest

from agent.node_core import EngineObservation
from engine.spec.grammar_drafts import StructuredOutputStats
from observe.agent_exporter import AgentExporter
from tests.observe.test_spec_metrics import _stats


def _scrape(structured: StructuredOutputStats | None) -> str:
    exporter = AgentExporter()
    exporter._vllm_labels = {"model_name": "m", "node": "n", "gpu_type": "cpu", "cell": "c"}  # as describe_node
    exporter._zoo_labels = {"model": "m", "node": "n", "gpu_type": "cpu", "cell": "c"}
    exporter.observe(EngineObservation(_stats(), [], [], [], structured=structured))
    return generate_latest(exporter.registry).decode()


def test_structured_output_counters():
    text = _scrape(StructuredOutputStats(5, 40, 38))
    labels = 'cell="c",gpu_type="cpu",model_name="m",node="n"'
    assert f"zoo:structured_output_requests_total{{{labels}}} 5.0" in text
    assert f"zoo:structured_output_forced_draft_tokens_total{{{labels}}} 40.0" in text
    assert f"zoo:structured_output_forced_accepted_tokens_total{{{labels}}} 38.0" in text
    assert "structured_output" not in _scrape(None)
