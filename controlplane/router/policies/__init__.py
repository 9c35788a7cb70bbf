"""Routing policies, chosen once at start-up by name (``make_policy``); one policy per file."""

from __future__ import annotations

from collections.abc import Callable

from controlplane.router.policies.hardware_aware import HardwareAwarePolicy
from controlplane.router.policies.least_requests import LeastRequestsPolicy
from controlplane.router.policies.prefix_aware import PrefixAwarePolicy
from controlplane.router.policies.round_robin import RoundRobinPolicy
from controlplane.router.policy import Policy
from controlplane.router.router_config import RouterConfig

POLICIES: dict[str, Callable[[RouterConfig], Policy]] = {
    "round_robin": lambda config: RoundRobinPolicy(),
    "least_requests": lambda config: LeastRequestsPolicy(),
    "hardware_aware": HardwareAwarePolicy,
    "prefix_aware": PrefixAwarePolicy,
}


# the anchors' routers, re-implemented from their published descriptions (issue 4), under their own names
from controlplane.router.policies.anchors import ANCHOR_POLICIES  # noqa: E402

POLICIES.update(ANCHOR_POLICIES)


def make_policy(name: str, config: RouterConfig | None = None) -> Policy:
    """A fresh policy called ``name``; ValueError naming the valid ones for an unknown name."""
    factory = POLICIES.get(name)
    if factory is None:
        raise ValueError(f"unknown routing policy {name!r}; valid policies: {', '.join(sorted(POLICIES))}")
    return factory(RouterConfig(policy=name) if config is None else config)


__all__ = [
    "POLICIES",
    "HardwareAwarePolicy",
    "LeastRequestsPolicy",
    "PrefixAwarePolicy",
    "RoundRobinPolicy",
    "make_policy",
]
