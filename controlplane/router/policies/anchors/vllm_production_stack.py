"""vLLM production stack's routers, as it ships them (``vllm_router``, ``--routing-logic``).

Source: github.com/vllm-project/production-stack, src/vllm_router/routers/routing_logic.py and
src/vllm_router/prefix/hashtrie.py (main, read 2026-12-01). The router offers ``roundrobin`` (the default),
``session``, ``prefixaware``, ``kvaware`` (needs an LMCache controller: not reproducible here) and
``disaggregated_prefill`` (not a load-balancing rule). Re-implemented:

    vllm_ps_roundrobin   endpoints sorted by URL (here: node id), the request counter modulo their number
    vllm_ps_session      consistent hash of the request's session key; the traces carry none, so every
                         request takes its documented fallback: the endpoint with the lowest QPS over the
                         router's own request stats (an endpoint with no request yet first)
    vllm_ps_prefixaware  a trie of the prompt's chunks per endpoint, no eviction ("we assume that there is no
                         eviction of prefix cache"); the endpoints matching the longest prefix (all of them
                         when nothing matches), one picked at random; load is not looked at

Deliberate differences: the trie is over KV-block hashes (16 tokens) instead of 128-character chunks of
the prompt text (the simulator has no text); QPS is measured over a sliding window of ``qps_window_s``
(production-stack's request stats default: 60 s); endpoints that cannot take the prompt (context length)
are filtered first, as the router's endpoint discovery only lists engines serving the model.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass

from controlplane.router.policies.node_table import max_prompt_tokens
from controlplane.router.policy import ClusterSnapshot, NodeView, PolicyHooks, RouteRequest


def _eligible(request: RouteRequest, snapshot: ClusterSnapshot) -> list[NodeView]:
    return [n for n in snapshot.nodes if request.num_prompt_tokens <= max_prompt_tokens(n)]


class VllmPsRoundRobinPolicy(PolicyHooks):
    name = "vllm_ps_roundrobin"

    def __init__(self) -> None:
        self._counter = 0

    def choose(self, request: RouteRequest, snapshot: ClusterSnapshot) -> str | None:
        nodes = sorted(n.node_id for n in _eligible(request, snapshot))
        if not nodes:
            return None
        chosen = nodes[self._counter % len(nodes)]
        self._counter += 1
        return chosen


@dataclass(frozen=True, slots=True)
class VllmPsSessionConfig:
    qps_window_s: float = 60.0


class VllmPsSessionPolicy(PolicyHooks):
    """Session affinity with the lowest-QPS fallback (the traces have no session key)."""

    name = "vllm_ps_session"

    def __init__(self, config: VllmPsSessionConfig | None = None) -> None:
        self.config = config or VllmPsSessionConfig()
        self._routed_at: dict[str, deque[float]] = {}  # node → times requests were routed there
        self._now_s = 0.0

    def qps(self, node_id: str, now_s: float) -> float | None:
        """Requests/s routed to ``node_id`` over the window; None when it has had none (production-stack's
        'not in request_stats')."""
        times = self._routed_at.get(node_id)
        if not times:
            return None
        horizon = now_s - self.config.qps_window_s
        while times and times[0] < horizon:
            times.popleft()
        return len(times) / self.config.qps_window_s

    def choose(self, request: RouteRequest, snapshot: ClusterSnapshot) -> str | None:
        self._now_s = snapshot.now_s
        best, best_qps = None, float("inf")
        for node in _eligible(request, snapshot):
            qps = self.qps(node.node_id, snapshot.now_s)
            if qps is None:
                return node.node_id
            if qps < best_qps:
                best, best_qps = node.node_id, qps
        return best

    def on_routed(self, request: RouteRequest, node_id: str) -> None:
        self._routed_at.setdefault(node_id, deque()).append(self._now_s)

    def on_node_removed(self, node_id: str) -> None:
        self._routed_at.pop(node_id, None)


@dataclass(frozen=True, slots=True)
class VllmPsPrefixAwareConfig:
    seed: int = 0


class VllmPsPrefixAwarePolicy(PolicyHooks):
    """Longest-prefix match over a trie of what each endpoint was sent; a random pick among the best."""

    name = "vllm_ps_prefixaware"

    def __init__(self, config: VllmPsPrefixAwareConfig | None = None) -> None:
        self.config = config or VllmPsPrefixAwareConfig()
        self._rng = random.Random(self.config.seed)
        # the trie as chain hash → endpoints holding it: a block hash names its whole prefix
        self._holders: dict[int, set[str]] = {}

    def choose(self, request: RouteRequest, snapshot: ClusterSnapshot) -> str | None:
        selected = sorted(n.node_id for n in _eligible(request, snapshot))
        if not selected:
            return None
        for block_hash in request.block_hashes:
            holders = self._holders.get(block_hash)
            if not holders:
                break
            narrowed = [n for n in selected if n in holders]
            if not narrowed:
                break
            selected = narrowed
        return selected[self._rng.randrange(len(selected))]

    def on_routed(self, request: RouteRequest, node_id: str) -> None:
        for block_hash in request.block_hashes:
            self._holders.setdefault(block_hash, set()).add(node_id)

    def on_node_removed(self, node_id: str) -> None:
        for holders in self._holders.values():
            holders.discard(node_id)
