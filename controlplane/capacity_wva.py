"""llm-d's workload-variant-autoscaler (WVA), its saturation analyzer: the anchor for controlplane/capacity_plan.py.

Source: github.com/llm-d/llm-d-workload-variant-autoscaler, docs/saturation-analyzer.md at commit 14bed5d (the
v0.x "saturation-only" mode; defaults from docs/saturation-scaling-config.md). As its users run it, it reads
each replica's ``vllm:kv_cache_usage_perc`` and ``vllm:num_requests_waiting`` from Prometheus as the peak over the
last minute (``max_over_time[1m]``), once per reconcile (every 60 s), and publishes one target per variant:

    a replica is saturated      if kv >= kv_threshold (0.8) or queue >= queue_threshold (5)
    over the model's non-saturated replicas (all its variants pooled):
        spare_kv = mean(kv_threshold - kv)        spare_queue = mean(queue_threshold - queue)   (none: both 0)
    scale up    if spare_kv < kv_spare_trigger (0.1) or spare_queue < queue_spare_trigger (3):
                the cheapest variant gets ready + 1 (ties: the name first in order)
    scale down  if, with the non-saturated replicas' load spread over one replica fewer, both spares stay at or
                above their triggers, and at least 2 replicas are non-saturated:
                the dearest variant gets ready - 1 (ties: the name last in order), never below 1
    otherwise   every variant keeps its ready count

Deliberate differences: none in the rule. A replica is one node here, and its cost is its GPU type's
(CapacityPlanConfig.cost; WVA's CRD default is 10 for every variant, i.e. equal costs). Every replica counts the
same: an L4 at 50% KV is as much spare as an H100 at 50%, which is the point of comparison.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class WvaConfig:
    kv_threshold: float = 0.8
    queue_threshold: int = 5
    kv_spare_trigger: float = 0.1
    queue_spare_trigger: float = 3.0


@dataclass(frozen=True, slots=True)
class WvaReplica:
    variant: str  # the GPU type, here
    kv_usage: float  # peak over the last minute
    queue_length: int  # peak over the last minute


def wva_targets(
    replicas: Iterable[WvaReplica], cost: Callable[[str], float], config: WvaConfig | None = None
) -> dict[str, int]:
    """Variant → target replicas, for one model's replicas (all its variants)."""
    config = config or WvaConfig()
    replicas = list(replicas)
    ready: dict[str, int] = {}
    for r in replicas:
        ready[r.variant] = ready.get(r.variant, 0) + 1
    targets = dict(ready)
    if not replicas:
        return targets
    free = [r for r in replicas if r.kv_usage < config.kv_threshold and r.queue_length < config.queue_threshold]
    n = len(free)
    spare_kv = sum(config.kv_threshold - r.kv_usage for r in free) / n if n else 0.0
    spare_queue = sum(config.queue_threshold - r.queue_length for r in free) / n if n else 0.0
    if spare_kv < config.kv_spare_trigger or spare_queue < config.queue_spare_trigger:
        cheapest = min(ready, key=lambda v: (cost(v), v))
        targets[cheapest] += 1
    elif n >= 2:
        kv_after = config.kv_threshold - sum(r.kv_usage for r in free) / (n - 1)
        queue_after = config.queue_threshold - sum(r.queue_length for r in free) / (n - 1)
        if kv_after >= config.kv_spare_trigger and queue_after >= config.queue_spare_trigger:
            dearest = max(ready, key=lambda v: (cost(v), v))
            targets[dearest] = max(targets[dearest] - 1, 1)
    return targets
