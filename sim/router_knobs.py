"""``zoo sim --router-knobs``: RouterConfig fields an operator sets for every policy of a run.

The policies' own knobs (hardware_aware's SLO terms, the prefix-aware thresholds, ...) are RouterConfig fields
(controlplane/router/router_config.py documents each). This reads them from one JSON object, checked as
RouterConfig itself checks them: msgspec types each value against the field (a float field takes an int, not a
string or a bool) and RouterConfig's own checks refuse a value out of range. The fields a run sets from its
other flags or its fleet (the policy, the seed, the cells, the SLO: --policy, --seed, the fleet file,
--slo-ttft/--slo-tpot) are refused here, so one setting has one place. Anything wrong is a ValueError naming it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import msgspec

from controlplane.router.router_config import RouterConfig

SET_BY_OTHER_FLAGS = frozenset({"policy", "seed", "cells", "cells_by_traffic_class", "slo_ttft_s", "slo_tpot_s"})


def settable_knobs() -> list[str]:
    return sorted({f.name for f in dataclasses.fields(RouterConfig)} - SET_BY_OTHER_FLAGS)


def parse_router_knobs(text: str | None) -> dict[str, Any]:
    """The fields of ``text`` (a JSON object; None or empty: none), each as RouterConfig types it."""
    if not text:
        return {}
    try:
        knobs = msgspec.json.decode(text)
    except (msgspec.DecodeError, RecursionError) as e:  # RecursionError: nested past msgspec's depth
        raise ValueError(f"--router-knobs is not JSON: {str(e)[:200]}") from None
    if not isinstance(knobs, dict):
        raise ValueError("--router-knobs must be a JSON object of RouterConfig fields, e.g. '{\"tpot_weight\": 0.3}'")
    unknown = sorted(set(knobs) - set(settable_knobs()))
    if unknown:
        named = ", ".join(repr(k[:60]) for k in unknown[:5])
        raise ValueError(
            f"--router-knobs: not a settable RouterConfig field: {named}"
            f"{' ...' if len(unknown) > 5 else ''}; settable: {', '.join(settable_knobs())}"
            f" (the policy, seed, cells and SLO come from --policy, --seed, the fleet, --slo-ttft/--slo-tpot)"
        )
    try:
        checked = msgspec.convert(knobs, RouterConfig)  # typed per field, then RouterConfig's own range checks
    except msgspec.ValidationError as e:
        raise ValueError(f"--router-knobs: {str(e)[:300]}") from None
    return {name: getattr(checked, name) for name in knobs}
