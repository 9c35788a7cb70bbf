"""Decisions where hardware_aware sent a request to a node predicted to miss the TTFT target while another node of
the same snapshot was predicted to meet it, and what made each meeting node dearer (the cost terms of
``cost_reference.predict_cost_s`` that charge a node meeting the target: KV room short of the prompt plus its
output reserve, the prompt pushing the node's decodes over the TPOT target, the node's own TPOT over it).

    PYTHONPATH=.:scripts python scripts/miss_diag.py --trace conv --load 0.8 --split eval [--knobs JSON]

``--split eval`` is for diagnosis only (the router's knobs are tuned on the tuning split). Prints one JSON object:
counts of such decisions by the set of reasons their meeting nodes had, and a few examples (node, predicted TTFT,
cost, KV headroom, KV needed).
"""

from __future__ import annotations

import collections
import json

from record_choices import recording_choices  # scripts/ beside this file (sys.path[0] when run as a script)
from tune_router import case_parser, parsed_knobs, simulate_split

from controlplane.router.policies import node_predictions as npred
from controlplane.router.policies.cost_reference import predict_cost_s


def _reasons(v, request, config) -> str:
    n = request.num_prompt_tokens
    need = n + min(request.max_tokens, config.kv_reserve_output_tokens)
    found = []
    if need > npred.kv_headroom_tokens(v, config):
        found.append("kv_full")
    if v.decode_batch_size > 0 and npred.predict_decoders_tpot_s(v, n, config, request.max_tokens) > config.slo_tpot_s:
        found.append("tpot_harm")
    if npred.predict_tpot_s(v, config, request.max_tokens) > config.slo_tpot_s:
        found.append("tpot_excess")
    return "+".join(found) or "none"


def main() -> None:
    parser = case_parser(trace="conv", split="eval", policy=False, knobs=True)
    parser.add_argument("--examples", type=int, default=3)
    args = parser.parse_args()
    knobs = parsed_knobs(parser, args.knobs)
    counts: collections.Counter = collections.Counter()
    examples: list[dict] = []

    def on_choice(request, snapshot, chosen, config):
        n = request.num_prompt_tokens
        ttft = {v.node_id: npred.predict_ttft_s(v, n, config) for v in snapshot.nodes}
        if chosen is None or ttft[chosen] <= config.slo_ttft_s:
            return
        meeting = [v for v in snapshot.nodes if ttft[v.node_id] <= config.slo_ttft_s]
        if not meeting:
            return  # a lost cause: no node meets it
        counts["chosen_late_with_a_node_in_time"] += 1
        counts["meeting_nodes' reasons: " + ", ".join(sorted({_reasons(v, request, config) for v in meeting}))] += 1
        if len(examples) < args.examples:
            need = n + min(request.max_tokens, config.kv_reserve_output_tokens)
            node = {v.node_id: v for v in snapshot.nodes}[chosen]
            examples.append({
                "prompt_tokens": n, "max_tokens": request.max_tokens, "chosen": chosen,
                "chosen_ttft_s": round(ttft[chosen], 3),
                "chosen_cost_s": round(predict_cost_s(node, request, config), 3),
                "meeting": [{"node": v.node_id, "ttft_s": round(ttft[v.node_id], 3),
                             "cost_s": round(predict_cost_s(v, request, config), 3),
                             "kv_headroom_tokens": npred.kv_headroom_tokens(v, config), "kv_needed_tokens": need}
                            for v in meeting[:3]],
            })  # fmt: skip

    with recording_choices(on_choice):
        simulate_split(args.trace, args.fleet, args.load, knobs, split=args.split, step_budget=args.step_budget)
    print(json.dumps({"trace": args.trace, "load": args.load, "split": args.split, "knobs": knobs,
                      "decisions": counts,
                      "examples": examples}, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
