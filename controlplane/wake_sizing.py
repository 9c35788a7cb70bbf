"""How many nodes a pool scaled to zero asks for when it is asked for again: the capacity plan's wake (controlplane/
capacity_plan.py). Sans-IO.

A pool at zero nodes has no load to size it by, so the plan alone would ask for one node, and for the rest only once
that node's load shows: a node's start later. What sizes it instead is what the pool held for its arrivals while it
had nodes:

    learnt   while the pool's load sized it (the plan wanted exactly the nodes it held: not short of them on a ramp,
             not holding spare ones through its scale-down window), time-weighted over the last ``memory_s``:
                 held per arrival a second  h = Σ C · dt / Σ r · dt
             C: the pool's capacity (Σ power score), r: its arrival rate over the forecast's window
    wake     at zero nodes, the capacity asked for is  r_now · h,  r_now: its arrivals (refused, for want of a node)
             over the last WAKE_RATE_SPAN_S

The rate weighting makes the busy spells count most: an hour of one idle node at a trickle of requests weighs little
against minutes of a pool sized by a burst. h is capacity held, with the plan's headroom (target_utilisation) in it,
so the wake is not divided by it again; nor is it scaled by the forecast's growth (a rate read over the last seconds
is the level now, and a step from nothing reads as a steep ramp). With nothing learnt (a pool never sized by its
load since the control plane started), the wake is one node, as before.
"""

from __future__ import annotations

import math

WAKE_RATE_SPAN_S = 10.0  # a pool at zero nodes is sized by its arrivals (refused) over the last this many seconds
MAX_SAMPLE_S = 10.0  # a gap between plans (a stalled loop, a paused simulator) weighs at most this much


class WakeSizing:
    """One pool's capacity held per arrival a second: ``observe`` at each plan with nodes, ``capacity(recent_rate)``
    at zero nodes. ``memory_s``: how fast what was learnt fades (an hour)."""

    def __init__(self, memory_s: float = 3600.0) -> None:
        if not 0 < memory_s < math.inf:
            raise ValueError(f"wake sizing: memory_s must be > 0 and finite, got {memory_s!r}")
        self.memory_s = memory_s
        self._capacity_s = 0.0  # Σ C · dt, decayed
        self._arrivals = 0.0  # Σ r · dt, decayed
        self._last_s: float | None = None

    def observe(self, now_s: float, capacity: float, rate: float, sized_by_load: bool) -> None:
        """``capacity``: the pool's now; ``rate``: its arrivals a second; ``sized_by_load``: the plan wanted exactly
        the nodes it holds."""
        gap = 0.0 if self._last_s is None else now_s - self._last_s
        dt = min(gap, MAX_SAMPLE_S) if gap > 0 else 0.0  # time going back, or NaN: no weight
        self._last_s = now_s if math.isfinite(now_s) else self._last_s
        decay = math.exp(-dt / self.memory_s)
        self._capacity_s *= decay
        self._arrivals *= decay
        if sized_by_load and capacity > 0 and rate > 0 and math.isfinite(capacity) and math.isfinite(rate):
            self._capacity_s += capacity * dt
            self._arrivals += rate * dt

    @property
    def held_per_rate(self) -> float:
        """Capacity held per arrival a second; 0 with nothing learnt."""
        return self._capacity_s / self._arrivals if self._arrivals > 0 else 0.0

    def capacity(self, recent_rate: float) -> float:
        """The capacity a pool at zero nodes asks for at ``recent_rate`` arrivals a second (0: nothing learnt)."""
        wanted = recent_rate * self.held_per_rate
        return wanted if math.isfinite(wanted) and wanted > 0 else 0.0
