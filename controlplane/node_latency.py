"""Latency as the control plane sees it: per-node TTFT/TPOT records and the samples it hands to exporters.

    TokenChunk relayed ─► Inflight (first / last token ns) ─► finished ─► NodeLatency.record_served
    routing, NodeTelemetry, every chunk ─► LatencySample(kind, node, seconds) ─► ControlPlane.take_events

TTFT here includes routing and both hops; all times are time.monotonic_ns on the control plane's host.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field


@dataclass(slots=True)
class NodeLatency:
    """One node's served requests as the control plane saw them (TTFT includes routing and both hops)."""

    ttft_s: deque = field(default_factory=lambda: deque(maxlen=10_000))
    tpot_s: deque = field(default_factory=lambda: deque(maxlen=10_000))
    num_served: int = 0
    num_failed: int = 0

    def record_served(self, arrival_ns: int, first_token_ns: int, last_token_ns: int, num_output_tokens: int) -> None:
        """A request finished here (first_token_ns 0: it produced no token)."""
        self.num_served += 1
        if first_token_ns:
            self.ttft_s.append((first_token_ns - arrival_ns) / 1e9)
        if num_output_tokens >= 2:
            self.tpot_s.append((last_token_ns - first_token_ns) / 1e9 / (num_output_tokens - 1))

    def summary(self) -> dict[str, float | int | None]:
        return {
            "ttft_ms_p50": percentile_ms(self.ttft_s, 50),
            "ttft_ms_p99": percentile_ms(self.ttft_s, 99),
            "tpot_ms_p50": percentile_ms(self.tpot_s, 50),
            "tpot_ms_p99": percentile_ms(self.tpot_s, 99),
            "requests_served": self.num_served,
            "requests_failed": self.num_failed,
        }


class LatencyKind:
    """What a LatencySample measured (all on time.monotonic_ns, one clock per host)."""

    ROUTER_QUEUE_WAIT = "router_queue_wait"  # GenerateRequest.routed_ns - arrival_ns
    ROUTER_TO_NODE_HOP = "router_to_node_hop"  # agent recv_ns - GenerateRequest.sent_ns (NodeTelemetry)
    NODE_TO_ROUTER_RETURN = "node_to_router_return"  # control plane recv_ns - TokenChunk.sent_ns, per chunk
    PREDICTED_TTFT = "predicted_ttft"  # the TTFT forecast on the chosen node at placement (slo_forecast.py)


@dataclass(slots=True, frozen=True)
class LatencySample:
    """An event for the exporters (``ControlPlane.take_events``)."""

    kind: str  # a LatencyKind value
    node_id: str
    value_s: float


def percentile_ms(samples, q: float) -> float | None:
    """The q-th percentile (nearest rank) of ``samples`` in seconds, in milliseconds; None when empty."""
    if not samples:
        return None
    ordered = sorted(samples)
    return 1e3 * ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]
