"""A node's step-time model fitted online to the steps it ran. Sans-IO: arithmetic on the step times the runner
measured (``RunnerOutput.step_time_s``), fed one step at a time by ``LLMEngine``.

The model is linear in what a step carries::

    t(D, P) ~= a + b * D + c * P        D decode rows, P prefill tokens (prompt chunks, recomputes)

a: the fixed cost of a step (reading the weights, launches); b: one more decode row (its KV read, its share of the
matmuls); c: one more prefill token. It is fitted by least squares with exponential forgetting (half-life
``half_life_steps`` steps: the model follows a node whose speed drifts) on three running sums, so one observation
costs a few dozen flops. A small ridge term on b and c picks the smallest slopes the data allow where it does not
pin them down (e.g. a start-up profile of one prefill and batch-1 decodes says nothing about b): b then reads 0,
i.e. the model under-estimates decode-only steps — the safe side for ``engine/stall_free.py``.
"""

from __future__ import annotations

import math

DEFAULT_HALF_LIFE_STEPS = 512
RIDGE = 1e-6  # pseudo-observations pulling b and c to 0; negligible next to real data (D, P >= 1)
MIN_STEPS = 2  # steps with prefill and steps with decode rows each, before the fit is trusted


class StepTimeFit:
    """``t(D, P) = a + b*D + c*P`` fitted to observed steps (module docstring)."""

    def __init__(self, half_life_steps: float = DEFAULT_HALF_LIFE_STEPS) -> None:
        if not half_life_steps > 0:
            raise ValueError(f"half_life_steps must be > 0, got {half_life_steps}")
        self._decay = 0.5 ** (1.0 / half_life_steps)
        self._xx = [[0.0] * 3 for _ in range(3)]  # sum of w * x x^T, x = (1, D, P)
        self._xy = [0.0] * 3  # sum of w * x * t
        self.num_prefill_steps = 0
        self.num_decode_steps = 0
        self.coefficients: tuple[float, float, float] | None = None  # (a, b, c) of the last solvable fit

    def observe(self, num_prefill_tokens: int, num_decode_rows: int, step_time_s: float) -> None:
        """One executed step. Steps with nothing in them, and unusable times (not finite, <= 0), are ignored."""
        if num_prefill_tokens < 0 or num_decode_rows < 0:
            raise ValueError(f"negative step shape ({num_prefill_tokens}, {num_decode_rows})")
        if num_prefill_tokens + num_decode_rows == 0 or not (step_time_s > 0 and math.isfinite(step_time_s)):
            return
        x = (1.0, float(num_decode_rows), float(num_prefill_tokens))
        decay, xx, xy = self._decay, self._xx, self._xy
        for i in range(3):
            row = xx[i]
            for j in range(3):
                row[j] = decay * row[j] + x[i] * x[j]
            xy[i] = decay * xy[i] + x[i] * step_time_s
        self.num_prefill_steps += num_prefill_tokens > 0
        self.num_decode_steps += num_decode_rows > 0
        solved = _solve3([[xx[i][j] + (RIDGE if i == j and i else 0.0) for j in range(3)] for i in range(3)], xy)
        if solved is not None:
            self.coefficients = solved

    @property
    def calibrated(self) -> bool:
        """Enough steps of both kinds seen, and a fit whose prefill slope is positive."""
        return (
            self.num_prefill_steps >= MIN_STEPS
            and self.num_decode_steps >= MIN_STEPS
            and self.coefficients is not None
            and self.coefficients[2] > 0
        )

    def predict(self, num_decode_rows: int, num_prefill_tokens: int) -> float:
        """The predicted step time, s (ValueError before any solvable fit)."""
        if self.coefficients is None:
            raise ValueError("no step-time fit yet (observe steps first)")
        a, b, c = self.coefficients
        return a + b * num_decode_rows + c * num_prefill_tokens


def _solve3(m: list[list[float]], v: list[float]) -> tuple[float, float, float] | None:
    """``m x = v`` for a 3x3 ``m`` by Cramer's rule; None when ``m`` is (numerically) singular."""

    def det(a: list[list[float]]) -> float:
        return (
            a[0][0] * (a[1][1] * a[2][2] - a[1][2] * a[2][1])
            - a[0][1] * (a[1][0] * a[2][2] - a[1][2] * a[2][0])
            + a[0][2] * (a[1][0] * a[2][1] - a[1][1] * a[2][0])
        )

    d = det(m)
    scale = m[0][0] * m[1][1] * m[2][2]
    if not math.isfinite(d) or scale <= 0 or abs(d) <= 1e-12 * scale:
        return None
    out = []
    for k in range(3):
        mk = [[v[i] if j == k else m[i][j] for j in range(3)] for i in range(3)]
        out.append(det(mk) / d)
    return out[0], out[1], out[2]
