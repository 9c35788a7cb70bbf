"""NVIDIA Dynamo KV router: the worker with the lowest predicted cost wins.

As published (Dynamo router docs, "Cost Calculation")::

    overlap(w)         prompt blocks w already caches (here: the router's own index of what it routed, with
                       Dynamo's no-KV-events TTL of 120 s)
    prefill_blocks(w)  = prompt blocks - overlap(w)                  (blocks w would compute from scratch)
    decode_blocks(w)   = active blocks on w + the request's blocks   (KV blocks held by w's live requests)
    cost(w)            = overlap_score_weight * prefill_blocks(w) + decode_blocks(w)      lowest wins

overlap_score_weight defaults to 1; router_temperature 0 (deterministic: the lowest cost; exact ties at
random, seeded here). Active blocks = the node's used device blocks from its last report plus the blocks
of prompts routed there since (Dynamo counts them on routing too).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from controlplane.router.policies.anchors.routed_prefix_tree import RoutedPrefixTree
from controlplane.router.policies.node_table import max_prompt_tokens
from controlplane.router.policy import ClusterSnapshot, NodeView, RouteRequest
from controlplane.router.router_config import RouterConfig


@dataclass(frozen=True, slots=True)
class DynamoConfig:
    overlap_score_weight: float = 1.0
    block_ttl_s: float = 120.0
    seed: int = 0


def active_blocks(node: NodeView) -> int:
    unreported = -(-node.inflight_prefill_tokens // node.block_size)
    return node.num_device_blocks - node.num_free_device_blocks + unreported


class DynamoKvPolicy:
    name = "dynamo_kv"

    def __init__(self, config: DynamoConfig | None = None) -> None:
        self.config = config or DynamoConfig()
        self.tree = RoutedPrefixTree()
        self._rng = random.Random(self.config.seed)
        self._now_s = 0.0

    def costs(self, request: RouteRequest, snapshot: ClusterSnapshot) -> dict[str, float]:
        self._now_s = snapshot.now_s
        self.tree.expire_before(snapshot.now_s - self.config.block_ttl_s)
        matched = self.tree.match(request.block_hashes)
        out = {}
        for node in snapshot.nodes:
            if request.num_prompt_tokens > max_prompt_tokens(node):
                continue
            request_blocks = -(-request.num_prompt_tokens // node.block_size)
            prefill_blocks = request_blocks - min(matched.get(node.node_id, 0), request_blocks)
            decode_blocks = active_blocks(node) + request_blocks
            out[node.node_id] = self.config.overlap_score_weight * prefill_blocks + decode_blocks
        return out

    def choose(self, request: RouteRequest, snapshot: ClusterSnapshot) -> str | None:
        costs = self.costs(request, snapshot)
        if not costs:
            return None
        best = min(costs.values())
        winners = [node_id for node_id, c in costs.items() if c <= best + 1e-9]
        return winners[0] if len(winners) == 1 else self._rng.choice(winners)

    def on_routed(self, request: RouteRequest, node_id: str) -> None:
        self.tree.insert(node_id, request.block_hashes, self._now_s)

    def on_node_removed(self, node_id: str) -> None:
        self.tree.remove_worker(node_id)


def make_dynamo(config: RouterConfig) -> DynamoKvPolicy:
    return DynamoKvPolicy()
