"""How alike are the declared tuning split (the first fifth of each trace) and the eval split (the rest)?

Per trace and split, scaled to the load as ``zoo sim`` scales it: the requests, the virtual seconds they span, the
prompt sizes, and the offered prefill work (prompt tokens arriving) per window of W virtual seconds relative to the
split's mean: its coefficient of variation, the share of windows above 1/load of the mean (a window whose work
alone is above the fleet's capacity when the mean is at ``load`` of it) and the largest window. A split too short to
hold a sustained overload (several 10 s windows above capacity) cannot teach the router what to do in one. The
prompt sizes' P99/P50 is the TTFT P99/P50 of an idle fleet of one GPU type (prefill time in proportion to the prompt):
a router can bring TTFT's P99/P50 under it only by sending the long prompts to faster GPUs than the short ones, or by
slowing the median request. ``--idle-ttft`` adds that figure from the simulator's own cost model: each prompt of the
split prefilled alone (nothing queued, nothing cached) on each GPU type of the trace's fleet.

    PYTHONPATH=. python scripts/split_stats.py --windows 2,5,10 --load 0.8
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from backends.sim.cost_model import StepCostModel
from sim.fleet import load_fleet
from sim.workload import load_trace, scale_to_load

TRACES = (("conv", "zoo"), ("code", "zoo"), ("mooncake", "zoo_long"))  # scripts/tune_router.py's cases' fleets


def split_stats(trace: str, fleet_name: str, part: str, load: float, windows_s: list[float]) -> dict:
    fleet = load_fleet(fleet_name)
    base = load_trace(trace).split(part)
    workload = scale_to_load(base, load, fleet.capacity_req_per_s(base.mean_prompt_tokens, base.mean_output_tokens))
    arrival = np.array([r.arrival_s for r in workload.requests])
    prompt = np.array([r.num_prompt_tokens for r in workload.requests], dtype=float)
    row = {
        "requests": len(prompt),
        "virtual_s": round(float(arrival[-1] - arrival[0]), 1),
        "prompt_p50": int(np.median(prompt)),
        "prompt_mean": round(float(prompt.mean())),
        "prompt_p90": int(np.percentile(prompt, 90)),
        "prompt_p99": int(np.percentile(prompt, 99)),
        "prompt_p99_over_p50": round(float(np.percentile(prompt, 99) / np.median(prompt)), 2),
    }
    for window in windows_s:
        work = np.bincount(np.floor((arrival - arrival[0]) / window).astype(int), weights=prompt)
        rel = work / work.mean()
        row[f"window_{window:g}s"] = {
            "windows": len(rel),
            "prefill_work_cv": round(float(rel.std()), 3),
            "share_above_capacity": round(float((rel > 1 / load).mean()), 3),
            "largest_over_mean": round(float(rel.max()), 2),
        }
    return row


def idle_ttft_p99_over_p50(trace: str, fleet_name: str, part: str) -> dict[str, float]:
    """Per GPU type of the fleet: TTFT P99/P50 of the split's prompts, each prefilled alone on that type (the
    cost model's prefill time in chunks of the engine's max_num_batched_tokens, nothing queued, nothing cached)."""
    fleet = load_fleet(fleet_name)
    prompts = [r.num_prompt_tokens for r in load_trace(trace).split(part).requests]
    out = {}
    for spec in fleet.nodes:
        name = f"{spec.hardware.profile}" + (f" x{spec.hardware.tp}" if spec.hardware.tp > 1 else "")
        if name not in out:
            cost, budget = StepCostModel(fleet.model, spec.hardware), fleet.engine.max_num_batched_tokens
            ttft = np.array([cost.prefill_time_s(p, budget) for p in prompts])
            out[name] = round(float(np.percentile(ttft, 99) / np.median(ttft)), 2)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--windows", default="2,5,10", help="comma-separated window lengths, virtual seconds")
    parser.add_argument("--load", type=float, default=0.8)
    parser.add_argument("--idle-ttft", action="store_true", help="also the idle single-type TTFT P99/P50")
    args = parser.parse_args()
    try:
        windows = [float(w) for w in args.windows.split(",")]
    except ValueError:
        parser.error(f"--windows: numbers separated by commas, got {args.windows!r}")
    if not windows or min(windows) <= 0 or not 0 < args.load <= 1:
        parser.error("--windows must be positive and --load in (0, 1]")
    out = {
        f"{trace}/{part}": split_stats(trace, fleet, part, args.load, windows)
        for trace, fleet in TRACES
        for part in ("tune", "eval")
    }
    if args.idle_ttft:
        for name, row in out.items():
            trace, part = name.split("/")
            row["idle_ttft_p99_over_p50"] = idle_ttft_p99_over_p50(trace, dict(TRACES)[trace], part)
    print(json.dumps({"load": args.load, "splits": out}, indent=1))


if __name__ == "__main__":
    main()
