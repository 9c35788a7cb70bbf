"""What the control plane has seen of each node, for the latency table, the dashboard and the exporters.

    NodeHello ─► hellos            routed ─► decisions + ROUTER_QUEUE_WAIT (+ PREDICTED_TTFT) samples
                                   refused for want of capacity ─► the pool's unserved arrivals
    LoadReport ─► preemptions      NodeTelemetry ─► metrics_urls + ROUTER_TO_NODE_HOP samples
    TokenChunk ─► NODE_TO_ROUTER_RETURN sample
                                   ─► nodes(views, latency): one plain dict per node   (ControlPlane.stats)
                                   ─► take_events(): LatencySamples since the last call (observe/)

Records outlive the node (a node that left still has its row, ``alive`` False). Sans-IO.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping

from controlplane.node_latency import LatencyKind, LatencySample, NodeLatency
from controlplane.router.policy import NodeView
from transport.messages import LoadReport, NodeHello, NodeTelemetry


class FleetLedger:
    """max_pending_events: latency samples kept for ``take_events`` (the oldest are dropped when nobody takes them).

    hellos: every node ever seen (live ones are in the registry).
    decisions: node id → requests the policy routed there.
    preemptions: node id → num_preemptions_total of its last LoadReport.
    metrics_urls: node id → its agent's /metrics (from NodeTelemetry).
    """

    def __init__(self, max_pending_events: int) -> None:
        self.hellos: dict[str, NodeHello] = {}
        self.decisions: dict[str, int] = {}
        self._pool_decisions: dict[tuple[str, str], int] = {}  # (model, cell) → requests placed there
        self.unserved: dict[tuple[str, str | None], int] = {}  # (model, cell) → refused for want of its capacity
        self.preemptions: dict[str, int] = {}
        self.metrics_urls: dict[str, str] = {}
        self.roofline: dict[str, float] = {}  # node id → decode_roofline_fraction of its last LoadReport
        self.profiling: dict[str, str] = {}  # node id → its profiler's state in its last LoadReport ("" off)
        self._events: deque[LatencySample] = deque(maxlen=max_pending_events)

    def on_hello(self, hello: NodeHello) -> None:
        self.hellos[hello.node_id] = hello

    def on_routed(self, node_id: str, queue_wait_s: float, arrival: bool = True) -> None:
        self.count_decision(node_id, arrival)
        self._events.append(LatencySample(LatencyKind.ROUTER_QUEUE_WAIT, node_id, queue_wait_s))

    def count_decision(self, node_id: str, arrival: bool = True) -> None:
        """A request placed on ``node_id`` (routed, or resumed there): counted for the node and, an ``arrival`` (not a
        held request, counted at its first refusal: controlplane/cold_start.py), for its pool, the (model, cell) its
        hello names now (a node unknown here counts for none)."""
        self.decisions[node_id] = self.decisions.get(node_id, 0) + 1
        hello = self.hellos.get(node_id) if arrival else None
        if hello is not None:
            key = (hello.model, hello.cell)
            self._pool_decisions[key] = self._pool_decisions.get(key, 0) + 1

    def count_unserved(self, model: str, cell: str | None) -> None:
        """A new request the pool (``model``, ``cell``; None: the model's, in any cell) refused for want of capacity:
        no live node of it, or every one's queue full (controlplane/request_intake.py). Bounded: a pool is a model
        some node served (the intake refuses an unknown one first) in a cell the router's config names, or None."""
        key = (model, cell)
        self.unserved[key] = self.unserved.get(key, 0) + 1

    def arrivals_by_pool(self) -> dict[tuple[str, str | None], int]:
        """Requests that asked each (model, cell) so far, placed there or refused for want of its capacity:
        counters that only grow, whatever nodes join, leave or come back serving another model (the capacity plan's
        arrivals: controlplane/demand_trend.py). A pool that refuses under a ramp still reads the ramp. A cell of
        None: refused requests that named no cell (the plan counts them for a pool of their model)."""
        arrivals = dict(self._pool_decisions)
        for key, n in self.unserved.items():
            arrivals[key] = arrivals.get(key, 0) + n
        return arrivals

    def on_forecast(self, node_id: str, predicted_ttft_s: float) -> None:
        self._events.append(LatencySample(LatencyKind.PREDICTED_TTFT, node_id, predicted_ttft_s))

    def on_load_report(self, msg: LoadReport) -> None:
        self.preemptions[msg.node_id] = msg.num_preemptions_total
        self.roofline[msg.node_id] = msg.decode_roofline_fraction
        self.profiling[msg.node_id] = msg.profiling

    def on_telemetry(self, msg: NodeTelemetry) -> None:
        self.metrics_urls[msg.node_id] = msg.metrics_url
        kind = LatencyKind.ROUTER_TO_NODE_HOP
        self._events.extend(LatencySample(kind, msg.node_id, hop_ns / 1e9) for hop_ns in msg.router_to_node_hop_ns)

    def on_chunk_return(self, node_id: str, hop_s: float) -> None:
        self._events.append(LatencySample(LatencyKind.NODE_TO_ROUTER_RETURN, node_id, hop_s))

    def take_events(self) -> list[LatencySample]:
        """Latency samples since the last call (at most ``max_pending_events``, oldest dropped)."""
        events = list(self._events)
        self._events.clear()
        return events

    def nodes(self, views: Iterable[NodeView], latency: Mapping[str, NodeLatency]) -> dict[str, dict]:
        """Node id → its row, for every live node (``views``) and every node with latency records."""
        views = {v.node_id: v for v in views}
        nodes = {}
        for node_id in sorted(set(latency) | set(views)):
            hello = self.hellos.get(node_id)
            view = views.get(node_id)
            nodes[node_id] = {
                "alive": view is not None,
                "gpu_type": hello.hardware.gpu_type if hello else None,
                "cell": hello.cell if hello else None,
                "model": hello.model if hello else None,
                "power_score": hello.power_score if hello else None,
                "num_running": view.num_running if view else 0,
                "num_waiting": view.num_waiting if view else 0,
                "num_swapped": view.num_swapped if view else 0,
                "kv_usage": view.kv_usage if view else 0.0,
                "num_inflight": view.num_inflight if view else 0,
                "num_preemptions_total": self.preemptions.get(node_id, 0),
                "requests_routed": self.decisions.get(node_id, 0),
                "metrics_url": self.metrics_urls.get(node_id, ""),
                "kernels": hello.kernels if hello else "",
                "config_digest": hello.config_digest if hello else "",
                "backend": hello.backend if hello else "",
                "decode_roofline_fraction": self.roofline.get(node_id, 0.0),
                "profiling": self.profiling.get(node_id, ""),
                "role": hello.role if hello else "both",
                "host": hello.host if hello else "",
                "rack": hello.rack if hello else "",
                **latency.get(node_id, NodeLatency()).summary(),
            }
        return nodes
