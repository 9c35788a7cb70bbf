"""Stall-free batching: a step's prefill tokens capped so that the requests decoding in it are slowed by at most a
factor k. Sans-IO: the cap comes from ``engine/step_time_fit.py``, the node's own step times.

Under chunked prefill a step carries every running request's decode token plus prompt chunks up to the token budget
(``max_num_batched_tokens``). With a fixed budget, a step that shares its decode rows with a full prompt chunk takes
several times as long as the decode-only step of the same rows, and every decoding request in it waits that long
for its token: TPOT then depends on whether a request's life overlapped other requests' prefills (issue 14: on a
2-core CPU, 32 concurrent requests at a 512-token budget gave TPOT p99 3.1x p50, the short requests that decode
entirely next to 500-token chunks). Sarathi-Serve bounds this by sizing the budget so that a step meets a TPOT SLO
(Agrawal et al., "Taming Throughput-Latency Tradeoff in LLM Inference with Sarathi-Serve", OSDI 2024, sections 4.2
"stall-free batching" and 4.3; microsoft/sarathi-serve, sarathi/core/scheduler/sarathi_scheduler.py: decodes
first, then prefill chunks up to a fixed ``chunk_size``). This module applies the same bound per step, relative to
the step's own decode batch instead of an absolute SLO. The rule, declared before it was measured::

    t(D, P) ~= a + b*D + c*P                 the node's fitted step time (D decode rows, P prefill tokens)
    P <= (k - 1) * (a + b*D) / c             whenever D >= 1, i.e. t(D, P) <= k * t(D, 0)
    budget = min(max_num_batched_tokens, D + max(P_cap, MIN_PREFILL_TOKENS))

k = ``SchedulerConfig.stall_factor``: DEFAULT_STALL_FACTOR = 2 wherever the ``zoo`` CLIs build an engine and in
``zoo bench engine``'s engine (a decoding request's token takes at most twice its decode-only time; ``--stall-factor
0``: off). Measured on the shared 2-core CPU (bench/results/2026-12-01-engine-tpot.json, quiet pairs vs main): TPOT
p99/p50 1.3-1.7 (main 2.7-3.0), 32 concurrent 2.4-3.4x HF static-16 (main 2.8-3.0x); in one process, alternating, k
= 2 gave ~0.8x the output tok/s of the plain budget and ~2x its TTFT p99 — more than this linear model predicts
(7%): decode rows seem to cost more in a mixed step than in a pure decode step on the torch CPU runner. With k = 2
the cap is at least a/c, so a capped chunk still spends at least half its step on prefill work: the fixed cost per
step never dominates. Steps without decode rows, and an engine whose fit is not calibrated yet
(``StepTimeFit.calibrated``), keep the plain budget. Applies only with chunked prefill (without it a capped budget
could hold a long prompt back for as long as anyone decodes).

Differences from Sarathi-Serve (deliberate): no TPOT SLO is needed (the bound is relative, so TPOT stays even on a
node of any speed), and the cap follows the decode batch step by step: a near-idle node's few decodes keep a small
budget, a full one lends its prefills a larger one.
"""

from __future__ import annotations

from collections.abc import Iterable

from engine.request import Request
from engine.step_time_fit import StepTimeFit

DEFAULT_STALL_FACTOR = 2.0
MIN_PREFILL_TOKENS = 16  # a step with decode rows still moves prompts by at least a block


class StallFreeBudget:
    """A step's token budget under the rule of the module docstring; owns the node's ``StepTimeFit``."""

    def __init__(self, stall_factor: float, fit: StepTimeFit | None = None) -> None:
        if not stall_factor > 1:
            raise ValueError(f"stall_factor must be > 1, got {stall_factor}")
        self.stall_factor = stall_factor
        self.fit = StepTimeFit() if fit is None else fit

    def prefill_cap(self, num_decode_rows: int) -> int | None:
        """The most prefill tokens a step with ``num_decode_rows`` decode rows may carry; None: no cap (no decode
        rows, or the fit is not calibrated)."""
        fit = self.fit
        if num_decode_rows < 1 or not fit.calibrated:
            return None
        decode_only_s = fit.predict(num_decode_rows, 0)
        if decode_only_s <= 0:
            return None
        cap = (self.stall_factor - 1.0) * decode_only_s / fit.coefficients[2]
        return max(MIN_PREFILL_TOKENS, int(cap))

    def step_budget(self, running: Iterable[Request], budget: int) -> int:
        """``budget`` (the configured token budget) lowered so that the step's prefill stays within the cap, given
        the running requests about to be scheduled (those with one token left that have sampled are decode rows)."""
        num_decode_rows = sum(1 for r in running if r.num_output_tokens and r.num_tokens - r.num_computed_tokens == 1)
        cap = self.prefill_cap(num_decode_rows)
        return budget if cap is None else min(budget, num_decode_rows + cap)
