"""Where the TTFT tail comes from: the requests above 3 x the median TTFT (the part the target "P99/P50 <= 3"
would remove), split into what their prompt costs alone and what they waited.

For each tail request: its node's GPU type, its prompt, the simulator's own time to prefill that prompt alone on
that node (``StepCostModel.prefill_time_s`` in the fleet's chunks, less its cached prefix) and on the fleet's
fastest node, and the rest of its TTFT (queueing behind other prompts and sharing steps with decodes). A tail made
of prompts that are slow even alone would need other nodes (or no router could shorten it); a tail of waits is
queueing the router or the schedulers could have avoided. Also: how many tail requests arrived in the busiest 10%
of the trace's seconds (a tail from bursts). Diagnosis only: it chooses no knob.

    PYTHONPATH=. python scripts/tail_diag.py --trace conv --load 0.6 --split eval
"""

from __future__ import annotations

import argparse
import json

import numpy as np
from tune_router import case_parser, simulate_split  # scripts/ beside this file (sys.path[0] when run as a script)

from backends.sim.cost_model import StepCostModel
from sim.cli import apply_step_budget_args
from sim.fleet import load_fleet
from sim.report import Slo, summarize


def diagnose(trace: str, fleet_name: str, load: float, policy: str, split: str, step_budget: str | None = None) -> dict:
    result, config = simulate_split(trace, fleet_name, load, {}, split, policy, step_budget=step_budget)
    fleet = load_fleet(fleet_name)  # the run's chunk: its step budget applied as simulate_split applied it
    apply_step_budget_args(argparse.Namespace(step_budget=step_budget, slo_tpot=config.slo_tpot_s), fleet)
    chunk = fleet.engine.max_num_batched_tokens
    models = {n.hardware.profile: StepCostModel(fleet.model, n.hardware, block_size=fleet.engine.block_size)
              for n in fleet.nodes}  # fmt: skip
    report = summarize(result, Slo(config.slo_ttft_s, config.slo_tpot_s))
    profile_of = {n.node_id: n.profile for n in result.nodes}
    served = [r for r in result.records if r.node_id is not None and r.first_token_s is not None]
    ttft = np.array([r.ttft_s for r in served])
    p50 = float(np.median(ttft))
    cut = 3 * p50
    alone_cache: dict[tuple[str, int], float] = {}

    def alone(profile: str, tokens: int) -> float:
        key = (profile, tokens)
        if key not in alone_cache:
            alone_cache[key] = models[profile].prefill_time_s(tokens, chunk)
        return alone_cache[key]

    fastest = min(models, key=lambda p: alone(p, 1024))
    arrivals = np.array([r.arrival_s for r in served])
    per_second = np.bincount(arrivals.astype(int))
    busy_seconds = set(np.argsort(per_second)[-max(1, len(per_second) // 10) :].tolist())
    tail = [r for r in served if r.ttft_s > cut]
    rows: dict[str, dict] = {}
    for gpu in sorted(set(profile_of.values())):
        on = [r for r in served if profile_of[r.node_id] == gpu]
        recs = [r for r in tail if profile_of[r.node_id] == gpu]
        if not recs:
            rows[gpu] = {"served": len(on), "tail": 0}
            continue
        own = [max(r.num_prompt_tokens - r.num_cached_prompt_tokens, 1) for r in recs]
        prefill = np.array([alone(gpu, n) for n in own])
        prefill_fastest = np.array([alone(fastest, n) for n in own])
        t = np.array([r.ttft_s for r in recs])
        rows[gpu] = {
            "served": len(on),
            "tail": len(recs),
            "tail_share_of_served": round(len(recs) / len(on), 4),
            "prompt_p50": int(np.median([r.num_prompt_tokens for r in recs])),
            "all_prompt_p50": int(np.median([r.num_prompt_tokens for r in on])),
            "ttft_p50_s": round(float(np.median(t)), 4),
            "alone_prefill_p50_s": round(float(np.median(prefill)), 4),
            "alone_prefill_on_fastest_p50_s": round(float(np.median(prefill_fastest)), 4),
            "slow_even_alone": int((prefill > cut).sum()),  # on this node, past the cut with no queue at all
            "slow_even_alone_on_fastest": int((prefill_fastest > cut).sum()),
            "wait_p50_s": round(float(np.median(t - prefill)), 4),
            "in_busiest_tenth_of_seconds": int(sum(int(r.arrival_s) in busy_seconds for r in recs)),
        }
    return {
        "trace": trace,
        "fleet": fleet_name,
        "load": load,
        "split": split,
        "seed": 0,
        "policy": policy,
        "ttft_p50_s": round(p50, 4),
        "ttft_p99_s": round(report.ttft_s[99], 4),
        "p99_over_p50": round(report.ttft_p99_over_p50, 2),
        "tail_cut_s": round(cut, 4),
        "tail_requests": len(tail),
        "tail_share": round(len(tail) / len(served), 4),
        "fastest_gpu": fastest,
        "by_gpu": rows,
    }


def main() -> None:
    parser = case_parser(trace="conv", load=0.6, split="eval")
    args = parser.parse_args()
    for policy in args.policy.split(","):
        print(json.dumps(diagnose(args.trace, args.fleet, args.load, policy, args.split, args.step_budget)), flush=True)


if __name__ == "__main__":
    main()
