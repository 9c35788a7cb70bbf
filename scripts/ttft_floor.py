"""The TTFT no router can beat: each request's prompt prefilled alone on the fleet's fastest node, idle.

For each request of a trace split: the simulator's own prefill time (backends/sim/cost_model.py,
``StepCostModel.prefill_time_s`` in the fleet's prefill chunks) of its prompt on the fastest node of the fleet,
less the longest prefix (whole Mooncake hash blocks) any earlier request of the split carried, as if one
node held every prefix ever seen. No queue, no decode step in the way. Every request's TTFT under any router is
at least its floor, so each percentile of any router's TTFT is at least the floor's: P99 >= floor P99, P50 >=
floor P50. The ratio itself is not bounded that way (a delay added to every request lowers it), so what the
floor shows is the price of the target "P99/P50 TTFT <= 3": a median of at least floor P99 / 3
(``median_needed_for_ratio_3_s``). Where that is above the floor's median, the ratio can be met only by a
slower median, not by a shorter tail. Prints one JSON object per case.

    PYTHONPATH=. python scripts/ttft_floor.py
"""

from __future__ import annotations

import json

import numpy as np

from backends.sim.cost_model import StepCostModel
from sim.fleet import load_fleet
from sim.workload import MOONCAKE_BLOCK_TOKENS, load_trace

CASES = {"conv": "zoo", "code": "zoo", "mooncake": "zoo_long"}


def floor_ttft_s(trace: str, fleet_name: str, split: str = "eval") -> dict:
    fleet = load_fleet(fleet_name)
    chunk = fleet.engine.max_num_batched_tokens
    models = {n.hardware.profile: StepCostModel(fleet.model, n.hardware, block_size=fleet.engine.block_size)
              for n in fleet.nodes}  # fmt: skip
    workload = load_trace(trace).split(split)
    seen: set[tuple[int, ...]] = set()
    cost: dict[int, float] = {}
    times = []
    for r in workload.requests:
        cached_blocks = 0
        for k in range(len(r.hash_ids), 0, -1):
            if r.hash_ids[:k] in seen:
                cached_blocks = k
                break
        for k in range(1, len(r.hash_ids) + 1):
            seen.add(r.hash_ids[:k])
        own = max(r.num_prompt_tokens - cached_blocks * MOONCAKE_BLOCK_TOKENS, 1)
        if own not in cost:
            cost[own] = min(m.prefill_time_s(own, chunk) for m in models.values())
        times.append(cost[own])
    t = np.array(times)
    p50, p99 = np.percentile(t, 50), np.percentile(t, 99)
    return {
        "trace": trace,
        "fleet": fleet_name,
        "split": split,
        "num_requests": len(t),
        "floor_ttft_s": {"50": p50, "90": np.percentile(t, 90), "99": p99},
        "floor_p99_over_p50": p99 / p50,
        "median_needed_for_ratio_3_s": p99 / 3,
    }


def main() -> None:
    for trace, fleet_name in CASES.items():
        print(json.dumps(floor_ttft_s(trace, fleet_name)), flush=True)


if __name__ == "__main__":
    main()
