"""The prompt sizes of the recent placements predicted late, and their median (sans-IO).

hardware_aware's long-prompt sacrifice (RouterConfig.slo_sacrifice_long_share) treats a prompt whose prefill on the
fastest node takes more than a share of its TTFT target as a lost cause: shortest jobs first, because goodput counts
requests. That pays when the fast nodes' time it frees goes to shorter requests that would otherwise be late (code:
long prompts among mostly short ones). Where the requests that are late are themselves the long ones (the Mooncake
trace at 80% load, its prompts of 12-24k tokens), sacrificing one frees time for another alike, and the trade loses:
on the tuning split 58 such prompts that an H100 served in time went to A100s and missed, for 20 that gained
(bench/results/2026-12-04-sim-sacrifice-transitions.json). With RouterConfig.slo_sacrifice_long_vs_late a prompt is
long only when it is also longer than the median prompt of the placements predicted late in the last window: the
sacrifice is made for shorter late requests, not for its peers. Fewer late placements than ``min_placements`` in
the window: nothing is late enough to sacrifice for (the median is infinite).

A placement is late as overload mode counts it (router/overload.py): its predicted TTFT on the node it went to,
nothing cached, above its TTFT target; the window is overload mode's, in the router's clock.

Cost: O(log n) to find, O(n) memmove in C to insert or expire one placement (n: late placements in the window,
hundreds at most); the median is read in O(1).
"""

from __future__ import annotations

import bisect
import math
from collections import deque


class LatePrompts:
    """``record(now_s, num_tokens)`` for each placement predicted late (times never decreasing); ``median(now_s)``:
    the lower median of the prompt sizes recorded in the last ``window_s`` seconds, or inf with fewer than
    ``min_placements`` of them."""

    def __init__(self, window_s: float, min_placements: int) -> None:
        if not 0 < window_s < math.inf:  # NaN refused too
            raise ValueError(f"window_s must be a finite number > 0, got {window_s}")
        if min_placements < 1:
            raise ValueError(f"min_placements must be >= 1, got {min_placements}")
        self.window_s = window_s
        self.min_placements = min_placements
        self._events: deque[tuple[float, int]] = deque()  # (time, prompt tokens), oldest first
        self._sizes: list[int] = []  # the same prompt sizes, sorted

    def __len__(self) -> int:
        return len(self._events)

    def record(self, now_s: float, num_tokens: int) -> None:
        self._expire(now_s)
        self._events.append((now_s, num_tokens))
        bisect.insort(self._sizes, num_tokens)

    def median(self, now_s: float | None = None) -> float:
        """At ``now_s`` (None: of the placements held, for a reader without a clock)."""
        if now_s is not None:
            self._expire(now_s)
        sizes = self._sizes
        if len(sizes) < self.min_placements:
            return math.inf
        return float(sizes[(len(sizes) - 1) // 2])

    def longer(self, num_tokens: int, now_s: float) -> bool:
        """Whether a prompt of ``num_tokens`` is longer than the median late prompt now."""
        return num_tokens > self.median(now_s)

    def _expire(self, now_s: float) -> None:
        events, sizes = self._events, self._sizes
        oldest_s = now_s - self.window_s
        while events and events[0][0] < oldest_s:
            _, num_tokens = events.popleft()
            del sizes[bisect.bisect_left(sizes, num_tokens)]
