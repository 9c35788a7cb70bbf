"""Goodput first at a tight TPOT target: a request no node can decode within its TPOT target goes to a node that
never could (RouterConfig.slo_tpot_lost_to_doomed, off by default).

hardware_aware prices a request by its TTFT first. Where every node is predicted to miss the request's TPOT target,
the TPOT miss penalty is charged everywhere alike, so the fastest node takes it, and its prefill stretches the steps
of the requests decoding there that could still meet the target. At the second SLO of ``zoo sim`` (TPOT 50 ms) the
zoo fleet's L4s decode an 8B model's one-sequence step in ~70 ms: every request sent there is lost anyway. This
rule sends such a TPOT lost cause there, to the cheapest of those nodes by hardware_aware's own cost, and keeps the
nodes that can still decode within the target for the requests they can serve.

The rule, after the decision (``redirect``)::

    TPOT_i = step_s + min(backlog_s / max(max_tokens - 1, 1), chunk_s)       (the cost's TPOT, np.minimum)
    if every TPOT_i > the request's TPOT target and some node's floor_s (its one-sequence decode step,
       node_predictions.decode_floor_s) > that target, and the prefix credit did not move the choice:
        the node of least cost (before the prefix credit; first on a tie) among those with floor_s > target
        (slo_tpot_lost_ttft_factor f > 0: and a predicted TTFT, base_s + inv_rate * max(prompt, 1) + an adapter's
        load where the node lacks it, within f times the request's TTFT target), unless none of them can take the
        prompt (cost inf)

It trades the TTFT tail for goodput, so it is an operator's choice, not a default: measured on the declared tuning
split (scripts/tpot_lost_probe.py, mode ``all``; bench/results/2026-12-04-tpot-lost-probe.json), code's second-SLO
goodput went up at 60, 80 and 100% load (to above every fair anchor's) while three mean P99 TTFT bounds broke
(6.25 s -> 26.9 s at 80%): the lost causes queue on the L4s. At the default SLO (100 ms) no node of the zoo fleets
has such a floor and nothing changes. Sans-IO: arrays in, a position out.
"""

from __future__ import annotations

import math

import numpy as np

from controlplane.router.policies.cost_kernel import (  # the table rows it reads
    COL_BASE_S,
    COL_FLOOR_S,
    COL_INV_RATE,
    COL_LORA_LOAD_S,
    columns_tpot_s,
)
from controlplane.router.policies.node_table import NodeTable
from controlplane.router.policy import RouteRequest
from controlplane.router.router_config import RouterConfig


def keep(config: RouterConfig, request: RouteRequest, table: NodeTable, cost: np.ndarray, chosen: int) -> int:
    """The rule off: hardware_aware's choice stands."""
    return chosen


class Redirects:
    """The rule, as the policy calls it where the router or some traffic class turns it on: for a request whose
    class chose (``RouteRequest.goodput_first``), that choice, else the router's (``default_on``); counting the
    requests it moved (``moved``: the control plane exports it as zoo:router_tpot_lost_redirects_total, so an
    operator sees how often goodput first changed a decision)."""

    def __init__(self, default_on: bool) -> None:
        self.default_on = default_on
        self.moved = 0

    def __call__(
        self, config: RouterConfig, request: RouteRequest, table: NodeTable, cost: np.ndarray, chosen: int
    ) -> int:
        on = self.default_on if request.goodput_first is None else request.goodput_first
        if not on:
            return chosen
        i = redirect(config, request, table, cost, chosen)
        self.moved += i != chosen
        return i


def rule_for(config: RouterConfig) -> Redirects | None:
    """The policy's rule: None where neither the router (slo_tpot_lost_to_doomed) nor any of its traffic classes
    (TrafficClass.goodput_first) turns it on, so such a decision pays nothing for it."""
    by_class = any(c.goodput_first for c in config.cells.traffic_classes)
    return Redirects(config.slo_tpot_lost_to_doomed) if config.slo_tpot_lost_to_doomed or by_class else None


def redirect(config: RouterConfig, request: RouteRequest, table: NodeTable, cost: np.ndarray, chosen: int) -> int:
    """The position ``request`` goes to: ``chosen`` (hardware_aware's choice among ``table``'s n nodes, their costs
    before the prefix credit in ``cost[:n]``; -1: none), or the least-cost node whose fastest decode step misses the
    TPOT target where every node is predicted to miss it (see the module docstring). Reads the table, writes nothing
    of it."""
    values = table.values
    n = values.shape[1]
    if chosen < 0 or n == 0:
        return chosen
    slo_tpot_s = config.slo_tpot_s if request.slo_tpot_s is None else request.slo_tpot_s  # the class's
    floor = values[COL_FLOOR_S]
    top = floor.max()
    if not (top > slo_tpot_s or top != top):  # a NaN max (some floor NaN): the test below decides
        return chosen  # nowhere is the target lost at any load: the common case, one pass
    doomed = floor > slo_tpot_s
    if not (columns_tpot_s(values, request.max_tokens) > slo_tpot_s).all():
        return chosen  # some node is predicted to decode it within the target
    costs = cost[:n]
    if int(costs.argmin()) != chosen:
        return chosen  # the prefix credit moved the choice: kept
    factor = config.slo_tpot_lost_ttft_factor
    if factor:  # only where its first token still comes within factor x the TTFT target
        ttft = values[COL_INV_RATE] * float(max(request.num_prompt_tokens, 1))
        ttft += values[COL_BASE_S]
        if request.lora_name is not None:  # a cold adapter load, except on the nodes holding the adapter
            load = values[COL_LORA_LOAD_S].copy()
            for i in table.tagged(request.lora_name):
                load[i] = 0.0
            ttft += load
        slo_ttft_s = config.slo_ttft_s if request.slo_ttft_s is None else request.slo_ttft_s
        doomed &= ttft <= factor * slo_ttft_s
    i = int(np.where(doomed, costs, math.inf).argmin())
    return chosen if costs[i] == math.inf or not doomed[i] else i
