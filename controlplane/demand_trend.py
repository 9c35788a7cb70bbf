"""How fast a pool's arrivals grow: the capacity plan's forecast (controlplane/capacity_plan.py). Sans-IO.

A node asked for joins minutes later (a pod scheduled, weights loaded), so a plan that sizes the pool by its load
now is late by that much on every ramp: the load queues on the nodes there while the new ones start. The plan
scales its wanted capacity by how much more the pool will be asked for by the time a node asked for now can serve:

    samples  the requests that asked the pool so far (a counter: placed, or refused for want of its capacity), at
             most one per second, over the last ``window_s``
    r1, r2   its arrival rate in the first and in the second half of the samples' span
    slope    (r2 - r1) / (span/2): a line through the two rates, each at the middle of its half
    growth   1                                              while r2 - r1 is within Poisson noise
             r(now + lead_s) / r(now)                       otherwise, on that line: r(t) = r2 + slope · (t - t2),
                                                            t2 = now - span/4 (r2's middle)

Only growth counts (at least 1): a falling rate sheds nodes through the plan's own scale-down window. Noise: two
halves of a steady Poisson stream differ by about sqrt(c1 + c2) requests, so a difference within twice that counts
as none. The load the plan measures is the load of now, hence r(now) below the line. The growth is bounded: r1 >= 0
makes it at most 1 + (4/3) · lead_s / span, and no growth is read before span reaches window_s / 2, so at most
1 + (8/3) · lead_s / window_s. A counter that goes back (the control plane restarted) starts the samples again. On an
exact linear ramp the growth is exactly the rate lead_s ahead over the rate now.
"""

from __future__ import annotations

import math
from collections import deque


class DemandTrend:
    """``window_s``: the arrivals the trend is taken over; ``lead_s``: how far ahead it is projected (how long a node
    takes to join and serve); 0: no forecast (growth is always 1)."""

    def __init__(self, window_s: float, lead_s: float) -> None:
        if not 0 < window_s < math.inf or not 0 <= lead_s < math.inf:
            raise ValueError(f"demand trend: window_s must be > 0 and lead_s >= 0, got {window_s!r}, {lead_s!r}")
        self.window_s, self.lead_s = window_s, lead_s
        self._samples: deque[tuple[float, int]] = deque()

    def observe(self, now_s: float, arrivals_total: int) -> None:
        samples = self._samples
        if samples and arrivals_total < samples[-1][1]:
            samples.clear()
        if samples and now_s - samples[-1][0] < 1.0:  # one sample per second: bounded whatever the call rate
            samples[-1] = (samples[-1][0], arrivals_total)
        else:
            samples.append((now_s, arrivals_total))
        while samples[0][0] < now_s - self.window_s:
            samples.popleft()

    def rate(self, span_s: float = math.inf) -> float:
        """Arrivals a second over the last ``span_s`` of the samples (all of them by default); 0 before two."""
        samples = self._samples
        if len(samples) < 2:
            return 0.0
        t1, n1 = samples[-1]
        t0, n0 = next(((t, n) for t, n in reversed(samples) if t <= t1 - span_s), samples[0])
        return (n1 - n0) / (t1 - t0) if t1 > t0 else 0.0

    def growth(self) -> float:
        """The forecast rate ``lead_s`` ahead over the recent rate: at least 1; 1 until half a window is sampled."""
        samples = self._samples
        if self.lead_s == 0 or len(samples) < 3:
            return 1.0
        (t0, n0), (t1, n1) = samples[0], samples[-1]
        span = t1 - t0
        if span < self.window_s / 2:
            return 1.0
        half = span / 2
        n_mid = _count_at(samples, t0 + half)
        c1, c2 = n_mid - n0, n1 - n_mid
        if c2 <= 0 or c2 - c1 <= 2 * math.sqrt(c1 + c2):
            return 1.0
        r1, r2 = c1 / half, c2 / half
        slope = (r2 - r1) / half
        now_rate = r2 + slope * span / 4
        return (now_rate + slope * self.lead_s) / now_rate


def _count_at(samples: deque[tuple[float, int]], t: float) -> float:
    """The counter at time ``t``, linear between the samples around it."""
    prev_t, prev_n = samples[0]
    for s_t, s_n in samples:
        if s_t >= t:
            return prev_n + (s_n - prev_n) * ((t - prev_t) / (s_t - prev_t) if s_t > prev_t else 1.0)
        prev_t, prev_n = s_t, s_n
    return float(prev_n)
