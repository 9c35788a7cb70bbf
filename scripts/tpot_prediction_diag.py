"""hardware_aware's predicted TPOT at decision time against the TPOT measured, per GPU type, on the declared
tuning split (seed 0): how far bin packing's TPOT gate (RouterConfig.slo_pack_needs_tpot) can trust it.

    PYTHONPATH=. python scripts/tpot_prediction_diag.py --trace conv --load 0.8 \
        --knobs '{"slo_pack_weight": 2.0, "slo_pack_needs_tpot": true}'

Wraps each HardwareAwarePolicy's ``choose`` (scripts/record_choices.py) to record, per decision, predict_tpot_s
and predict_ttft_s of every node of the snapshot the router saw (the nodes the gate would charge: TTFT met, TPOT
predicted missed) and of the chosen node, then joins the chosen node's prediction with the simulator's record of
the request (those with more than one output token). Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json

import numpy as np
from record_choices import recording_choices  # scripts/ beside this file (sys.path[0] when run as a script)
from tune_router import simulate_tune_split

from controlplane.router.policies import node_predictions
from sim.report import Slo, summarize


def _record(predicted: dict, gate: dict):
    def on_choice(request, snapshot, chosen, config):
        gate["decisions"] += 1
        gated = False
        for v in snapshot.nodes:
            ttft_s = node_predictions.predict_ttft_s(v, request.num_prompt_tokens, config)
            tpot_s = node_predictions.predict_tpot_s(v, config, request.max_tokens)
            if ttft_s <= config.slo_ttft_s and tpot_s > config.slo_tpot_s:
                gated = True
                gate["gated_by_gpu"][v.gpu_type] = gate["gated_by_gpu"].get(v.gpu_type, 0) + 1
            if v.node_id == chosen:
                predicted[request.request_id] = (tpot_s, v.decode_batch_size)
        gate["with_gated_node"] += gated

    return on_choice


def diagnose(trace: str, fleet_name: str, load: float, knobs: dict) -> dict:
    predicted: dict[str, tuple[float, int]] = {}
    gate = {"decisions": 0, "with_gated_node": 0, "gated_by_gpu": {}}
    with recording_choices(_record(predicted, gate)):
        result, config = simulate_tune_split(trace, fleet_name, load, knobs)
    report = summarize(result, Slo(config.slo_ttft_s, config.slo_tpot_s))
    profile_of = {n.node_id: n.profile for n in result.nodes}
    by_gpu = {}
    for gpu in sorted(set(profile_of.values())):
        recs = [
            r
            for r in result.records
            if r.node_id and profile_of[r.node_id] == gpu and r.req_id in predicted and r.num_output_tokens > 1
        ]
        if not recs:
            continue
        pred = np.array([predicted[r.req_id][0] for r in recs])
        actual = np.array([r.tpot_s for r in recs])
        by_gpu[gpu] = {
            "n": len(recs),
            "pred_tpot_p50": round(float(np.median(pred)), 4),
            "pred_tpot_p90": round(float(np.percentile(pred, 90)), 4),
            "act_tpot_p50": round(float(np.median(actual)), 4),
            "pred_ok": round(float((pred <= config.slo_tpot_s).mean()), 3),
            "act_ok": round(float((actual <= config.slo_tpot_s).mean()), 3),
            "batch_at_decision_p50": float(np.median([predicted[r.req_id][1] for r in recs])),
            "act_over_pred_p50": round(float(np.median(actual / pred)), 2),
        }
    return {"knobs": knobs, "goodput": round(report.goodput, 4), "gate": gate, "by_gpu": by_gpu}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trace", default="conv")
    parser.add_argument("--fleet", default="zoo")
    parser.add_argument("--load", type=float, default=0.8)
    parser.add_argument("--knobs", default="{}", help="JSON RouterConfig overrides")
    args = parser.parse_args()
    print(json.dumps(diagnose(args.trace, args.fleet, args.load, json.loads(args.knobs))), flush=True)


if __name__ == "__main__":
    main()
