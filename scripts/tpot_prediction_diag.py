"""hardware_aware's predicted TPOT at decision time against the TPOT measured, per GPU type, on the declared
tuning split (seed 0): how far bin packing's TPOT gate (RouterConfig.slo_pack_needs_tpot) can trust it.

    PYTHONPATH=. python scripts/tpot_prediction_diag.py --trace conv --load 0.8 \
        --knobs '{"slo_pack_weight": 2.0, "slo_pack_needs_tpot": true}'

Wraps each HardwareAwarePolicy's ``choose`` (scripts/record_choices.py) to record, per decision, predict_tpot_s
and predict_ttft_s of every node of the snapshot the router saw (the nodes the gate would charge: TTFT met, TPOT
predicted missed) and of the chosen node, then joins the chosen node's prediction with the simulator's record of
the request (those with more than one output token). Prints one JSON object.

``--arrival-window W`` (seconds, > 0) adds a second predictor to judge beside it, computed from what the router sees
(diagnosis only, no knob): the prefill that shares a request's decode steps is the prompts that reach its node
*after* it (FCFS: those queued ahead are prefilled before its first token), fed at the node's recent rate, the
prompt tokens routed there in the last W seconds over W. With rho = that rate / the node's prefill rate, a decode
step that carries the prefill arriving during it lasts step / (1 - rho), at most step + a chunk's time::

    arrival TPOT = min(step / (1 - rho), step + chunk_s)       (step + chunk_s where rho >= 1)

Per GPU type it reports both predictions against the TPOT measured, and how often each says the same as the
measurement about the TPOT target (``agree``: predicted and measured both within it, or both over).
"""

from __future__ import annotations

import argparse
import json
from collections import deque

import numpy as np
from record_choices import recording_choices  # scripts/ beside this file (sys.path[0] when run as a script)
from tune_router import simulate_tune_split

from controlplane.router.policies import node_predictions
from sim.report import Slo, summarize


def _arrival_tpot_s(v, config, max_tokens: int, routed_tok_per_s: float) -> float:
    """The arrival predictor (module docstring) for a request of ``max_tokens`` on node view ``v``."""
    inv_rate = 1.0 / node_predictions.prefill_rate_tok_per_s(v, config)
    step_s = node_predictions.decode_step_s(v, max(v.decode_batch_size, v.num_inflight) + 1, config)
    chunk_s = config.prefill_chunk_tokens * inv_rate
    rho = routed_tok_per_s * inv_rate
    return step_s + chunk_s if rho >= 1.0 else min(step_s / (1.0 - rho), step_s + chunk_s)


def _record(predicted: dict, gate: dict, window_s: float = 0.0, arrival: dict | None = None):
    routed: dict[str, deque] = {}  # node -> (time, prompt tokens) of the requests routed there in the window
    totals: dict[str, int] = {}

    def on_choice(request, snapshot, chosen, config):
        if window_s > 0 and chosen is not None:
            now, sent = snapshot.now_s, routed.setdefault(chosen, deque())
            while sent and sent[0][0] < now - window_s:
                totals[chosen] -= sent.popleft()[1]
            view = next(v for v in snapshot.nodes if v.node_id == chosen)
            rate = totals.get(chosen, 0) / window_s  # before this request: it is ahead of what follows it
            arrival[request.request_id] = _arrival_tpot_s(view, config, request.max_tokens, rate)
            sent.append((now, request.num_prompt_tokens))
            totals[chosen] = totals.get(chosen, 0) + request.num_prompt_tokens
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


def diagnose(trace: str, fleet_name: str, load: float, knobs: dict, window_s: float = 0.0) -> dict:
    predicted: dict[str, tuple[float, int]] = {}
    arrival: dict[str, float] = {}
    gate = {"decisions": 0, "with_gated_node": 0, "gated_by_gpu": {}}
    with recording_choices(_record(predicted, gate, window_s, arrival)):
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
        if window_s > 0:
            slo = config.slo_tpot_s
            alt = np.array([arrival[r.req_id] for r in recs])
            by_gpu[gpu]["agree"] = round(float(((pred <= slo) == (actual <= slo)).mean()), 3)
            by_gpu[gpu]["arrival"] = {
                "pred_tpot_p50": round(float(np.median(alt)), 4),
                "pred_tpot_p90": round(float(np.percentile(alt, 90)), 4),
                "pred_ok": round(float((alt <= slo).mean()), 3),
                "act_over_pred_p50": round(float(np.median(actual / alt)), 2),
                "agree": round(float(((alt <= slo) == (actual <= slo)).mean()), 3),
            }
    out = {"knobs": knobs, "goodput": round(report.goodput, 4), "gate": gate, "by_gpu": by_gpu}
    if window_s > 0:
        out["arrival_window_s"] = window_s
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trace", default="conv")
    parser.add_argument("--fleet", default="zoo")
    parser.add_argument("--load", type=float, default=0.8)
    parser.add_argument("--knobs", default="{}", help="JSON RouterConfig overrides")
    parser.add_argument("--arrival-window", type=float, default=0.0, help="s; > 0: judge the arrival predictor too")
    args = parser.parse_args()
    if args.arrival_window < 0:
        parser.error(f"--arrival-window must be >= 0, got {args.arrival_window}")
    report = diagnose(args.trace, args.fleet, args.load, json.loads(args.knobs), args.arrival_window)
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
