"""A token bucket on an injected clock (sans-IO): ``capacity`` units at most, refilled at ``rate_per_s``.

    level ──► take(n, now): n available? take them, 0.0 : how long until they are (take nothing)
          ──► charge(n, now): take n now even below zero — a debt, for costs known only afterwards
              (a request's output tokens); the bucket then answers "wait" until refilled past the debt

``wait_s`` is exact for a clock that only moves forward: after waiting it, ``take`` succeeds (if nothing
else took in between). A request larger than the whole bucket waits for a full bucket, never forever,
and leaves the rest as a debt.
"""

from __future__ import annotations

import math


class TokenBucket:
    __slots__ = ("capacity", "level", "rate_per_s", "updated_s")

    def __init__(self, capacity: float, rate_per_s: float, now_s: float = 0.0) -> None:
        if not capacity > 0 or not math.isfinite(capacity):
            raise ValueError(f"capacity must be > 0 and finite, got {capacity}")
        if not rate_per_s > 0 or not math.isfinite(rate_per_s):
            raise ValueError(f"rate_per_s must be > 0 and finite, got {rate_per_s}")
        self.capacity = float(capacity)
        self.rate_per_s = float(rate_per_s)
        self.level = float(capacity)  # starts full
        self.updated_s = now_s

    @classmethod
    def per_minute(cls, limit: float, now_s: float = 0.0) -> TokenBucket:
        """``limit`` a minute, with a burst of one minute's worth."""
        return cls(limit, limit / 60.0, now_s)

    def refill(self, now_s: float) -> float:
        """The level at ``now_s`` (an earlier ``now_s`` than the last one refills nothing)."""
        if now_s > self.updated_s:
            self.level = min(self.capacity, self.level + (now_s - self.updated_s) * self.rate_per_s)
            self.updated_s = now_s
        return self.level

    def wait_s(self, amount: float, now_s: float) -> float:
        """Seconds until ``amount`` (at most the capacity) can be taken; 0.0 when it can be now."""
        need = min(amount, self.capacity) - self.refill(now_s)
        return 0.0 if need <= 0 else need / self.rate_per_s

    def take(self, amount: float, now_s: float) -> float:
        """Take ``amount`` if available (0.0), else take nothing and return the wait in seconds."""
        wait = self.wait_s(amount, now_s)
        if wait == 0.0:
            self.level -= amount  # more than the capacity: a full bucket pays part, the rest is a debt
        return wait

    def full_in_s(self, now_s: float) -> float:
        """Seconds until the bucket is full again (0.0 when it is)."""
        return (self.capacity - self.refill(now_s)) / self.rate_per_s

    def charge(self, amount: float, now_s: float) -> None:
        """Take ``amount`` unconditionally (the level may go negative: a debt paid by waiting)."""
        self.refill(now_s)
        self.level -= amount
