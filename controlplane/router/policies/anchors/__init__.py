"""The anchors' routers, re-implemented from their published descriptions behind our ``Policy`` protocol,
so the fleet simulator and the real control plane can run them against ours.

    vllm_least_outstanding   vLLM production stack: fewest outstanding requests (= least_requests)
    llm_d                    llm-d inference scheduler, default profile (queue x2, KV-cache x2, prefix x3)
    sglang_cache_aware       SGLang router: approximate radix tree + balance thresholds
    dynamo_kv                Dynamo KV router: overlap-weighted prefill blocks + active decode blocks

``controlplane.router.policies`` adds them to its ``POLICIES`` table, so
``make_policy(name)`` knows them.
"""

from __future__ import annotations

from collections.abc import Callable

from controlplane.router.policies.anchors.dynamo import DynamoKvPolicy, make_dynamo
from controlplane.router.policies.anchors.llm_d import LlmdPolicy, make_llm_d
from controlplane.router.policies.anchors.sglang import SglangCacheAwarePolicy, make_sglang
from controlplane.router.policies.anchors.vllm_production_stack import VllmLeastOutstandingPolicy
from controlplane.router.policy import Policy
from controlplane.router.router_config import RouterConfig

ANCHOR_POLICIES: dict[str, Callable[[RouterConfig], Policy]] = {
    "vllm_least_outstanding": lambda config: VllmLeastOutstandingPolicy(),
    "llm_d": make_llm_d,
    "sglang_cache_aware": make_sglang,
    "dynamo_kv": make_dynamo,
}


__all__ = [
    "ANCHOR_POLICIES",
    "DynamoKvPolicy",
    "LlmdPolicy",
    "SglangCacheAwarePolicy",
    "VllmLeastOutstandingPolicy",
]
