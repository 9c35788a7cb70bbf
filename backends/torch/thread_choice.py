"""How many threads a repeated CPU step runs on, chosen by its measured wall time.

A decode step on the CPU is memory-bound and split over threads with a few barriers per layer (the C decode
kernel, cpu_decode.py: ~120 a step). On an idle machine two threads read memory faster than one; on a shared
one a thread that the OS deschedules stalls its peer at the next barrier for a whole time slice, and one
thread is faster. Which holds changes while the server runs, so it is measured rather than configured: each
kind of step (``key``, e.g. its number of rows) keeps an exponential moving average of its wall time per thread
count, runs on the fastest, and retries each other count every ``explore_every`` steps; a retry that comes out
clearly slower (``1 + slack`` times the best) doubles that count's interval (up to ``max_backoff`` times), so a
loaded machine pays for few slow retries, and one that comes out close resets it. The kernel gives the same bits
at any thread count, so the choice never changes a token.
"""

from __future__ import annotations

from dataclasses import dataclass, field


def candidate_threads(max_threads: int) -> list[int]:
    """1, 2, 4, ... up to ``max_threads``, and ``max_threads`` itself."""
    out, n = [], 1
    while n < max_threads:
        out.append(n)
        n *= 2
    out.append(max(1, max_threads))
    return out


@dataclass(slots=True)
class _Stats:
    ewma: dict[int, float] = field(default_factory=dict)  # threads -> seconds a step
    samples: dict[int, int] = field(default_factory=dict)
    steps: int = 0
    interval: dict[int, int] = field(default_factory=dict)  # threads -> steps between retries
    next_try: dict[int, int] = field(default_factory=dict)  # threads -> step of its next retry


class ThreadChooser:
    """``pick(key, max_threads)`` before a step, ``record(key, threads, seconds)`` after it."""

    def __init__(
        self, explore_every: int = 16, warmup: int = 2, alpha: float = 0.25, slack: float = 0.2, max_backoff: int = 32
    ) -> None:
        if explore_every < 2 or warmup < 1 or not 0.0 < alpha <= 1.0 or slack < 0 or max_backoff < 1:
            raise ValueError("explore_every >= 2, warmup >= 1, 0 < alpha <= 1, slack >= 0, max_backoff >= 1 required")
        self.explore_every = explore_every
        self.warmup = warmup
        self.alpha = alpha
        self.slack = slack
        self.max_backoff = max_backoff
        self._stats: dict[object, _Stats] = {}

    def pick(self, key: object, max_threads: int) -> int:
        cands = candidate_threads(max_threads)
        if len(cands) == 1:
            return cands[0]
        st = self._stats.setdefault(key, _Stats())
        st.steps += 1
        for c in cands:  # every candidate measured a few times first
            if st.samples.get(c, 0) < self.warmup:
                return c
        best = min(cands, key=lambda c: st.ewma[c])
        for c in cands:
            if c != best and st.steps >= st.next_try.setdefault(c, st.steps + self.explore_every):
                st.next_try[c] = st.steps + st.interval.get(c, self.explore_every)
                return c
        return best

    def record(self, key: object, threads: int, seconds: float) -> None:
        st = self._stats.setdefault(key, _Stats())
        n = st.samples.get(threads, 0)
        if n >= self.warmup and st.ewma:
            best = min(st.ewma, key=lambda c: st.ewma[c])
            if threads != best:  # a retry: back off from a count that is still clearly slower
                slower = seconds > (1.0 + self.slack) * st.ewma[best]
                interval = st.interval.get(threads, self.explore_every)
                cap = self.explore_every * self.max_backoff
                st.interval[threads] = min(2 * interval, cap) if slower else self.explore_every
                st.next_try[threads] = st.steps + st.interval[threads]
        old = st.ewma.get(threads)
        st.ewma[threads] = seconds if old is None else old + self.alpha * (seconds - old)
        st.samples[threads] = n + 1

    def best(self, key: object) -> int | None:
        """The thread count the key runs on now (None before any step)."""
        st = self._stats.get(key)
        if st is None or not st.ewma:
            return None
        return min(st.ewma, key=lambda c: st.ewma[c])

    def summary(self) -> dict[str, dict[int, float]]:
        """Per key, the moving average of a step's wall time (ms) per thread count."""
        return {str(k): {c: 1e3 * s for c, s in sorted(st.ewma.items())} for k, st in self._stats.items()}
