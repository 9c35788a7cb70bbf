"""Envoy's weighted least request, with each node's weight = its GPU's power score: the baseline an operator
would configure in front of a mismatched fleet.

Source: github.com/envoyproxy/envoy v1.35.0, source/extensions/load_balancing_policies/least_request/
least_request_lb.{h,cc} and the LeastRequest proto docs. Envoy's rule:

    all weights equal   P2C: ``choice_count`` (default 2) random hosts, the one with fewer active requests
    weights differ      an earliest-deadline-first schedule over the hosts in which each host's weight is
                        scaled at pick time:  weight = load_balancing_weight / (active_requests + 1) ** bias
                        (``active_request_bias`` default 1.0); a picked host is re-inserted with deadline
                        ``now + 1 / weight``, so a busy host is picked less and less often but never drained

active_requests is the proxy's own count of requests it sent and has not seen finish (fresh, router-side:
our ``num_inflight``). The mismatched fleets here always have unequal weights, so the EDF path is the one
that runs; P2C is kept for a fleet of one GPU type. Deliberate difference: hosts that cannot take the
prompt (context length) are skipped, as Envoy would skip unhealthy ones.
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass

from controlplane.router.policies.node_table import max_prompt_tokens
from controlplane.router.policy import ClusterSnapshot, NodeView, PolicyHooks, RouteRequest


@dataclass(frozen=True, slots=True)
class EnvoyWlrConfig:
    choice_count: int = 2
    active_request_bias: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.choice_count < 1:
            raise ValueError(f"choice_count must be >= 1, got {self.choice_count}")
        if self.active_request_bias < 0:
            raise ValueError(f"active_request_bias must be >= 0, got {self.active_request_bias}")


class EnvoyWlrPolicy(PolicyHooks):
    name = "envoy_wlr"

    def __init__(self, config: EnvoyWlrConfig | None = None) -> None:
        self.config = config or EnvoyWlrConfig()
        self._rng = random.Random(self.config.seed)
        self._edf: list[tuple[float, int, str]] = []  # (deadline, insertion order, node id)
        self._members: frozenset[str] = frozenset()
        self._order = 0

    def weight(self, node: NodeView) -> float:
        """Envoy's dynamic weight: power score / (active requests + 1) ** bias."""
        return max(node.power_score, 1e-9) / (node.num_inflight + 1) ** self.config.active_request_bias

    def choose(self, request: RouteRequest, snapshot: ClusterSnapshot) -> str | None:
        nodes = [n for n in snapshot.nodes if request.num_prompt_tokens <= max_prompt_tokens(n)]
        if not nodes:
            return None
        if len({n.power_score for n in nodes}) == 1:
            return self._p2c(nodes)
        return self._edf_pick(nodes)

    def _p2c(self, nodes: list[NodeView]) -> str:
        picks = [nodes[self._rng.randrange(len(nodes))] for _ in range(self.config.choice_count)]
        return min(picks, key=lambda n: n.num_inflight).node_id

    def _edf_pick(self, nodes: list[NodeView]) -> str:
        by_id = {n.node_id: n for n in nodes}
        if frozenset(by_id) != self._members:  # hosts changed: a fresh schedule, as Envoy rebuilds it
            self._members = frozenset(by_id)
            self._edf = []
            for node_id in sorted(by_id):
                self._push(by_id[node_id], 1.0 / self.weight(by_id[node_id]))
        deadline, _, node_id = heapq.heappop(self._edf)
        node = by_id[node_id]
        self._push(node, deadline + 1.0 / self.weight(node))
        return node_id

    def _push(self, node: NodeView, deadline: float) -> None:
        heapq.heappush(self._edf, (deadline, self._order, node.node_id))
        self._order += 1

    def on_node_removed(self, node_id: str) -> None:
        self._members = frozenset()  # rebuilt at the next pick
