"""A probe: a request no node is predicted to decode within its TPOT target goes to a node that could never decode
within it (a TPOT lost cause sent where the target is lost anyway), on the declared tuning split
(scripts/tune_router.py's cases and seeds). Its mode ``all`` is now a feature, off by default:
RouterConfig.slo_tpot_lost_to_doomed (controlplane/router/policies/tpot_lost.py; GRID_31 kept it off, and its
``ttft`` mode is the feature's slo_tpot_lost_ttft_factor); this probe stays to reproduce the recorded figures.

At the second SLO (TPOT 50 ms) the L4s' one-sequence step (~70 ms for an 8B model) misses the target at any load,
and every request sent there is lost. The anchors ahead of hardware_aware there on code send the L4s more
(least_requests spreads by count; on the eval split sglang_cache_aware sends them half as many again as
hardware_aware) and keep the H100s' steps short enough to decode within 50 ms
(bench/results/2026-12-04-slo2-code80-windows.json). hardware_aware sends a request by its TTFT, and where every
node is predicted to miss its TPOT target the TPOT miss penalty is charged everywhere alike, so the fastest node
takes it, and its decoders' steps grow. Here, where every node's predicted TPOT for this request (step +
min(backlog / decode steps, chunk)) is above its target and some nodes' decode floor
(node_predictions.decode_floor_s) is above it too, the request goes to the cheapest of those (its cost as
hardware_aware computes it). At the default SLO (100 ms) no node of the zoo fleets has such a floor, so nothing
changes there. Modes: ``all``, as above; ``ttft``, only to such a node whose predicted TTFT for this request (queue,
decode step, its own prefill) is within ``--ttft-factor`` times the TTFT target (else hardware_aware's choice);
``off``, hardware_aware as it is.

    PYTHONPATH=.:scripts python scripts/tpot_lost_probe.py --modes off,all,ttft --seeds 3 [cases]

Prints one JSON line per (case, mode, seed) and the means per mode at the end.
"""

from __future__ import annotations

import argparse

import numpy as np
import tune_router as tr
from harm_probe import numpy_table
from probe_runner import install_policy, run_probe

from controlplane.router.policies import hardware_aware as ha
from controlplane.router.policies.node_predictions import decode_floor_s


class LostPolicy(ha.HardwareAwarePolicy):
    mode = "off"
    ttft_factor = 1.0
    decisions = lost = moved = 0  # this process's run: decisions seen, TPOT lost causes, choices moved

    def __init__(self, config) -> None:
        super().__init__(config, use_kernel=False)

    def choose(self, request, snapshot):
        chosen = super().choose(request, snapshot)
        table = numpy_table(self, request, snapshot, chosen, 1.0)
        if table is None:
            return chosen  # no node, or the prefix credit moved the choice: kept
        config = self.config
        target = config.slo_tpot_s if request.slo_tpot_s is None else request.slo_tpot_s
        LostPolicy.decisions += 1
        tpot = self._predicted_tpot(table.columns, request.max_tokens)
        if not (tpot > target).all():
            return chosen
        floor_missed = np.array([decode_floor_s(node, config) > target for node in table.nodes])
        if not floor_missed.any():
            return chosen
        LostPolicy.lost += 1
        if self.mode == "off":
            return chosen
        if self.mode == "ttft":  # only where its TTFT there still meets the TTFT target
            slo_ttft_s = config.slo_ttft_s if request.slo_ttft_s is None else request.slo_ttft_s
            cols = table.columns
            ttft = cols[ha._COL_BASE_S] + cols[ha._COL_INV_RATE] * float(max(request.num_prompt_tokens, 1))
            floor_missed &= ttft <= self.ttft_factor * slo_ttft_s
            if not floor_missed.any():
                return chosen
        cost = np.where(floor_missed, self._cost, np.inf)
        new = table.node_ids[int(cost.argmin())]
        LostPolicy.moved += new != chosen
        return new


def _job(job: tuple[str, str, float, int]) -> dict:
    case, mode, factor, seed = job
    install_policy(LostPolicy)
    LostPolicy.ttft_factor = factor
    LostPolicy.mode = mode
    LostPolicy.decisions = LostPolicy.lost = LostPolicy.moved = 0
    r = tr.run(case, {}, seed)
    return {"case": case, "mode": mode, "ttft_factor": factor, "seed": seed, "decisions": LostPolicy.decisions,
            "lost": LostPolicy.lost, "moved": LostPolicy.moved, "goodput": round(r["goodput"], 4),
            "p50": round(r["p50"], 4), "p99": round(r["p99"], 4)}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("cases", nargs="*", default=list(tr.SLO2_CASES))
    ap.add_argument("--modes", default="off,all,ttft")
    ap.add_argument("--ttft-factor", type=float, default=1.0, help="mode ttft: the bound, times the TTFT target")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=2)
    a = ap.parse_args()
    modes = a.modes.split(",")
    jobs = [(case, m, a.ttft_factor, seed) for case in a.cases for m in modes for seed in range(a.seeds)]
    run_probe(_job, jobs, a.jobs, a.cases, "mode", modes)


if __name__ == "__main__":
    main()
