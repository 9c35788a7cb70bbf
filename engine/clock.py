"""Injected clocks: the engine core never reads time itself, so a simulator can drive it."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Seconds on a monotonic timeline."""
        ...


class MonotonicClock:
    """Real time (``time.monotonic``)."""

    def now(self) -> float:
        return time.monotonic()


class ManualClock:
    """Virtual time, advanced explicitly (tests, the discrete-event simulator)."""

    def __init__(self, start_s: float = 0.0) -> None:
        self._now_s = start_s

    def now(self) -> float:
        return self._now_s

    def advance(self, dt_s: float) -> None:
        if dt_s < 0:
            raise ValueError(f"dt_s must be >= 0, got {dt_s}")
        self._now_s += dt_s
