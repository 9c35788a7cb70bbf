"""Which requests a router change wins and loses, by prompt size, on the tuning split (diagnosis, not tuning).

Runs hardware_aware on one case of scripts/tune_router.py (the tuning split, seed 0 unless --seed) twice, with the
knobs of --before and of --after (JSON objects of RouterConfig fields over today's defaults), and counts per prompt
size bucket how many requests met the SLO (TTFT and TPOT) in each run, and for those that changed, the GPU type each
run sent them to. Written for the long-prompt sacrifice (RouterConfig.slo_sacrifice_long_share): on mooncake 80% it
shows what the share trades (router/late_prompts.py).

    PYTHONPATH=. python scripts/sacrifice_transitions.py mooncake80 \
        --before '{"slo_sacrifice_long_share": 0}' --after '{"slo_sacrifice_long_share": 0.2}'
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
from collections import Counter

from scripts.tune_router import ALL_CASES, SLO2, SLO2_CASES, simulate_split
from sim.router_knobs import parse_router_knobs

BUCKETS = (2_000, 6_000, 12_000, 24_000)  # prompt tokens: below each bound, then the rest


def bucket(num_tokens: int) -> str:
    for bound in BUCKETS:
        if num_tokens < bound:
            return f"<{bound // 1000}k"
    return f">={BUCKETS[-1] // 1000}k"


def outcomes(case: str, knobs: dict, seed: int) -> dict[str, tuple[int, str | None, bool]]:
    """Per request id: (prompt tokens, the GPU type it went to, whether it met both targets)."""
    if case in SLO2_CASES:
        result, config = simulate_split(*SLO2_CASES[case], {**knobs, **SLO2}, seed=seed)
    else:
        result, config = simulate_split(*ALL_CASES[case], knobs, seed=seed)
    profile = {node.node_id: node.profile for node in result.nodes}
    slo_ttft_s, slo_tpot_s = config.slo_ttft_s, config.slo_tpot_s
    return {  # met: as sim/report.py counts goodput (an unserved or unfinished request misses)
        r.req_id: (r.num_prompt_tokens, profile.get(r.node_id), r.ttft_s <= slo_ttft_s and r.tpot_s <= slo_tpot_s)
        for r in result.records
    }


def transitions(before: dict, after: dict) -> dict:
    table: dict[str, Counter] = {}
    lost: Counter = Counter()
    won: Counter = Counter()
    for req_id, (num_tokens, gpu_before, met_before) in before.items():
        _, gpu_after, met_after = after[req_id]
        size = bucket(num_tokens)
        change = f"{'met' if met_before else 'missed'}->{'met' if met_after else 'missed'}"
        table.setdefault(size, Counter())[change] += 1
        if met_before != met_after:
            (lost if met_before else won)[f"{size} {gpu_before}->{gpu_after}"] += 1
    order = [*(f"<{b // 1000}k" for b in BUCKETS), f">={BUCKETS[-1] // 1000}k"]
    return {
        "by_prompt_size": {size: dict(table[size]) for size in order if size in table},
        "lost_by_move": dict(lost.most_common()),
        "won_by_move": dict(won.most_common()),
        "goodput_before": sum(o[2] for o in before.values()) / len(before),
        "goodput_after": sum(o[2] for o in after.values()) / len(after),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("case", choices=[*ALL_CASES, *SLO2_CASES])
    parser.add_argument("--before", required=True, help="JSON object of RouterConfig knobs")
    parser.add_argument("--after", required=True, help="JSON object of RouterConfig knobs")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    runs = [(args.case, parse_router_knobs(knobs), args.seed) for knobs in (args.before, args.after)]
    with multiprocessing.Pool(2) as pool:
        before, after = pool.starmap(outcomes, runs)
    report = {"case": args.case, "seed": args.seed, "before": runs[0][1], "after": runs[1][1]}
    print(json.dumps({**report, **transitions(before, after)}, indent=1))


if __name__ == "__main__":
    main()
