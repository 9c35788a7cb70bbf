"""Which requests make the TTFT tail that decode protection's count adds on code (diagnosis only: it chooses no knob).

GRID_22 to GRID_24 found every count variant costs code 60%'s tuning split 0.5-0.7 s of mean P99. This runs the
tuning split twice per seed, the count off (the defaults) and on (``--knobs``, by default the nodes' reported
slack), and splits each run's tail (TTFT above the off run's P99) by prompt length and by the GPU type that served it,
with the tail requests' mean TTFT and, for the same requests in the off run, where they went and how long they took.

    PYTHONPATH=. python scripts/count_tail_diag.py --trace code --load 0.6 --seeds 3
"""

from __future__ import annotations

import argparse
import itertools
import json

import numpy as np
from tune_router import simulate_split  # scripts/ beside this file (sys.path[0] when run as a script)

BUCKETS = (0, 1024, 2048, 4096, 8192, 1 << 30)  # prompt tokens


def _bucket(tokens: int) -> str:
    for lo, hi in itertools.pairwise(BUCKETS):
        if lo <= tokens < hi:
            return f"{lo}-{hi if hi < 1 << 30 else 'max'}"
    return "?"


def diagnose(trace: str, fleet: str, load: float, knobs: dict, seed: int) -> dict:
    runs = {}
    for name, k in (("off", {}), ("on", knobs)):
        result, _ = simulate_split(trace, fleet, load, k, "tune", seed=seed)
        gpu = {n.node_id: n.profile for n in result.nodes}
        runs[name] = {r.req_id: (r.ttft_s, r.num_prompt_tokens, gpu[r.node_id]) for r in result.records
                      if r.node_id is not None and r.first_token_s is not None}  # fmt: skip
    cut = float(np.percentile([v[0] for v in runs["off"].values()], 99))
    out: dict = {"seed": seed, "off_p99_s": round(cut, 3)}
    for name in ("off", "on"):
        tail = {rid: v for rid, v in runs[name].items() if v[0] > cut}
        by_len: dict[str, int] = {}
        by_gpu: dict[str, int] = {}
        for _, tokens, profile in tail.values():
            by_len[_bucket(tokens)] = by_len.get(_bucket(tokens), 0) + 1
            by_gpu[profile] = by_gpu.get(profile, 0) + 1
        out[name] = {"p99_s": round(float(np.percentile([v[0] for v in runs[name].values()], 99)), 3),
                     "tail_count": len(tail), "tail_by_prompt_tokens": dict(sorted(by_len.items())),
                     "tail_by_gpu": by_gpu}  # fmt: skip
    new = [rid for rid, v in runs["on"].items() if v[0] > cut and rid in runs["off"] and runs["off"][rid][0] <= cut]
    went: dict[str, dict[str, int]] = {}
    for rid in new:
        _, tokens, on_gpu = runs["on"][rid]
        off_gpu = runs["off"][rid][2]
        key = f"{off_gpu} -> {on_gpu}"
        went.setdefault(key, {}).setdefault(_bucket(tokens), 0)
        went[key][_bucket(tokens)] += 1
    mean_off = round(float(np.mean([runs["off"][r][0] for r in new])), 3) if new else None
    mean_on = round(float(np.mean([runs["on"][r][0] for r in new])), 3) if new else None
    out["new_in_tail"] = {"count": len(new), "off_gpu_to_on_gpu_by_prompt_tokens": went,
                          "mean_ttft_off_s": mean_off, "mean_ttft_on_s": mean_on}  # fmt: skip
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", default="code")
    ap.add_argument("--fleet", default="zoo")
    ap.add_argument("--load", type=float, default=0.6)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--knobs", default='{"slo_tpot_harm_count": true, "slo_tpot_harm_reported": true}')
    args = ap.parse_args()
    knobs = json.loads(args.knobs)
    runs = [diagnose(args.trace, args.fleet, args.load, knobs, seed) for seed in range(args.seeds)]
    print(json.dumps({"trace": args.trace, "load": args.load, "knobs": knobs, "runs": runs}, indent=1))


if __name__ == "__main__":
    main()
