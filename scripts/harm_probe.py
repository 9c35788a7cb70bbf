"""A probe, not a feature: hardware_aware's cost plus the delay a request adds to the requests that will queue behind
it (its externality), on the declared tuning split (seed 0, default knobs, scripts/tune_router.py's cases).

Under FCFS, a request of prefill time ``p`` on node n delays every request that reaches n before n's backlog
clears, each by ``p``. With ``W`` the wait n already has (its predicted queue) and ``lam`` the rate of requests the
router has been sending n (decayed over ``tau`` s), about ``lam * (W + p)`` requests arrive meanwhile, so

    harm = h * lam * p * (W + p)        (seconds of other requests' TTFT)

is added to each node's cost (the numpy path's costs, before the prefix credit; where the credit moves the choice,
its choice is kept). h = 0 is hardware_aware as it is. Measures whether pricing the harm a request does to the queue
it joins lifts goodput where the sacrifice grids could not (bench/results/2026-12-02-sim-tune-7/8/9.json).

    PYTHONPATH=.:scripts python scripts/harm_probe.py --weights 0,0.3,1 code80 mooncake80

Prints one JSON line per (case, weight).
"""

from __future__ import annotations

import argparse
import json
import math

import numpy as np
from tune_router import CASES, simulate_split

import sim.des as des
from controlplane.router.policies import hardware_aware as ha
from sim.report import Slo, summarize

CASES = {**CASES, "conv60": ("conv", "zoo", 0.6), "mooncake60": ("mooncake", "zoo_long", 0.6)}


def numpy_table(policy: ha.HardwareAwarePolicy, request, snapshot, chosen, weight: float):
    """The node table the numpy path just chose ``chosen`` from (its costs in ``policy._cost``), or None where the
    probe keeps the choice: no node, the probe's weight 0, or the prefix credit moved the choice."""
    if chosen is None or not weight:
        return None
    changes = snapshot.changes
    table = policy._tables.get(request.model, request.traffic_class, None if changes is None else changes.group)
    if table.node_ids[int(policy._cost.argmin())] != chosen:
        return None  # the prefix credit moved it: kept
    return table


class HarmPolicy(ha.HardwareAwarePolicy):
    weight = 0.0
    tau_s = 5.0

    def __init__(self, config) -> None:
        super().__init__(config, use_kernel=False)
        self._rate: dict[str, tuple[float, float]] = {}  # node -> (rate at t, t)
        self._now = 0.0

    def _rate_at(self, node_id: str, now: float) -> float:
        rate, t = self._rate.get(node_id, (0.0, now))
        return rate * math.exp(-(now - t) / self.tau_s)

    def choose(self, request, snapshot):
        self._now = snapshot.now_s
        chosen = super().choose(request, snapshot)
        table = numpy_table(self, request, snapshot, chosen, self.weight)
        if table is None:
            return chosen
        cost, columns = self._cost, table.columns
        p = columns[ha._COL_INV_RATE] * float(max(request.num_prompt_tokens, 1))
        lam = np.array([self._rate_at(nid, self._now) for nid in table.node_ids])
        harm = self.weight * lam * p * (columns[ha._COL_BASE_S] + p)
        return table.node_ids[int((cost + harm).argmin())]

    def on_routed(self, request, node_id: str) -> None:
        super().on_routed(request, node_id)
        self._rate[node_id] = (self._rate_at(node_id, self._now) + 1.0 / self.tau_s, self._now)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("cases", nargs="*", default=list(CASES))
    ap.add_argument("--weights", default="0,0.3,1")
    ap.add_argument("--split", default="tune")
    a = ap.parse_args()
    real = des.make_policy

    def make(name, config=None):
        return HarmPolicy(config) if name == "hardware_aware" else real(name, config)

    des.make_policy = make
    try:
        for case in a.cases:
            for w in map(float, a.weights.split(",")):
                HarmPolicy.weight = w
                result, config = simulate_split(*CASES[case], {}, split=a.split)
                r = summarize(result, Slo(config.slo_ttft_s, config.slo_tpot_s))
                row = {"case": case, "weight": w, "p50": round(r.ttft_s[50], 4), "p99": round(r.ttft_s[99], 4),
                       "p99_over_p50": round(r.ttft_p99_over_p50, 3), "goodput": round(r.goodput, 4),
                       "util": {k: round(v, 2) for k, v in r.utilisation.items()}}  # fmt: skip
                print(json.dumps(row), flush=True)
    finally:
        des.make_policy = real


if __name__ == "__main__":
    main()
