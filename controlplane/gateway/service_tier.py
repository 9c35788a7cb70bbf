"""OpenAI's ``service_tier`` (chat completions, responses) as the request's priority inside its traffic class.

    "priority"                    → priority -1: before the class's default requests
    "auto" | "default" | "scale"  → priority 0 (the fleet has no reserved-capacity "scale" tier: it is the default)
    "flex"                        → priority 1: after them, as OpenAI's cheaper, slower tier (and batch lines) run

vLLM's own ``priority`` field (lower runs earlier), when the request gives it too, decides the order; the reply
names the tier the request was served at (OpenAI's ``service_tier`` in the completion, "default" for "auto"), and
says nothing when the request named none. Any other value is a 400 naming ``service_tier``.
"""

from __future__ import annotations

from controlplane.frontend import invalid_param
from transport.codec import clip

SERVICE_TIERS: dict[str, tuple[str, int]] = {
    "auto": ("default", 0),
    "default": ("default", 0),
    "scale": ("default", 0),
    "flex": ("flex", 1),
    "priority": ("priority", -1),
}


def resolve(priority: int | None, service_tier: str | None) -> tuple[int, str | None]:
    """(the request's priority, the tier its reply names: None when it named none)."""
    if service_tier is None:
        return (priority or 0), None
    if service_tier not in SERVICE_TIERS:
        raise invalid_param(
            "service_tier", f"must be one of {', '.join(SERVICE_TIERS)}, got {clip(service_tier, 64)!r}"
        )
    tier, tier_priority = SERVICE_TIERS[service_tier]
    return (tier_priority if priority is None else priority), tier
