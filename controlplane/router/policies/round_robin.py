"""round_robin: the next live node after the last one chosen, in snapshot order, that can take the prompt.

Each eligible node is chosen once per cycle. O(1) per decision in the common case: the position of the
last chosen node is remembered and checked (the registry keeps snapshot order stable between joins).
"""

from __future__ import annotations

from controlplane.router.policies.node_table import max_prompt_tokens
from controlplane.router.policy import ClusterSnapshot, PolicyHooks, RouteRequest


class RoundRobinPolicy(PolicyHooks):
    name = "round_robin"

    def __init__(self) -> None:
        self._last_node_id: str | None = None
        self._last_position = -1

    def choose(self, request: RouteRequest, snapshot: ClusterSnapshot) -> str | None:
        nodes = snapshot.nodes
        n = len(nodes)
        if n == 0:
            return None
        position = self._last_position
        if not (0 <= position < n and nodes[position].node_id == self._last_node_id):
            position = self._find(snapshot)
        num_prompt_tokens = request.num_prompt_tokens
        for step in range(1, n + 1):
            i = (position + step) % n
            node = nodes[i]
            if num_prompt_tokens <= max_prompt_tokens(node):
                self._last_node_id = node.node_id
                self._last_position = i
                return node.node_id
        return None

    def reconfigured(self, config) -> RoundRobinPolicy:
        """A router reload (controlplane/router_reload.py): no RouterConfig knob changes its choices; it goes on."""
        return self

    def _find(self, snapshot: ClusterSnapshot) -> int:
        """Position to continue after: the last chosen node's, or, if it is gone, the one before the node
        that took its place (so that one is next)."""
        for i, node in enumerate(snapshot.nodes):
            if node.node_id == self._last_node_id:
                return i
        if self._last_node_id is None:
            return -1
        return min(self._last_position, len(snapshot.nodes)) - 1
