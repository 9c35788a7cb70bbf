"""Sustained overload: the share of recent placements predicted to miss the TTFT target (sans-IO).

hardware_aware's overload mode (RouterConfig.overload_window_s) asks this detector, at each decision, whether the
fleet has been predicted late for most of the last ``window_s`` seconds, and has been so for ``hold_s`` seconds. A
placement is late when its predicted TTFT on the node it went to (nothing cached counted) is above its TTFT target:
the signal the control plane's SLO forecast shows operators (controlplane/slo_forecast.py), kept here over a time
window in the router's own clock (the registry's: monotonic in the control plane, virtual in the simulator).

Why a time window and not the last N placements: a burst of arrivals fills N placements in a moment and drains in
a few seconds, and it is the duration of an overload, not its height, that tells a burst (whose late requests are
only slightly late, so protecting the in-time queues costs P99 for little) from a sustained overload (where the
fleet cannot serve everyone in time for tens of seconds, and goodput is what is left to save). The window alone
does not measure duration: a burst of a few hundred requests in one instant fills it with late placements (300 at
once on two idle nodes switched the mode on, and its larger triage charge then sent 258 of them to one node). So the
share must also have stayed at or above ``late_share`` at every decision for ``hold_s`` seconds.

Cost: O(1) amortised per placement (a deque of (time, late), a running count).
"""

from __future__ import annotations

from collections import deque


class OverloadDetector:
    """``record(now_s, late)`` once per placement; ``active(now_s)``: at least ``min_placements`` placements in
    the last ``window_s`` seconds and a share of at least ``late_share`` of them late, at every ``active`` call of
    the last ``hold_s`` seconds (0: at this one only)."""

    def __init__(self, window_s: float, late_share: float, min_placements: int, hold_s: float = 0.0) -> None:
        if not window_s > 0:  # NaN refused too
            raise ValueError(f"window_s must be > 0, got {window_s}")
        if not 0 <= hold_s < float("inf"):
            raise ValueError(f"hold_s must be a finite number >= 0, got {hold_s}")
        if not 0 < late_share <= 1:
            raise ValueError(f"late_share must be in (0, 1], got {late_share}")
        if min_placements < 1:
            raise ValueError(f"min_placements must be >= 1, got {min_placements}")
        self.window_s = window_s
        self.late_share = late_share
        self.min_placements = min_placements
        self.hold_s = hold_s
        self._since: float | None = None  # when the share last rose to late_share (None: below it now)
        self._events: deque[tuple[float, bool]] = deque()
        self._late = 0
        self.activations = 0  # times the mode switched on (for reports and tests)
        self.on = False  # the state the last ``active`` found (what the control plane's stats report)
        self.asked = self.asked_on = 0  # ``active`` calls (one per decision in the policy), and those found on

    def record(self, now_s: float, late: bool) -> None:
        self._events.append((now_s, late))
        self._late += late
        self._expire(now_s)

    def active(self, now_s: float) -> bool:
        self._expire(now_s)
        n = len(self._events)
        if n >= self.min_placements and self._late >= self.late_share * n:
            if self._since is None:
                self._since = now_s
            on = now_s - self._since >= self.hold_s
        else:
            self._since = None
            on = False
        self.asked += 1
        self.asked_on += on
        if on and not self.on:
            self.activations += 1
        self.on = on
        return on

    def still_on(self, now_s: float) -> bool:
        """Whether the mode the last decision found on still holds at ``now_s`` (its window still late enough), for
        a reader between decisions: after the traffic stops the last decision's state would otherwise stand. Counts
        nothing and starts no hold."""
        self._expire(now_s)
        n = len(self._events)
        return self.on and n >= self.min_placements and self._late >= self.late_share * n

    def late_share_now(self, now_s: float) -> float:
        """The late share over the window (0.0 when it holds no placement)."""
        self._expire(now_s)
        return self._late / len(self._events) if self._events else 0.0

    def _expire(self, now_s: float) -> None:
        events, horizon = self._events, now_s - self.window_s
        while events and events[0][0] < horizon:
            _, late = events.popleft()
            self._late -= late
