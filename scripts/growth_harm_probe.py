"""A probe, not a feature: decode protection that also counts the decoders a request pushes over the TPOT target by
joining their batch, on the declared tuning split (scripts/tune_router.py's cases and seeds).

Decode protection today (RouterConfig.slo_tpot_harm_count with slo_tpot_harm_reported) counts the decoders a prompt's
prefill pushes over: those whose slack (engine/decode_slack.py, at the node's measured step ``s0``) lies in
[B, B + P), the backlog's and this prompt's prefill time. Once prefilled the request decodes in the same batch, and
every step of the batch is longer by ``d = step(b + 1) - step(b)`` (node_predictions.decode_step_s: the node's
measured step per sequence) for as long as both decode, ``min(r_i, n)`` steps (``r_i`` the decoder's steps left,
``n`` the request's own). That delay is charged nowhere: a decoder within the target that only the longer steps
push over is counted by neither the stall count nor the request's own TPOT miss (which is charged once, for the
request). Here, from each decoder's own progress (an oracle: the simulated nodes' step counts, as
scripts/slack_harm_probe.py's oracle mode), decoder i with slack_i = T n_i - e_i - r_i s0 and stall
D_i = min(B + P, r_i c) is pushed over by the growth iff

    D_i <= slack_i < D_i + min(r_i, n) * d

and the cost adds ``weight * (that count)`` beside today's charges (weight 0: hardware_aware as it is).

    PYTHONPATH=.:scripts python scripts/growth_harm_probe.py --weights 0,3,10 --seeds 3 [cases]

Prints one JSON line per (case, weight, seed) and the means per weight at the end.
"""

from __future__ import annotations

import argparse

import numpy as np
import slack_harm_probe as shp
import tune_router as tr
from harm_probe import numpy_table
from probe_runner import run_probe

from controlplane.router.policies import hardware_aware as ha
from controlplane.router.policies.node_predictions import decode_step_s


class GrowthPolicy(shp.SlackPolicy):
    growth_weight = 0.0
    decisions = charged = moved = 0  # this process's run: decisions seen, with a growth charge, choices moved

    def choose(self, request, snapshot):
        chosen = ha.HardwareAwarePolicy.choose(self, request, snapshot)
        table = numpy_table(self, request, snapshot, chosen, self.growth_weight)
        if table is None:
            return chosen
        cost, columns, config = self._cost, table.columns, self.config
        target = config.slo_tpot_s if request.slo_tpot_s is None else request.slo_tpot_s
        now = snapshot.now_s
        prompt = float(max(request.num_prompt_tokens, 1))
        own_steps = max(request.max_tokens - 1, 1)
        harm = np.zeros(len(table.node_ids))
        for j, node_id in enumerate(table.node_ids):
            decoders = self._decoders.get(node_id)
            if not decoders:
                continue
            node = table.nodes[j]
            batch = max(node.decode_batch_size, node.num_inflight)
            grow_s = decode_step_s(node, batch + 1, config) - decode_step_s(node, batch, config)
            if grow_s <= 0.0:
                continue
            step_s = node.step_mean_ms / 1000.0 or decode_step_s(node, batch, config)
            chunk_s = columns[ha._COL_CHUNK_S][j]
            stall_s = columns[ha._COL_BACKLOG_S][j] + prompt * columns[ha._COL_INV_RATE][j]
            steps = shp.STEPS.get(node_id, 0)
            count = 0
            for t_ft, steps_ft, n in decoders.values():
                left = max(n - (steps - steps_ft), 0)
                if not left:
                    continue
                slack = target * n - (now - t_ft) - left * step_s
                delay = min(stall_s, left * chunk_s)
                if delay <= slack < delay + min(left, own_steps) * grow_s:
                    count += 1
            harm[j] = count
        GrowthPolicy.decisions += 1
        GrowthPolicy.charged += bool(harm.any())
        new = table.node_ids[int((cost + self.growth_weight * harm).argmin())]
        GrowthPolicy.moved += new != chosen
        return new


def _job(job: tuple[str, float, int]) -> dict:
    case, weight, seed = job
    shp.SlackPolicy = GrowthPolicy  # shp's installed make_policy builds the module's SlackPolicy
    shp._install()
    shp.CORES.clear()
    shp.STEPS.clear()
    shp.REPORTED.clear()
    GrowthPolicy.growth_weight = weight
    GrowthPolicy.decisions = GrowthPolicy.charged = GrowthPolicy.moved = 0
    r = tr.run(case, {}, seed)
    return {"case": case, "weight": weight, "seed": seed, "decisions": GrowthPolicy.decisions,
            "charged": GrowthPolicy.charged, "moved": GrowthPolicy.moved,
            "goodput": round(r["goodput"], 4), "p50": round(r["p50"], 4), "p99": round(r["p99"], 4)}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("cases", nargs="*", default=[*tr.ALL_CASES, *tr.SLO2_CASES])
    ap.add_argument("--weights", default="0,3,10")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=2)
    a = ap.parse_args()
    weights = [float(w) for w in a.weights.split(",")]
    jobs = [(case, w, seed) for case in a.cases for w in weights for seed in range(a.seeds)]
    run_probe(_job, jobs, a.jobs, a.cases, "weight", weights)


if __name__ == "__main__":
    main()
