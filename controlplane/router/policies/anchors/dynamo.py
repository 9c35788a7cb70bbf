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

``overlap`` comes, as in Dynamo's default, from the engines' KV cache events (engine/kv/kv_events.py; Dynamo's
KvIndexer applies vLLM's BlockStored / BlockRemoved / AllBlocksCleared to a radix tree per worker): the blocks each
worker caches now, not what it was sent. ``dynamo_kv_approx`` is Dynamo's ``--no-kv-events`` mode instead (its
ApproxKvIndexer): the router's own record of what it routed, each block forgotten 120 s after it was last sent.

How the events arrive: in the control plane, the Welcome asks each agent for them (``wants_kv_events``) and the
agent sends its whole cache, then every change, over its link (transport/messages.py ``KvEvents``); ``zoo sim``
hands every node's events to the router after each of its steps (Dynamo's come over NATS or ZeroMQ, milliseconds
later).

Deliberate differences: a worker that has sent no event yet (an older agent) is priced by the ``--no-kv-events``
record until its first event, which replaces that record. The tree is keyed by our block chain values, which name a
whole prefix as Dynamo's sequence hashes do. Exact ties are broken with a seeded RNG.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from controlplane.router.policies.anchors.routed_prefix_tree import RoutedPrefixTree
from controlplane.router.policies.node_table import max_prompt_tokens
from controlplane.router.policy import ClusterSnapshot, PolicyHooks, RouteRequest
from controlplane.router.router_config import RouterConfig
from engine.kv.kv_events import BlockRemoved, BlockStored


@dataclass(frozen=True, slots=True)
class DynamoConfig:
    overlap_score_weight: float = 1.0
    router_temperature: float = 0.0
    use_kv_events: bool = True  # Dynamo's default; False: its --no-kv-events mode (dynamo_kv_approx)
    block_ttl_s: float = 120.0  # --no-kv-events: a routed block is forgotten this long after it was last sent
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
    def __init__(self, config: DynamoConfig | None = None) -> None:
        self.config = config or DynamoConfig()
        self.name = "dynamo_kv" if self.config.use_kv_events else "dynamo_kv_approx"
        self.wants_kv_events = self.config.use_kv_events
        self.tree = RoutedPrefixTree()  # what was routed (--no-kv-events), for workers that sent no KV event
        self.kv_tree = RoutedPrefixTree()  # what the workers' KV events say they cache
        self._evented: set[str] = set()  # workers whose KV events arrive: priced by kv_tree alone
        self._rng = random.Random(self.config.seed)
        self._now_s = 0.0
        self._workers: dict[str, _Worker] = {}
        self._active: dict[str, _Active] = {}  # request id → what it added
        self._block_sizes: dict[str, int] = {}  # node → its KV block size (from the snapshot)

    def costs(self, request: RouteRequest, snapshot: ClusterSnapshot) -> dict[str, float]:
        self._now_s = snapshot.now_s
        self.tree.expire_before(snapshot.now_s - self.config.block_ttl_s)
        matched = self._match(request.block_hashes)
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

    def _match(self, block_hashes) -> dict[str, int]:
        """Worker → leading blocks of the prompt it holds: by its KV events, or (none yet) by what it was sent."""
        matched = self.tree.match(block_hashes)
        if self._evented:
            matched.update(self.kv_tree.match(block_hashes))  # disjoint workers: an evented one left ``tree``
        return matched

    def on_routed(self, request: RouteRequest, node_id: str) -> None:
        matched = self._match(request.block_hashes).get(node_id, 0)
        block_size = self._block_sizes.get(node_id, 16)
        new_tokens = max(0, request.num_prompt_tokens - matched * block_size)
        if node_id not in self._evented:  # its events will say what it caches
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

    def on_kv_events(self, node_id: str, events: list) -> None:
        """Dynamo's KvIndexer: a worker's stored blocks join its tree, removed ones leave, a clear empties it."""
        if not self.config.use_kv_events:
            return
        if node_id not in self._evented:
            self._evented.add(node_id)
            self.tree.remove_worker(node_id)  # the --no-kv-events guess gives way to what the worker says
        tree = self.kv_tree
        for event in events:
            if type(event) is BlockStored:
                tree.insert(node_id, event.block_hashes, self._now_s)
            elif type(event) is BlockRemoved:
                tree.remove(node_id, event.block_hashes)
            else:  # AllBlocksCleared
                tree.remove_worker(node_id)

    def on_prefix_cache_reset(self, node_id: str) -> None:
        """Dynamo's router clears a worker's blocks on its engine's "all blocks cleared" KV event (vLLM publishes
        one at reset_prefix_cache); its active sequences stay (none run where a reset was allowed)."""
        self.tree.remove_worker(node_id)
        self.kv_tree.remove_worker(node_id)

    def on_node_removed(self, node_id: str) -> None:
        self.tree.remove_worker(node_id)
        self.kv_tree.remove_worker(node_id)
        self._evented.discard(node_id)
        self._workers.pop(node_id, None)
        for request_id in [r for r, a in self._active.items() if a.node_id == node_id]:
            del self._active[request_id]


def make_dynamo(config: RouterConfig) -> DynamoKvPolicy:
    return DynamoKvPolicy(DynamoConfig(seed=config.seed))


def make_dynamo_approx(config: RouterConfig) -> DynamoKvPolicy:
    """Dynamo's ``--no-kv-events`` mode."""
    return DynamoKvPolicy(DynamoConfig(seed=config.seed, use_kv_events=False))
