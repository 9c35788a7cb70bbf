"""Drafts a structured output's grammar forces: where the grammar allows one continuation only (a JSON key once its
first letters are out, a regex's literal, the rest of a choice), those tokens are proposed as drafts and verified by
the model in one step, as any deterministic draft is (backends/sample_slots.py), instead of one step each.

SGLang's "jump-forward decoding" (sglang/srt/constrained/, the compressed FSM) skips such spans; here they stay
drafts, so the model still samples every token under the grammar's ban (each draft row's ban follows the drafts
before it: backends/logits_adjust.py) and the output is the one plain decoding gives: a greedy request's tokens are
the same, a sampled one's come from the same distributions. A draft the model would not pick (another tokenization
of the same bytes) is rejected there like any other. The tokens come from llguidance's fast-forward
(``LLGuidanceGrammar.forced_tokens``).

Driven by LLMEngine.start_step, after the speculator (which proposes nothing for a constrained request: it processes
its logits). Sans-IO.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.batch import RunnerOutput, SchedulerOutput
from engine.request import Request

MAX_FORCED_DRAFTS = 8  # per request and step: a verification chunk's rows


@dataclass(slots=True)
class StructuredOutputStats:
    """Totals since start, for the node's exporter (observe/agent_exporter.py): constrained requests admitted, the
    forced tokens proposed as drafts, and those the model accepted."""

    num_requests_total: int = 0
    num_forced_draft_tokens_total: int = 0
    num_forced_accepted_tokens_total: int = 0

    def copy(self) -> StructuredOutputStats:
        return StructuredOutputStats(
            self.num_requests_total, self.num_forced_draft_tokens_total, self.num_forced_accepted_tokens_total
        )


def propose_forced_drafts(running: list[Request], max_drafts: int = MAX_FORCED_DRAFTS) -> int:
    """Put each decoding constrained request's forced tokens (within ``max_tokens``' room) on it as drafts; returns
    how many were proposed. The grammar first consumes the output it has not seen (the last step's tokens)."""
    proposed = 0
    for request in running:
        grammar = request.grammar
        if grammar is None or request.spec_token_ids or request.num_computed_tokens != request.num_tokens - 1:
            continue
        unseen = request.output_token_ids[grammar.num_consumed - request.num_resumed_tokens :]
        if unseen:
            grammar.advance(unseen)
        room = request.sampling_params.max_tokens - request.num_output_tokens - 1
        forced = grammar.forced_tokens(min(room, max_drafts))
        if forced:
            request.spec_token_ids = list(forced)
            proposed += len(forced)
    return proposed


def count_accepted(batch: SchedulerOutput, output: RunnerOutput) -> int:
    """The forced drafts of ``batch`` that its runner accepted (a constrained request's drafts are all forced)."""
    accepted = 0
    for scheduled in batch.requests:
        inputs = scheduled.logits_inputs
        if scheduled.spec_token_ids and inputs is not None and inputs.grammar is not None:
            sampled = output.sampled_token_ids.get(scheduled.req_id)
            if sampled:
                accepted += min(len(sampled) - 1, len(scheduled.spec_token_ids))
    return accepted
