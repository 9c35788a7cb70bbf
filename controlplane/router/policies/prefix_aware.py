"""prefix_aware: prefix-block affinity balanced against load.

    score(node) = matched prefix blocks (router's prefix index) - prefix_load_penalty_blocks * load(node)
    load(node)  = requests outstanding there (node_table.outstanding_requests)

The highest score wins (ties: lower load, then node id), unless that node is overloaded compared to the
least loaded node L that can take the prompt::

    load(best) - load(L) > prefix_balance_abs_threshold  and  load(best) > prefix_balance_rel_threshold * load(L)

in which case L wins (and, once routed there, L starts to hold the prefix too). Candidates: the least
loaded node plus at most ``prefix_max_candidates`` prefix holders (PrefixIndex.match), so a decision costs
one vectorised argmin and a few scalar scores whatever the fleet size.
"""

from __future__ import annotations

from controlplane.router.policies.node_table import (
    COL_LOAD,
    COL_MAX_PROMPT,
    NodeTables,
    max_prompt_tokens,
    outstanding_requests,
)
from controlplane.router.policy import ClusterSnapshot, NodeView, PolicyHooks, RouteRequest
from controlplane.router.prefix_index import PrefixIndex
from controlplane.router.router_config import RouterConfig


def _derive(node: NodeView) -> tuple[float, float]:
    return (max_prompt_tokens(node), outstanding_requests(node))


class PrefixAwarePolicy(PolicyHooks):
    name = "prefix_aware"

    def __init__(self, config: RouterConfig) -> None:
        self.config = config
        self.index = PrefixIndex(config.prefix_max_blocks_per_node)
        self._tables = NodeTables(_derive, 2)

    def choose(self, request: RouteRequest, snapshot: ClusterSnapshot) -> str | None:
        changes = snapshot.changes
        table = self._tables.get(request.model, request.traffic_class, None if changes is None else changes.group)
        table.sync(snapshot.nodes, changes)
        num_prompt_tokens = request.num_prompt_tokens
        least = table.least_loaded(num_prompt_tokens)
        if least < 0:
            return None
        node_ids = table.node_ids
        if not request.block_hashes:
            return node_ids[least]
        config = self.config
        penalty = config.prefix_load_penalty_blocks
        values = table.values
        matched = self.index.match(request.block_hashes, config.prefix_max_candidates)
        least_load = values.item(COL_LOAD, least)
        best, best_load = least, least_load
        best_score = matched.get(node_ids[least], 0) - penalty * least_load
        index_of = table.index_of
        for node_id, num_blocks in matched.items():
            i = index_of.get(node_id)
            if i is None or i == least or values.item(COL_MAX_PROMPT, i) < num_prompt_tokens:
                continue
            load = values.item(COL_LOAD, i)
            score = num_blocks - penalty * load
            if score > best_score or (score == best_score and (load, node_id) < (best_load, node_ids[best])):
                best, best_load, best_score = i, load, score
        if (
            best != least
            and best_load - least_load > config.prefix_balance_abs_threshold
            and best_load > config.prefix_balance_rel_threshold * least_load
        ):
            return node_ids[least]
        return node_ids[best]

    def reconfigured(self, config: RouterConfig) -> PrefixAwarePolicy:
        """A router reload (controlplane/router_reload.py): its thresholds from ``config`` at the next decision, its
        prefix index kept under the new per-node bound (met at its next insert); its tables read no knob."""
        self.config = config
        self.index.max_blocks_per_node = config.prefix_max_blocks_per_node
        return self

    def on_routed(self, request: RouteRequest, node_id: str) -> None:
        self.index.insert(node_id, request.block_hashes)

    def on_node_removed(self, node_id: str) -> None:
        self.index.remove_node(node_id)

    def on_prefix_cache_reset(self, node_id: str) -> None:
        self.index.remove_node(node_id)
