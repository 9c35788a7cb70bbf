"""A node's measured speed, from the steps it ran: what its load reports tell the router.

Sans-IO. The node core (agent/node_core.py) feeds it from ``LLMEngine.take_step_records()``, on an agent
and in the fleet simulator alike — so both report exactly the same figures.
"""

from __future__ import annotations

from collections import deque

from engine.batch import SchedulerOutput


def classify_batch(batch: SchedulerOutput) -> tuple[int, int]:
    """(num_prefill_tokens, num_decode_requests) of a step. A decode row computes one token after at
    least one output token; every other row (a prompt chunk, a recompute after preemption) is prefill."""
    num_prefill = num_decode = 0
    for r in batch.requests:
        if r.num_output_tokens > 0 and len(r.token_ids) == 1:
            num_decode += 1
        else:
            num_prefill += len(r.token_ids)
    return num_prefill, num_decode


class StepRates:
    """Prefill tok/s over steps that carried prefill, and the mean time of pure decode steps, measured over
    each report window; a figure keeps its last value through windows without such steps (0 = never
    measured). Besides, ``token_step_ms``: the window's mean time of the steps that carried decode rows, mixed
    ones included (the time per token its decoding requests got), 0 for a window without any."""

    def __init__(self, max_recent_steps: int = 64) -> None:
        self.prefill_tok_per_s = 0.0
        self.decode_step_ms = 0.0
        self.token_step_ms = 0.0
        self._token_steps = 0
        self._token_time_s = 0.0
        self._prefill_tokens = 0
        self._prefill_time_s = 0.0
        self._decode_steps = 0
        self._decode_time_s = 0.0
        self._recent_step_ms: deque[float] = deque(maxlen=max_recent_steps)

    def observe(self, step_time_s: float, num_prefill_tokens: int, num_decode_requests: int) -> None:
        if num_prefill_tokens:
            self._prefill_tokens += num_prefill_tokens
            self._prefill_time_s += step_time_s
        elif num_decode_requests:
            self._decode_steps += 1
            self._decode_time_s += step_time_s
        if num_decode_requests:
            self._token_steps += 1
            self._token_time_s += step_time_s
        self._recent_step_ms.append(1e3 * step_time_s)

    def close_window(self) -> list[float]:
        """Update the rates from the window's steps, start a new window; the window's latest step times (ms)."""
        if self._prefill_time_s > 0:
            self.prefill_tok_per_s = self._prefill_tokens / self._prefill_time_s
        if self._decode_steps:
            self.decode_step_ms = 1e3 * self._decode_time_s / self._decode_steps
        self.token_step_ms = 1e3 * self._token_time_s / self._token_steps if self._token_steps else 0.0
        self._prefill_tokens = self._decode_steps = self._token_steps = 0
        self._prefill_time_s = self._decode_time_s = self._token_time_s = 0.0
        recent = list(self._recent_step_ms)
        self._recent_step_ms.clear()
        return recent
