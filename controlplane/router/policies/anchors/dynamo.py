"""NVIDIA Dynamo KV router: the worker with the lowest predicted cost wins.

Source: github.com/ai-dynamo/dynamo, lib/llm/src/kv_router/scheduler.rs and sequence.rs (the v0.x router
whose cost its docs give under "Cost Calculation"; current main moved it to lib/kv-router/src/scheduling/
selector/default.rs and added further knobs, not modelled here)::

    overlap(w)          prompt blocks w already caches
    new_tokens(w)       = prompt tokens - overlap(w) * block_size
    prefill_blocks(w)   = (active_prefill_tokens(w) + new_tokens(w)) / block_size
    decode_blocks(w)    = active_blocks(w) + the request's blocks w does not already hold actively
    cost(w)             = overlap_score_weight * prefill_blocks(w) + decode_blocks(w)        lowest wins
    router_temperature  0 (default): the lowest cost, ties at random; > 0: softmax over -cost / temperature
                        after dividing the costs by the largest

``active_*`` is the router's own book of the requests it sent (``ActiveSequences``): a request adds its
new tokens to the worker's active prefill tokens until its first token comes back (``mark_prefill_completed``)
and its prompt blocks to the worker's active blocks until it finishes (blocks shared by several active
requests count once). Nothing of it waits for a load report: the worker's queue never vanishes from view.
Defaults: overlap_score_weight 1.0, router_temperature 0.0.

Deliberate differences: overlap comes from the router's own record of what it routed, with Dynamo's
``--no-kv-events`` TTL of 120 s (Dynamo's default listens to the engines' KV events instead; on traces
without shared prefixes, conv and code, the two agree); exact ties are broken with a seeded RNG.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from controlplane.router.policies.anchors.routed_prefix_tree import RoutedPrefixTree
from controlplane.router.policies.node_table import max_prompt_tokens
from controlplane.router.policy import ClusterSnapshot, PolicyHooks, RouteRequest
from controlplane.router.router_config import RouterConfig


@dataclass(frozen=True, slots=True)
class DynamoConfig:
    overlap_score_weight: float = 1.0
    router_temperature: float = 0.0
    block_ttl_s: float = 120.0
    seed: int = 0


@dataclass(slots=True)
class _Worker:
    """One worker's active sequences, as the router books them."""

    prefill_tokens: int = 0  # new (uncached) prompt tokens of requests without a first token yet
    block_refs: dict[int, int] = field(default_factory=dict)  # active full block → requests holding it
    partial_blocks: int = 0  # active requests whose prompt ends in a partial block (one block each)

    @property
    def active_blocks(self) -> int:
        return len(self.block_refs) + self.partial_blocks


_IDLE = _Worker()  # a worker with nothing active (never mutated)


@dataclass(frozen=True, slots=True)
class _Active:
    node_id: str
    new_tokens: int
    blocks: tuple[int, ...]
    partial: bool


class DynamoKvPolicy(PolicyHooks):
    name = "dynamo_kv"

    def __init__(self, config: DynamoConfig | None = None) -> None:
        self.config = config or DynamoConfig()
        self.tree = RoutedPrefixTree()
        self._rng = random.Random(self.config.seed)
        self._now_s = 0.0
        self._workers: dict[str, _Worker] = {}
        self._active: dict[str, _Active] = {}  # request id → what it added
        self._block_sizes: dict[str, int] = {}  # node → its KV block size (from the snapshot)

    def costs(self, request: RouteRequest, snapshot: ClusterSnapshot) -> dict[str, float]:
        self._now_s = snapshot.now_s
        self.tree.expire_before(snapshot.now_s - self.config.block_ttl_s)
        matched = self.tree.match(request.block_hashes)
        weight = self.config.overlap_score_weight
        out = {}
        for node in snapshot.nodes:
            if request.num_prompt_tokens > max_prompt_tokens(node):
                continue
            block_size = self._block_sizes[node.node_id] = node.block_size
            overlap = min(matched.get(node.node_id, 0), len(request.block_hashes))
            new_tokens = max(0, request.num_prompt_tokens - overlap * block_size)
            worker = self._workers.get(node.node_id, _IDLE)
            prefill_blocks = (worker.prefill_tokens + new_tokens) / block_size
            request_blocks = -(-request.num_prompt_tokens // block_size)
            # blocks of this prompt active there: only where it was routed before (the tree's match)
            already = sum(1 for h in request.block_hashes[:overlap] if h in worker.block_refs) if overlap else 0
            decode_blocks = worker.active_blocks + request_blocks - already
            out[node.node_id] = weight * prefill_blocks + decode_blocks
        return out

    def choose(self, request: RouteRequest, snapshot: ClusterSnapshot) -> str | None:
        costs = self.costs(request, snapshot)
        if not costs:
            return None
        temperature = self.config.router_temperature
        if temperature > 0:
            return self._softmax_sample(costs, temperature)
        best = min(costs.values())
        winners = [node_id for node_id, c in costs.items() if c <= best + 1e-9]
        return winners[0] if len(winners) == 1 else self._rng.choice(winners)

    def _softmax_sample(self, costs: dict[str, float], temperature: float) -> str:
        largest = max(costs.values()) or 1.0
        logits = {n: -c / largest / temperature for n, c in costs.items()}
        top = max(logits.values())
        weights = [math.exp(v - top) for v in logits.values()]
        return self._rng.choices(list(logits), weights=weights)[0]

    # -- the router's book of active sequences -----------------------------------------------------

    def on_routed(self, request: RouteRequest, node_id: str) -> None:
        matched = self.tree.match(request.block_hashes).get(node_id, 0)
        block_size = self._block_sizes.get(node_id, 16)
        new_tokens = max(0, request.num_prompt_tokens - matched * block_size)
        self.tree.insert(node_id, request.block_hashes, self._now_s)
        worker = self._workers.setdefault(node_id, _Worker())
        worker.prefill_tokens += new_tokens
        blocks = tuple(request.block_hashes)
        for h in blocks:
            worker.block_refs[h] = worker.block_refs.get(h, 0) + 1
        partial = request.num_prompt_tokens % block_size != 0
        worker.partial_blocks += partial
        self._active[request.request_id] = _Active(node_id, new_tokens, blocks, partial)

    def on_first_token(self, request_id: str, node_id: str) -> None:
        active = self._active.get(request_id)
        if active is None or active.new_tokens == 0:
            return
        worker = self._workers.get(active.node_id)
        if worker is not None:
            worker.prefill_tokens -= active.new_tokens
        self._active[request_id] = _Active(active.node_id, 0, active.blocks, active.partial)

    def on_finished(self, request_id: str, node_id: str) -> None:
        active = self._active.pop(request_id, None)
        if active is None:
            return
        worker = self._workers.get(active.node_id)
        if worker is None:
            return
        worker.prefill_tokens -= active.new_tokens
        worker.partial_blocks -= active.partial
        for h in active.blocks:
            n = worker.block_refs.get(h, 0) - 1
            if n > 0:
                worker.block_refs[h] = n
            else:
                worker.block_refs.pop(h, None)

    def on_prefix_cache_reset(self, node_id: str) -> None:
        """Dynamo's router clears a worker's blocks on its engine's "all blocks cleared" KV event (vLLM publishes
        one at reset_prefix_cache); its active sequences stay (none run where a reset was allowed)."""
        self.tree.remove_worker(node_id)

    def on_node_removed(self, node_id: str) -> None:
        self.tree.remove_worker(node_id)
        self._workers.pop(node_id, None)
        for request_id in [r for r, a in self._active.items() if a.node_id == node_id]:
            del self._active[request_id]


def make_dynamo(config: RouterConfig) -> DynamoKvPolicy:
    return DynamoKvPolicy(DynamoConfig(seed=config.seed))
