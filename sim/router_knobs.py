"""``zoo sim --router-knobs``: RouterConfig fields an operator sets for every policy of a run
(controlplane/router/router_knobs.py's parser, with the fields a run sets from its other flags or its fleet refused:
the policy, the seed, the cells, the SLO: --policy, --seed, the fleet file, --slo-ttft/--slo-tpot)."""

from __future__ import annotations

from typing import Any

from controlplane.router import router_knobs

SET_BY_OTHER_FLAGS = frozenset({"policy", "seed", "cells", "cells_by_traffic_class", "slo_ttft_s", "slo_tpot_s"})


def settable_knobs(set_elsewhere: frozenset[str] = SET_BY_OTHER_FLAGS) -> list[str]:
    return router_knobs.settable_knobs(set_elsewhere)


def parse_router_knobs(
    text: str | None, flag: str = "--router-knobs", set_elsewhere: frozenset[str] = SET_BY_OTHER_FLAGS
) -> dict[str, Any]:
    """``zoo sim``'s reading of ``text``: controlplane/router/router_knobs.py's, with the run's own fields refused."""
    return router_knobs.parse_router_knobs(text, flag, set_elsewhere)
