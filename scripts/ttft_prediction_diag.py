"""hardware_aware's predicted TTFT at decision time (the chosen node's ``predict_ttft_s``) against the TTFT the
request then got, per GPU type: where the router's picture of a node's queue parts from what the node does.

    PYTHONPATH=. python scripts/ttft_prediction_diag.py --trace code --load 0.8 --split tune

``--split eval`` is for diagnosis only (the router's knobs are tuned on the tuning split). Prints one JSON object.
"""

from __future__ import annotations

import json

import numpy as np
from record_choices import recording_choices  # scripts/ beside this file (sys.path[0] when run as a script)
from tune_router import case_parser, parsed_knobs, simulate_split

from controlplane.router.policies import node_predictions
from sim.report import Slo, summarize


def _record(predicted: dict):
    """Per decision: the chosen node's predicted TTFT, and the best any node of the snapshot was predicted."""

    def on_choice(request, snapshot, chosen, config):
        best = min(node_predictions.predict_ttft_s(v, request.num_prompt_tokens, config) for v in snapshot.nodes)
        for v in snapshot.nodes:
            if v.node_id == chosen:
                predicted[request.request_id] = (
                    node_predictions.predict_ttft_s(v, request.num_prompt_tokens, config),
                    best,
                )

    return on_choice


def diagnose(trace: str, fleet_name: str, load: float, split: str, knobs: dict, step_budget: str | None = None) -> dict:
    predicted: dict[str, tuple[float, float]] = {}
    with recording_choices(_record(predicted)):
        result, config = simulate_split(trace, fleet_name, load, knobs, split, step_budget=step_budget)
    report = summarize(result, Slo(config.slo_ttft_s, config.slo_tpot_s))
    profile_of = {n.node_id: n.profile for n in result.nodes}
    by_gpu = {}
    for gpu in sorted(set(profile_of.values())):
        recs = [r for r in result.records if r.node_id and profile_of[r.node_id] == gpu and r.req_id in predicted]
        if not recs:
            continue
        pred = np.array([predicted[r.req_id][0] for r in recs])
        best = np.array([predicted[r.req_id][1] for r in recs])
        actual = np.array([r.ttft_s for r in recs])
        by_gpu[gpu] = {
            "n": len(recs),
            "pred_ttft_p50": round(float(np.median(pred)), 3),
            "pred_ttft_p90": round(float(np.percentile(pred, 90)), 3),
            "act_ttft_p50": round(float(np.median(actual)), 3),
            "act_ttft_p90": round(float(np.percentile(actual, 90)), 3),
            "pred_ok": round(float((pred <= config.slo_ttft_s).mean()), 3),
            "act_ok": round(float((actual <= config.slo_ttft_s).mean()), 3),
            "best_node_ok": round(float((best <= config.slo_ttft_s).mean()), 3),
            "act_over_pred_p50": round(float(np.median(actual / np.maximum(pred, 1e-6))), 2),
            "act_over_pred_p90": round(float(np.percentile(actual / np.maximum(pred, 1e-6), 90)), 2),
        }
    return {
        "split": split,
        "knobs": knobs,
        "step_budget": step_budget,
        "goodput": round(report.goodput, 4),
        "by_gpu": by_gpu,
    }


def main() -> None:
    parser = case_parser(policy=False, knobs=True)
    args = parser.parse_args()
    knobs = parsed_knobs(parser, args.knobs)
    print(json.dumps(diagnose(args.trace, args.fleet, args.load, args.split, knobs, args.step_budget)), flush=True)


if __name__ == "__main__":
    main()
