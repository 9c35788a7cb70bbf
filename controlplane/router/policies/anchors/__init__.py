"""The anchors' routers, re-implemented from their published sources behind our ``Policy`` protocol, so the
fleet simulator and the real control plane can run them against ours. Each file cites its source (repository,
file, version) and lists its deliberate differences; each anchor sees the information its own deployment sees.

    vllm_ps_roundrobin   vLLM production stack, its default router: round robin over endpoints sorted by URL
    vllm_ps_session      vLLM production stack, session affinity; without session keys: the lowest QPS
    vllm_ps_prefixaware  vLLM production stack, longest-prefix trie, random among the best, no load signal
    llm_d                llm-d inference scheduler, default profile (queue x2, KV-cache x2, prefix x3), 50 ms
                         metrics refresh
    sglang_cache_aware   SGLang router: approximate radix tree + balance thresholds
    dynamo_kv            Dynamo KV router: overlap-weighted prefill blocks + active blocks, router-side books of
                         active requests, the overlap from the engines' KV events (its default)
    dynamo_kv_approx     the same with Dynamo's --no-kv-events: the overlap from what it routed, a 120 s TTL
    envoy_wlr            Envoy weighted least request, weights = the GPUs' power scores (the operator's baseline)

``least_requests`` (ours) is the fewest-outstanding-requests rule under its own name. ``controlplane.router.
policies`` adds the anchors to its ``POLICIES`` table, so ``make_policy(name)`` knows them.
"""

from __future__ import annotations

from collections.abc import Callable

from controlplane.router.policies.anchors.dynamo import DynamoKvPolicy, make_dynamo, make_dynamo_approx
from controlplane.router.policies.anchors.envoy_wlr import EnvoyWlrConfig, EnvoyWlrPolicy
from controlplane.router.policies.anchors.llm_d import LlmdPolicy, make_llm_d
from controlplane.router.policies.anchors.sglang import SglangCacheAwarePolicy, make_sglang
from controlplane.router.policies.anchors.vllm_production_stack import (
    VllmPsPrefixAwareConfig,
    VllmPsPrefixAwarePolicy,
    VllmPsRoundRobinPolicy,
    VllmPsSessionPolicy,
)
from controlplane.router.policy import Policy
from controlplane.router.router_config import RouterConfig

ANCHOR_POLICIES: dict[str, Callable[[RouterConfig], Policy]] = {
    "vllm_ps_roundrobin": lambda config: VllmPsRoundRobinPolicy(),
    "vllm_ps_session": lambda config: VllmPsSessionPolicy(),
    "vllm_ps_prefixaware": lambda config: VllmPsPrefixAwarePolicy(VllmPsPrefixAwareConfig(seed=config.seed)),
    "llm_d": make_llm_d,
    "sglang_cache_aware": make_sglang,
    "dynamo_kv": make_dynamo,
    "dynamo_kv_approx": make_dynamo_approx,
    "envoy_wlr": lambda config: EnvoyWlrPolicy(EnvoyWlrConfig(seed=config.seed)),
}


__all__ = [
    "ANCHOR_POLICIES",
    "DynamoKvPolicy",
    "EnvoyWlrPolicy",
    "LlmdPolicy",
    "SglangCacheAwarePolicy",
    "VllmPsPrefixAwarePolicy",
    "VllmPsRoundRobinPolicy",
    "VllmPsSessionPolicy",
]
