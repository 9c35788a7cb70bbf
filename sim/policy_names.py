"""The policies a ``zoo sim`` run names (``--policy``): 'all', 'fair', or a comma-separated list."""

from __future__ import annotations

from controlplane.router.policies import POLICIES
from controlplane.router.policies.anchors import ANCHOR_POLICIES
from sim.fair_fight import FAIR_ANCHORS, SUBJECT

OURS = ("round_robin", "least_requests", "prefix_aware", "hardware_aware")


def all_policies() -> list[str]:
    """Ours, then the anchors' re-implementations, then any other registered policy."""
    return [*OURS, *ANCHOR_POLICIES, *(p for p in POLICIES if p not in OURS and p not in ANCHOR_POLICIES)]


def policy_list(spec: str) -> list[str]:
    """``--policy``: 'all', 'fair' (hardware_aware and the fair anchors: the issue's table, sim/fair_fight.py), or
    comma-separated names; ValueError naming the unknown ones (before any run starts)."""
    if spec == "all":
        return all_policies()
    if spec == "fair":
        return [SUBJECT, *FAIR_ANCHORS]
    policies = [p.strip() for p in spec.split(",")]
    unknown = [p for p in policies if p not in POLICIES]
    if unknown:
        raise ValueError(f"unknown policies {unknown[:8]}; valid: {', '.join(all_policies())}")
    return policies
