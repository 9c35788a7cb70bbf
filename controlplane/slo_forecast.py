"""SLO forecast: at every placement, the TTFT the hardware-aware latency model predicts on the chosen node, and
whether that meets the request's TTFT target — whatever policy chose the node.

    placed (route, chosen node's view) ─► predict_ttft_s ─► in time | late, per traffic class
                                                        ─► recent window: the share forecast late

An overload shows here before it shows in the TTFT histograms: a request forecast late on the node it was given
is, under hardware_aware, one no node could serve in time (at its defaults it sent none to a late node while
another was in time on conv or code 80%: scripts/miss_diag.py), and under any other policy it may also be one
sent to a late node while another was in time. The forecast counts nothing cached (the control plane does not know
what a node's prefix cache holds), so on prefix-heavy traffic it reads high. The model and its inputs are
hardware_aware's (controlplane/router/policies/node_predictions.py: the node's measured prefill rate, or the
estimate from its hardware before it has measured, and the prefill queued or in flight to it). Sans-IO.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable

from controlplane.router.late_prompts import LatePrompts
from controlplane.router.overload import OverloadDetector
from controlplane.router.policies.node_predictions import predict_ttft_s
from controlplane.router.policies.tpot_lost import Redirects
from controlplane.router.policy import NodeView, RouteRequest
from controlplane.router.router_config import RouterConfig

IN_TIME, LATE = "in_time", "late"


class SloForecast:
    """``window``: the recent decisions the late share is taken over (at least 1). ``overload``: the routing
    policy's overload detector, when it has one on (hardware_aware's overload mode), reported beside as it stands
    at ``now()`` (the policy's clock, the registry's); ``late_prompts``: its long-prompt gate, when on
    (RouterConfig.slo_sacrifice_long_vs_late), whose median late prompt is reported with it; ``tpot_lost``: its
    TPOT lost-cause rule, when on (RouterConfig.slo_tpot_lost_to_doomed), whose count of moved requests is too."""

    def __init__(
        self,
        config: RouterConfig,
        window: int = 1000,
        overload: OverloadDetector | None = None,
        now: Callable[[], float] | None = None,
        late_prompts: LatePrompts | None = None,
        tpot_lost: Redirects | None = None,
    ) -> None:
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        self.config = config
        self.overload = overload
        self.late_prompts = late_prompts
        self.tpot_lost = tpot_lost
        self._now = now
        self.counts: dict[tuple[str, str], int] = {}  # (traffic class, IN_TIME | LATE) → decisions
        self.targets: dict[str, tuple[float, float]] = {}  # traffic class → (TTFT, TPOT) targets at its last placement
        self._recent: deque[bool] = deque(maxlen=window)  # True: forecast late
        self._recent_late = 0

    def use(self, config: RouterConfig, policy) -> None:
        """Forecast against ``config``'s SLO and report ``policy``'s parts (hardware_aware's overload mode,
        long-prompt gate and TPOT lost-cause rule, each where it has one on) from now on: at start, and at a router
        reload (controlplane/router_reload.py); the counts and the recent window go on."""
        self.config = config
        self.overload = getattr(policy, "overload", None)
        self.late_prompts = getattr(policy, "late_prompts", None)
        self.tpot_lost = getattr(policy, "tpot_lost", None)

    def on_placed(self, route: RouteRequest, view: NodeView) -> float:
        """Count the placement of ``route`` on the node of ``view`` (its view before this request); the TTFT
        forecast there, in seconds."""
        ttft_s = predict_ttft_s(view, route.num_prompt_tokens, self.config)
        late = ttft_s > self.target_s(route)
        key = (route.traffic_class, LATE if late else IN_TIME)
        self.targets[route.traffic_class] = (self.target_s(route), self.tpot_target_s(route))
        self.counts[key] = self.counts.get(key, 0) + 1
        if len(self._recent) == self._recent.maxlen:
            self._recent_late -= self._recent[0]
        self._recent.append(late)
        self._recent_late += late
        return ttft_s

    def target_s(self, route: RouteRequest) -> float:
        """The TTFT target ``route`` is forecast against: its class's, else the router's."""
        return route.slo_ttft_s if route.slo_ttft_s is not None else self.config.slo_ttft_s

    def tpot_target_s(self, route: RouteRequest) -> float:
        """The TPOT target of ``route``: its class's, else the router's."""
        return route.slo_tpot_s if route.slo_tpot_s is not None else self.config.slo_tpot_s

    def recent_late_share(self) -> float:
        """The share of the last ``window`` placements forecast late (0 before any)."""
        return self._recent_late / len(self._recent) if self._recent else 0.0

    def summary(self) -> dict:
        """For ControlPlane.stats: the counts as "class:in_time" / "class:late" → n, the recent late share, and each
        class's TTFT and TPOT targets as its last placement had them (its own, else the router's)."""
        return {
            "decisions": {f"{cls}:{outcome}": n for (cls, outcome), n in sorted(self.counts.items())},
            "recent_late_share": self.recent_late_share(),
            "targets": {cls: {"ttft": ttft, "tpot": tpot} for cls, (ttft, tpot) in sorted(self.targets.items())},
            "recent_decisions": len(self._recent),
            "overload": None
            if self.overload is None
            else {
                "on": self.overload.on if self._now is None else self.overload.still_on(self._now()),
                "activations": self.overload.activations,
            },
            "long_prompt_gate": None if self.late_prompts is None else {"median_late_tokens": self._late_median()},
            "tpot_lost": None if self.tpot_lost is None else {"redirects": self.tpot_lost.moved},
        }

    def _late_median(self) -> float | None:
        """The gate's median late prompt now (None: too few late placements in its window, no prompt is long)."""
        median = self.late_prompts.median(None if self._now is None else self._now())
        return None if median == math.inf else median
