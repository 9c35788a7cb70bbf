"""A node's step token budget (``max_num_batched_tokens``, the chunked-prefill chunk) sized to its speed and the
operator's TPOT SLO. Sans-IO: plain arithmetic on figures the node measured.

Under chunked prefill every step carries the running requests' decode tokens plus prompt chunks up to the budget,
so the step time — which is every decoding request's time per output token — grows with the budget. One budget for
a whole mismatched fleet is wrong on both ends: 2,048 tokens is ~50 ms on an H100 but ~470 ms on an L4 (Llama-3-8B),
far past a 100 ms TPOT SLO. Sarathi-Serve sizes the token budget per deployment from a profile so that an iteration
meets the TPOT SLO (Agrawal et al., "Taming Throughput-Latency Tradeoff in LLM Inference with Sarathi-Serve",
OSDI 2024, section 4.3 "Determining the token budget"; repository microsoft/sarathi-serve). This module applies that
rule per node, with a linear step-time model fitted to the node's own start-up profile (``NodeCore.profile``)::

    step_s(T) ~= decode_step_s + (T - 1) * per_token_prefill_s          (T tokens in the step)
    budget    = max T with step_s(T) <= headroom * tpot_slo_s, clamped to [floor, ceiling]

Differences from Sarathi-Serve (deliberate): Sarathi-Serve profiles iteration latency over a grid of budgets and
decode batch sizes offline (its ``sarathi/benchmark`` capacity search); here two measured points — a prefill step
and a batch-1 decode step, which the agent already runs at start-up — fit the line, and ``headroom`` (< 1) leaves
room for the larger decode batches and attention of a loaded node that the profile does not see.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

DEFAULT_HEADROOM = 0.8  # the step aims at 80% of the TPOT SLO: decode batches grow under load
DEFAULT_FLOOR_TOKENS = 256  # below this a step's prefill is too small to use the GPU (Sarathi-Serve's smallest)
DEFAULT_CEILING_TOKENS = 8192
BUDGET_MULTIPLE = 16  # budgets are rounded down to a multiple of this (a KV block; kernel-friendly sizes)


@dataclass(frozen=True, slots=True)
class StepBudget:
    """The budget chosen and why: the figures it came from (logged by the agent, printed by ``zoo sim``)."""

    tokens: int
    per_token_prefill_s: float
    decode_step_s: float
    tpot_slo_s: float
    unclamped_tokens: float  # before floor/ceiling (inf: the fit says the step never reaches the SLO)

    def describe(self) -> str:
        return (
            f"{self.tokens} tokens (TPOT SLO {1e3 * self.tpot_slo_s:g} ms, decode step {1e3 * self.decode_step_s:.1f} "
            f"ms, {1e6 * self.per_token_prefill_s:.1f} us/prefill token)"
        )


def per_token_prefill_s_from_profile(prefill_tok_per_s: float, decode_step_ms: float, num_prompt_tokens: int) -> float:
    """The marginal time of one more token in a step, from a profile's prefill step (``num_prompt_tokens`` at
    ``prefill_tok_per_s``) and its decode step: the two steps share the fixed cost (weights read, launches), so the
    slope between them is the per-token cost. Falls back to the prefill step's mean per-token time (which counts
    the fixed cost too: a smaller, safe budget) when the two points cannot give a positive slope."""
    if prefill_tok_per_s <= 0 or not math.isfinite(prefill_tok_per_s):
        raise ValueError(f"prefill_tok_per_s must be a positive number, got {prefill_tok_per_s}")
    if num_prompt_tokens < 1:
        raise ValueError(f"num_prompt_tokens must be >= 1, got {num_prompt_tokens}")
    prefill_step_s = num_prompt_tokens / prefill_tok_per_s
    mean_s = 1.0 / prefill_tok_per_s
    if num_prompt_tokens < 2 or decode_step_ms <= 0:
        return mean_s
    slope = (prefill_step_s - decode_step_ms / 1e3) / (num_prompt_tokens - 1)
    return slope if slope > 0 else mean_s


def sarathi_step_budget(
    per_token_prefill_s: float,
    decode_step_s: float,
    tpot_slo_s: float,
    *,
    headroom: float = DEFAULT_HEADROOM,
    floor_tokens: int = DEFAULT_FLOOR_TOKENS,
    ceiling_tokens: int = DEFAULT_CEILING_TOKENS,
) -> StepBudget:
    """The largest step token budget whose predicted step time stays within ``headroom`` x ``tpot_slo_s`` (see the
    module docstring), rounded down to a multiple of 16 and clamped to [``floor_tokens``, ``ceiling_tokens``]. A
    node too slow to decode within the SLO at all gets the floor: it still serves, its prefills as small as useful.
    """
    if not (per_token_prefill_s > 0 and math.isfinite(per_token_prefill_s)):
        raise ValueError(f"per_token_prefill_s must be a positive number, got {per_token_prefill_s}")
    if not (decode_step_s >= 0 and math.isfinite(decode_step_s)):
        raise ValueError(f"decode_step_s must be >= 0, got {decode_step_s}")
    if not (tpot_slo_s > 0 and math.isfinite(tpot_slo_s)):
        raise ValueError(f"tpot_slo_s must be a positive number, got {tpot_slo_s}")
    if not 0 < headroom <= 1:
        raise ValueError(f"headroom must be in (0, 1], got {headroom}")
    if floor_tokens < 1 or ceiling_tokens < floor_tokens:
        raise ValueError(f"need 1 <= floor_tokens <= ceiling_tokens, got {floor_tokens}, {ceiling_tokens}")
    unclamped = 1 + (headroom * tpot_slo_s - decode_step_s) / per_token_prefill_s
    tokens = int(unclamped) // BUDGET_MULTIPLE * BUDGET_MULTIPLE if unclamped >= BUDGET_MULTIPLE else int(unclamped)
    tokens = max(floor_tokens, min(ceiling_tokens, tokens))
    return StepBudget(tokens, per_token_prefill_s, decode_step_s, tpot_slo_s, unclamped)


def budget_from_profile(
    prefill_tok_per_s: float,
    decode_step_ms: float,
    num_prompt_tokens: int,
    tpot_slo_s: float,
    *,
    headroom: float = DEFAULT_HEADROOM,
    floor_tokens: int = DEFAULT_FLOOR_TOKENS,
    ceiling_tokens: int = DEFAULT_CEILING_TOKENS,
) -> StepBudget:
    """``sarathi_step_budget`` from a start-up profile (``NodeCore.profile``'s prefill tok/s and decode step ms of a
    ``num_prompt_tokens`` prompt)."""
    per_token = per_token_prefill_s_from_profile(prefill_tok_per_s, decode_step_ms, num_prompt_tokens)
    return sarathi_step_budget(
        per_token,
        decode_step_ms / 1e3,
        tpot_slo_s,
        headroom=headroom,
        floor_tokens=floor_tokens,
        ceiling_tokens=ceiling_tokens,
    )
