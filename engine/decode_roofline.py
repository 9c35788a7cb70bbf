"""How close decode steps come to the memory-bandwidth roofline (``zoo:decode_roofline_fraction``).

A decode step must read every weight once and the K/V of every context token of every row; at the
device's memory bandwidth that takes at least::

    ideal_s = (weight_bytes + kv_bytes_per_token * sum_r (start_pos_r + 1)) / (bandwidth_gbps * 1e9)

and the fraction of the roofline a node reaches is ``sum(ideal_s) / sum(step_time_s)`` over its
pure-decode steps (a step with any prefill or speculative chunk is compute-shaped and not counted).
1.0 is the bandwidth bound; a small model on a big GPU sits far below it (launch-bound). The seed's
throttling signal: a node well below its roofline is losing time somewhere other than memory.

Sans-IO, framework-free: fed by NodeCore with each step's batch and measured (or simulated) time.
"""

from __future__ import annotations

from engine.batch import SchedulerOutput


class DecodeRoofline:
    """Sums of ideal and measured decode-step time in the current window (``close_window`` starts a new
    one); ``fraction`` is the latest window's ratio, kept across windows without decode steps."""

    def __init__(self, weight_bytes: int, kv_bytes_per_token: float, bandwidth_gbps: float) -> None:
        if weight_bytes <= 0 or kv_bytes_per_token < 0 or bandwidth_gbps <= 0:
            raise ValueError(
                f"need weight_bytes > 0, kv_bytes_per_token >= 0, bandwidth_gbps > 0; got "
                f"{weight_bytes}, {kv_bytes_per_token}, {bandwidth_gbps}"
            )
        self.weight_bytes = weight_bytes
        self.kv_bytes_per_token = kv_bytes_per_token
        self.bytes_per_s = bandwidth_gbps * 1e9
        self.fraction = 0.0  # 0 until a decode step has been seen
        self._ideal_s = 0.0
        self._actual_s = 0.0

    def step_bytes(self, batch: SchedulerOutput) -> float | None:
        """Bytes a step of plain decodes must read; None for a step that is not one."""
        if not batch.requests or not all(r.is_decode for r in batch.requests):
            return None
        num_ctx_tokens = sum(r.start_pos + 1 for r in batch.requests)
        return self.weight_bytes + self.kv_bytes_per_token * num_ctx_tokens

    def observe(self, batch: SchedulerOutput, step_time_s: float) -> None:
        num_bytes = self.step_bytes(batch)
        if num_bytes is None or step_time_s <= 0:
            return
        self._ideal_s += num_bytes / self.bytes_per_s
        self._actual_s += step_time_s
        self.fraction = self._ideal_s / self._actual_s

    def close_window(self) -> float:
        """The fraction so far, and a fresh window for the next report."""
        self._ideal_s = self._actual_s = 0.0
        return self.fraction
