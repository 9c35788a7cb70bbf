"""least_requests: the node with the fewest outstanding requests; ties by node id.

Outstanding = max(num_inflight, num_running + num_waiting) (``node_table.outstanding_requests``): the
control plane's in-flight count is fresher for what it routed itself, the report covers the rest.
Nodes that cannot take the prompt (max_model_len, total KV blocks) are skipped.
"""

from __future__ import annotations

from controlplane.router.policies.node_table import NodeTables, max_prompt_tokens, outstanding_requests
from controlplane.router.policy import ClusterSnapshot, NodeView, PolicyHooks, RouteRequest


def _derive(node: NodeView) -> tuple[float, float]:
    return (max_prompt_tokens(node), outstanding_requests(node))


class LeastRequestsPolicy(PolicyHooks):
    name = "least_requests"

    def __init__(self) -> None:
        self._tables = NodeTables(_derive, 2)

    def choose(self, request: RouteRequest, snapshot: ClusterSnapshot) -> str | None:
        changes = snapshot.changes
        table = self._tables.get(request.model, request.traffic_class, None if changes is None else changes.group)
        table.sync(snapshot.nodes, changes)
        i = table.least_loaded(request.num_prompt_tokens)
        return None if i < 0 else table.node_ids[i]

    def reconfigured(self, config) -> LeastRequestsPolicy:
        """A router reload (controlplane/router_reload.py): no RouterConfig knob changes its choices; it goes on."""
        return self
