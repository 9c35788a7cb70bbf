"""SGLang router, cache-aware policy: approximate radix tree per worker, balance thresholds.

As published (sgl-router ``cache_aware``)::

    load(w)      requests the router sent to w and has not seen finish (its running queue) = num_inflight
    imbalanced   (max load - min load) > balance_abs_threshold  and  max load > balance_rel_threshold * min load
    imbalanced → the least loaded worker (shortest queue)
    balanced   → match the prompt against every worker's approximate tree (what the router sent it);
                 match_rate = matched tokens of the best worker / prompt tokens
                 match_rate > cache_threshold → that worker;  else → the worker with the smallest tree
                 (most cache room left)
    then the prompt is inserted into the chosen worker's tree; every eviction_interval_s each tree is cut
    back to max_tree_blocks (least recently used leaves first)

Defaults are the current router's (github.com/sgl-project/sglang, sgl-model-gateway, its ``CliArgs``
defaults as of 2026, which replaced sgl-router's older 0.5 / 32 / 1.0001 / 60 s): cache_threshold 0.3,
balance_abs_threshold 64, balance_rel_threshold 1.5, eviction every 120 s, max_tree_size 67,108,864
characters (here ~1M blocks: ~4 characters a token, 16 tokens a block). The tree is over KV blocks (router
block hashes) instead of characters; ties go to the first worker in snapshot (node id) order, as the
router's scans of its worker list do.
"""

from __future__ import annotations

from dataclasses import dataclass

from controlplane.router.policies.anchors.routed_prefix_tree import RoutedPrefixTree
from controlplane.router.policies.node_table import max_prompt_tokens
from controlplane.router.policy import ClusterSnapshot, PolicyHooks, RouteRequest
from controlplane.router.router_config import RouterConfig


@dataclass(frozen=True, slots=True)
class SglangConfig:
    cache_threshold: float = 0.3
    balance_abs_threshold: int = 64
    balance_rel_threshold: float = 1.5
    eviction_interval_s: float = 120.0
    max_tree_blocks: int = 67_108_864 // (4 * 16)


class SglangCacheAwarePolicy(PolicyHooks):
    name = "sglang_cache_aware"

    def __init__(self, config: SglangConfig | None = None) -> None:
        self.config = config or SglangConfig()
        self.tree = RoutedPrefixTree()
        self._next_eviction_s: float | None = None
        self.last_decision = ""  # "balance" | "cache_hit" | "smallest_tree" (for tests and traces)

    def choose(self, request: RouteRequest, snapshot: ClusterSnapshot) -> str | None:
        config = self.config
        self._maybe_evict(snapshot.now_s)
        nodes = [n for n in snapshot.nodes if request.num_prompt_tokens <= max_prompt_tokens(n)]
        if not nodes:
            return None
        loads = [n.num_inflight for n in nodes]
        max_load, min_load = max(loads), min(loads)
        if max_load - min_load > config.balance_abs_threshold and max_load > config.balance_rel_threshold * min_load:
            self.last_decision = "balance"
            return nodes[loads.index(min_load)].node_id
        matched = self.tree.match(request.block_hashes)
        best_id, best_blocks = None, 0
        for node in nodes:
            blocks = matched.get(node.node_id, 0)
            if blocks > best_blocks:
                best_id, best_blocks = node.node_id, blocks
        if best_id is not None:
            block_size = next(n.block_size for n in nodes if n.node_id == best_id)
            match_rate = best_blocks * block_size / max(request.num_prompt_tokens, 1)
            if match_rate > config.cache_threshold:
                self.last_decision = "cache_hit"
                return best_id
        self.last_decision = "smallest_tree"
        sizes = [self.tree.size(n.node_id) for n in nodes]
        return nodes[sizes.index(min(sizes))].node_id

    def on_routed(self, request: RouteRequest, node_id: str) -> None:
        self.tree.insert(node_id, request.block_hashes)

    def on_node_removed(self, node_id: str) -> None:
        self.tree.remove_worker(node_id)

    def _maybe_evict(self, now_s: float) -> None:
        if self._next_eviction_s is None:
            self._next_eviction_s = now_s + self.config.eviction_interval_s
        elif now_s >= self._next_eviction_s:
            self.tree.evict_to(self.config.max_tree_blocks)
            self._next_eviction_s = now_s + self.config.eviction_interval_s


def make_sglang(config: RouterConfig) -> SglangCacheAwarePolicy:
    return SglangCacheAwarePolicy()
