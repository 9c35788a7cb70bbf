"""A probe, not a feature: a limit on the share of a node's time given to prefill under its TPOT target, on the
declared tuning split (scripts/tune_router.py's cases and seeds).

A node whose decode step is ``s`` meets a TPOT target ``T`` only while prefill takes at most ``1 - s / T`` of its
time: each second of prefill mixed into its steps lengthens its decoders' steps. hardware_aware prices a
placement at the margin (its TTFT, its own TPOT miss, the decoders its prefill pushes over); in a sustained
overload nothing at the margin stops the fastest nodes from becoming the fleet's prefill, and at a 50 ms target
their decodes are lost (bench/results/2026-12-04-slo2-code80-windows.json). Here the router keeps, per node, the
prefill seconds it routed there (each prompt's tokens at the node's prefill rate, nothing cached counted) decayed
over ``tau_s`` (an exponential window: duty = sum own_s * exp(-(now - t) / tau) / tau, the routed prefill per
second), and adds ``weight`` s to a node where duty + own_s / tau would exceed its cap ``1 - s / T`` (``s``: the
node's measured mean step, else its predicted step with this request). A node whose cap is at most 0 (its step
alone misses the target) is not charged: it misses anyway. Weight 0: hardware_aware as it is.

    PYTHONPATH=.:scripts python scripts/prefill_duty_probe.py --weights 0,3,10 --tau 5 --seeds 3 [cases]

Prints one JSON line per (case, weight, seed) and the means per weight at the end.
"""

from __future__ import annotations

import argparse
import math

import numpy as np
import tune_router as tr
from probe_runner import install_policy, run_probe

from controlplane.router.policies import hardware_aware as ha


class DutyPolicy(ha.HardwareAwarePolicy):
    weight = 0.0
    tau_s = 5.0
    decisions = charged = moved = 0  # this process's run: decisions seen, with a charge, choices moved

    def __init__(self, config) -> None:
        super().__init__(config, use_kernel=False)
        self._duty: dict[str, tuple[float, float]] = {}  # node -> (routed prefill s, decayed to time t; t)
        self._own: dict[str, float] = {}  # node -> this decision's own prefill s there
        self._now = 0.0

    def _duty_at(self, node_id: str, now: float) -> float:
        acc, t = self._duty.get(node_id, (0.0, now))
        return acc * math.exp(-(now - t) / self.tau_s)

    def choose(self, request, snapshot):
        self._now = snapshot.now_s
        self._own = {}
        chosen = super().choose(request, snapshot)
        if chosen is None:
            return chosen
        changes = snapshot.changes
        table = self._tables.get(request.model, request.traffic_class, None if changes is None else changes.group)
        cols, config = table.columns, self.config
        target = config.slo_tpot_s if request.slo_tpot_s is None else request.slo_tpot_s
        own = cols[ha._COL_INV_RATE] * float(max(request.num_prompt_tokens, 1))
        step = np.array([node.step_mean_ms / 1000.0 for node in table.nodes])
        step = np.where(step > 0.0, step, cols[ha._COL_STEP_S])
        cap = 1.0 - step / target
        duty = np.array([self._duty_at(node_id, self._now) for node_id in table.node_ids]) / self.tau_s
        over = (cap > 0.0) & (duty + own / self.tau_s > cap)
        self._own = dict(zip(table.node_ids, own.tolist()))
        DutyPolicy.decisions += 1
        DutyPolicy.charged += bool(over.any())
        if not self.weight or table.node_ids[int(self._cost.argmin())] != chosen:
            return chosen  # weight 0, or the prefix credit moved the choice: kept (as harm_probe.numpy_table)
        new = table.node_ids[int((self._cost + self.weight * over).argmin())]
        DutyPolicy.moved += new != chosen
        return new

    def on_routed(self, request, node_id: str) -> None:
        super().on_routed(request, node_id)
        own = self._own.get(node_id, 0.0)
        self._duty[node_id] = (self._duty_at(node_id, self._now) + own, self._now)


def _job(job: tuple[str, float, float, int]) -> dict:
    case, weight, tau_s, seed = job
    install_policy(DutyPolicy)
    DutyPolicy.weight, DutyPolicy.tau_s = weight, tau_s
    DutyPolicy.decisions = DutyPolicy.charged = DutyPolicy.moved = 0
    r = tr.run(case, {}, seed)
    return {"case": case, "weight": weight, "tau_s": tau_s, "seed": seed, "decisions": DutyPolicy.decisions,
            "charged": DutyPolicy.charged, "moved": DutyPolicy.moved,
            "goodput": round(r["goodput"], 4), "p50": round(r["p50"], 4), "p99": round(r["p99"], 4)}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("cases", nargs="*", default=[*tr.ALL_CASES, *tr.SLO2_CASES])
    ap.add_argument("--weights", default="0,3,10")
    ap.add_argument("--tau", type=float, default=5.0, help="the duty's decay time, virtual s")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=2)
    a = ap.parse_args()
    weights = [float(w) for w in a.weights.split(",")]
    jobs = [(case, w, a.tau, seed) for case in a.cases for w in weights for seed in range(a.seeds)]
    run_probe(_job, jobs, a.jobs, a.cases, "weight", weights)


if __name__ == "__main__":
    main()
