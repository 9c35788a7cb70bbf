"""llm-d inference scheduler, default profile: filter → score → pick, max weighted score wins.

Scorers (each in [0, 1], per endpoint that can take the prompt), as published:

    queue      (weight 2)  min-max normalised waiting queue: (max_q - q) / (max_q - min_q), 1 when all equal;
                           q = the endpoint's waiting requests from its last metrics scrape (num_waiting)
    kv-cache   (weight 2)  1 - KV cache utilisation (kv_usage from the last scrape)
    prefix     (weight 3)  prompt blocks the endpoint holds / prompt blocks, from the scheduler's own index of
                           the prefixes it routed (approximate prefix cache; blocks recorded on routing)
    picker     max-score: the highest weighted sum; ties broken at random (seeded here, so reproducible)

The block size is the node's KV block size (llm-d's default indexer hashes 64-token blocks; the rule is
the same). Like llm-d, it only sees what metrics say: requests routed since the last scrape are invisible.
Its scrape runs every 50 ms (``metrics_refresh_s``: the endpoint picker's default ``--refresh-metrics-interval``,
kubernetes-sigs/gateway-api-inference-extension, ``DefaultRefreshMetricsInterval``); the fleet simulator
gives it load reports at that period.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from controlplane.router.policies.anchors.routed_prefix_tree import RoutedPrefixTree
from controlplane.router.policies.node_table import max_prompt_tokens
from controlplane.router.policy import ClusterSnapshot, PolicyHooks, RouteRequest
from controlplane.router.router_config import RouterConfig


@dataclass(frozen=True, slots=True)
class LlmdConfig:
    queue_weight: float = 2.0
    kv_cache_weight: float = 2.0
    prefix_weight: float = 3.0
    lru_blocks_per_server: int = 65536
    seed: int = 0


class LlmdPolicy(PolicyHooks):
    name = "llm_d"
    metrics_refresh_s = 0.05  # how fresh the load it sees is, in its own deployment

    def __init__(self, config: LlmdConfig | None = None) -> None:
        self.config = config or LlmdConfig()
        self.tree = RoutedPrefixTree()
        self._rng = random.Random(self.config.seed)
        self._num_inserted = 0

    def scores(self, request: RouteRequest, snapshot: ClusterSnapshot) -> dict[str, float]:
        """Weighted score of every endpoint that can take ``request``."""
        config = self.config
        nodes = [n for n in snapshot.nodes if request.num_prompt_tokens <= max_prompt_tokens(n)]
        if not nodes:
            return {}
        queues = [n.num_waiting for n in nodes]
        q_min, q_max = min(queues), max(queues)
        num_blocks = len(request.block_hashes)
        matched = self.tree.match(request.block_hashes) if num_blocks else {}
        out = {}
        for node, q in zip(nodes, queues, strict=True):
            queue_score = 1.0 if q_max == q_min else (q_max - q) / (q_max - q_min)
            kv_score = 1.0 - node.kv_usage
            prefix_score = matched.get(node.node_id, 0) / num_blocks if num_blocks else 0.0
            out[node.node_id] = (
                config.queue_weight * queue_score
                + config.kv_cache_weight * kv_score
                + config.prefix_weight * prefix_score
            )
        return out

    def choose(self, request: RouteRequest, snapshot: ClusterSnapshot) -> str | None:
        scores = self.scores(request, snapshot)
        if not scores:
            return None
        best = max(scores.values())
        winners = [node_id for node_id, s in scores.items() if s >= best - 1e-12]
        return winners[0] if len(winners) == 1 else self._rng.choice(winners)

    def on_routed(self, request: RouteRequest, node_id: str) -> None:
        self.tree.insert(node_id, request.block_hashes)
        self._num_inserted += len(request.block_hashes)
        if self._num_inserted > self.config.lru_blocks_per_server:  # amortised LRU bound
            self._num_inserted = 0
            self.tree.evict_to(self.config.lru_blocks_per_server)

    def on_node_removed(self, node_id: str) -> None:
        self.tree.remove_worker(node_id)


def make_llm_d(config: RouterConfig) -> LlmdPolicy:
    return LlmdPolicy(LlmdConfig(lru_blocks_per_server=config.prefix_max_blocks_per_node, seed=config.seed))
