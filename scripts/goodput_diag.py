"""Diagnose hardware_aware's goodput on the declared tuning split: per GPU type, the share of requests that meet
the TTFT and TPOT SLOs, and their prompt/output sizes (what the router sent where, and what missed).

    PYTHONPATH=. python scripts/goodput_diag.py --trace code --load 0.8 --policy hardware_aware,least_requests
"""

from __future__ import annotations

import json

import numpy as np

from scripts.tune_router import (
    case_parser,
    parsed_knobs,
    simulate_split,
)
from sim.report import Slo, summarize


def by_window(records: list, slo: Slo, window_s: float, profile_of: dict[str, str] | None = None) -> list[dict]:
    """Per window of ``window_s`` virtual seconds (by arrival): the requests, their prompt tokens over the mean
    window's (the offered prefill work) and the share that met both targets; with ``profile_of`` (node id -> GPU
    type), also per GPU type the share of the window's requests sent there and the share of those that met the
    TPOT target (where the fast GPUs' decodes were lost to their prefill in a busy window)."""
    t0 = min(r.arrival_s for r in records)
    index = np.array([int((r.arrival_s - t0) // window_s) for r in records])
    prompt = np.array([r.num_prompt_tokens for r in records], dtype=float)
    ok = np.array([r.ttft_s <= slo.ttft_s and r.tpot_s <= slo.tpot_s for r in records])
    work = np.bincount(index, weights=prompt)
    mean_work = work.mean()
    rows = [
        {
            "window": int(w),
            "requests": int((index == w).sum()),
            "work_over_mean": round(float(work[w] / mean_work), 2),
            "goodput": round(float(ok[index == w].mean()), 3),
        }
        for w in np.unique(index)
    ]
    if profile_of is not None:
        gpu = np.array([profile_of.get(r.node_id, "refused") if r.node_id else "refused" for r in records])
        tpot_ok = np.array([r.tpot_s <= slo.tpot_s for r in records])
        for row in rows:
            here = index == row["window"]
            row["gpu_share"], row["tpot_ok_by_gpu"] = {}, {}
            for name in sorted(set(gpu[here])):
                sent = here & (gpu == name)
                row["gpu_share"][str(name)] = round(float(sent.sum() / here.sum()), 3)
                row["tpot_ok_by_gpu"][str(name)] = round(float(tpot_ok[sent].mean()), 3)
    return rows


def diagnose(
    trace: str,
    fleet_name: str,
    load: float,
    policy: str,
    knobs: dict,
    slo: Slo,
    split: str = "tune",
    window_s: float = 0.0,
    step_budget: str | None = None,
) -> dict:
    knobs = {**knobs, "slo_ttft_s": slo.ttft_s, "slo_tpot_s": slo.tpot_s}
    result, _ = simulate_split(trace, fleet_name, load, knobs, split, policy, step_budget=step_budget)
    report = summarize(result, slo)
    profile_of = {n.node_id: n.profile for n in result.nodes}
    rows: dict[str, dict] = {}
    for gpu in [*sorted(set(profile_of.values())), "refused"]:
        recs = [r for r in result.records if (profile_of.get(r.node_id) if r.node_id else "refused") == gpu]
        if not recs:
            continue
        ttft = np.array([r.ttft_s for r in recs])
        tpot = np.array([r.tpot_s for r in recs])
        prompt = np.array([r.num_prompt_tokens for r in recs])
        out = np.array([r.max_tokens for r in recs])
        ok_t, ok_p = ttft <= slo.ttft_s, tpot <= slo.tpot_s
        rows[gpu] = {
            "n": len(recs),
            "ttft_ok": round(float(ok_t.mean()), 3),
            "tpot_ok": round(float(ok_p.mean()), 3),
            "both_ok": round(float((ok_t & ok_p).mean()), 3),
            "ttft_p50": round(float(np.median(ttft)), 3),
            "tpot_p50": round(float(np.median(tpot)), 4),
            "prompt_p50": int(np.median(prompt)),
            "prompt_mean": int(prompt.mean()),
            "out_p50": int(np.median(out)),
            "util": round(report.utilisation.get(gpu, 0.0), 2),
        }
    return {
        "policy": policy,
        "knobs": knobs,
        "goodput": round(report.goodput, 4),
        "ttft": {k: round(v, 3) for k, v in report.ttft_s.items()},
        "tpot_p50": round(report.tpot_s[50], 4),
        "p99_over_p50": round(report.ttft_p99_over_p50, 2),
        **({"step_budget": step_budget} if step_budget else {}),
        "by_gpu": rows,
        **({"by_window": by_window(result.records, slo, window_s, profile_of)} if window_s > 0 else {}),
    }


def main() -> None:
    parser = case_parser(knobs=True)
    parser.add_argument("--slo-ttft", type=float, default=1.0)
    parser.add_argument("--slo-tpot", type=float, default=0.1)
    parser.add_argument("--by-window", type=float, default=0.0, help="also goodput per window of this many virtual s")
    args = parser.parse_args()
    if args.by_window < 0:
        parser.error("--by-window must be >= 0")
    knobs = parsed_knobs(parser, args.knobs, frozenset({"policy", "slo_ttft_s", "slo_tpot_s"}))
    for policy in args.policy.split(","):
        out = diagnose(
            args.trace,
            args.fleet,
            args.load,
            policy,
            knobs,
            Slo(args.slo_ttft, args.slo_tpot),
            args.split,
            args.by_window,
            args.step_budget,
        )
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
