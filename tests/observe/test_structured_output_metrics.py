"""The agent's /metrics counts structured outputs: constrained requests, their grammars' forced tokens proposed as
drafts and accepted (engine/spec/grammar_drafts.py)."""

from __future__ import annotations

from engine.spec.grammar_drafts import StructuredOutputStats
from tests.observe.test_spec_metrics import scrape


def test_structured_output_counters():
    text = scrape(structured=StructuredOutputStats(5, 40, 38))
    labels = 'cell="c",gpu_type="cpu",model_name="m",node="n"'
    assert f"zoo:structured_output_requests_total{{{labels}}} 5.0" in text
    assert f"zoo:structured_output_forced_draft_tokens_total{{{labels}}} 40.0" in text
    assert f"zoo:structured_output_forced_accepted_tokens_total{{{labels}}} 38.0" in text
    assert "structured_output" not in scrape(structured=None)
