"""hardware_aware's predicted TTFT at decision time (the chosen node's ``predict_ttft_s``) against the TTFT the
request then got, per GPU type: where the router's picture of a node's queue parts from what the node does.

    PYTHONPATH=. python scripts/ttft_prediction_diag.py --trace code --load 0.8 --split tune

``--split eval`` is for diagnosis only (the router's knobs are tuned on the tuning split). Prints one JSON object.
"""

from __future__ import annotations

import argparse
import dataclasses
import json

import numpy as np

from controlplane.router.policies import hardware_aware as ha
from sim.des import FleetSimulator, default_router_config
from sim.fleet import load_fleet
from sim.report import Slo, summarize
from sim.workload import load_trace, scale_to_load


def _recording(predicted: dict):
    real_init = ha.HardwareAwarePolicy.__init__

    def init(self, config, use_kernel=True):
        real_init(self, config, use_kernel)
        inner = self.choose

        def choose(request, snapshot):
            chosen = inner(request, snapshot)
            best = min(ha.predict_ttft_s(v, request.num_prompt_tokens, config) for v in snapshot.nodes)
            for v in snapshot.nodes:
                if v.node_id == chosen:
                    predicted[request.request_id] = (ha.predict_ttft_s(v, request.num_prompt_tokens, config), best)
            return chosen

        self.choose = choose

    return init


def diagnose(trace: str, fleet_name: str, load: float, split: str, knobs: dict) -> dict:
    fleet = load_fleet(fleet_name)
    base = load_trace(trace).split(split)
    capacity = fleet.capacity_req_per_s(base.mean_prompt_tokens, base.mean_output_tokens)
    workload = scale_to_load(base, load, capacity)
    config = dataclasses.replace(default_router_config(fleet, "hardware_aware", 0), **knobs)
    predicted: dict[str, tuple[float, float]] = {}
    real_init = ha.HardwareAwarePolicy.__init__
    ha.HardwareAwarePolicy.__init__ = _recording(predicted)
    try:
        result = FleetSimulator(fleet, workload, "hardware_aware", router_config=config, seed=0).run()
    finally:
        ha.HardwareAwarePolicy.__init__ = real_init
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
    return {"split": split, "knobs": knobs, "goodput": round(report.goodput, 4), "by_gpu": by_gpu}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trace", default="code")
    parser.add_argument("--fleet", default="zoo")
    parser.add_argument("--load", type=float, default=0.8)
    parser.add_argument("--split", default="tune", choices=("tune", "eval"))
    parser.add_argument("--knobs", default="{}", help="JSON RouterConfig overrides")
    args = parser.parse_args()
    print(json.dumps(diagnose(args.trace, args.fleet, args.load, args.split, json.loads(args.knobs))), flush=True)


if __name__ == "__main__":
    main()
