"""The zoo fleet with and without heterogeneous speculative pairs, in the fleet simulator, same run per load.

    python -m bench.sim_spec_pairs --loads 0.3,0.8 --sweep-loads 0.1,0.2,0.3,0.5,0.8 --max-requests 3000 \
        --out bench/results/2026-12-01-sim-spec-pairs.json

For each load, one workload (the trace scaled to ``load`` x the plain fleet's capacity, as ``zoo sim``
does, then its first ``--max-requests`` requests) is replayed once per pair mode (none: no pairs; auto:
the control plane's pairing policy, controlplane/spec_pairs.py, deciding on the simulated nodes' hellos and
LoadReports during the run; all: the same policy forced, every compatible idle drafter) under one policy.
Reported per case: TTFT P99, TPOT P50/P99, goodput (TTFT <= 1 s and TPOT <= 100 ms), and the share of the
paired verifiers' steps that speculated; ratios against "none" at the same load. The switch-off load of a
mode is the lowest swept load from which on fewer than ``--off-share`` of its verifiers' steps speculate.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

from sim.cli import add_sim_args, admission_config, build_workload, scaled
from sim.des import FleetSimulator, default_router_config
from sim.fleet import load_fleet
from sim.report import Slo, summarize
from sim.spec_pair_nodes import paired_fleet, spec_pairs_info
from sim.spec_pairs import SpecPairsConfig, pair_costs


def run_case(fleet, workload, args, slo: Slo) -> dict:
    router = dataclasses.replace(
        default_router_config(fleet, args.policy, args.seed), slo_ttft_s=slo.ttft_s, slo_tpot_s=slo.tpot_s
    )
    sim = FleetSimulator(
        fleet,
        workload,
        args.policy,
        router_config=router,
        admission=admission_config(args),
        seed=args.seed,
        report_interval_s=args.report_interval,
        drain_limit_s=args.drain_limit,
    )
    result = sim.run()
    rep = summarize(result, slo)
    info = spec_pairs_info(fleet)
    profile = {n.node_id: n.hardware.profile for n in fleet.nodes}
    by_gpu: dict[str, list[float]] = {}
    for r in result.records:
        if r.node_id is not None and r.num_output_tokens > 1:
            by_gpu.setdefault(profile[r.node_id], []).append(r.tpot_s)
    return {
        "ttft_p99_ms": 1e3 * rep.ttft_s[99],
        "tpot_p50_ms": 1e3 * rep.tpot_s[50],
        "tpot_p99_ms": 1e3 * rep.tpot_s[99],
        "goodput": rep.goodput,
        "num_unserved": rep.num_unserved,
        "tpot_p99_ms_by_gpu": {g: 1e3 * sorted(v)[len(v) * 99 // 100] for g, v in sorted(by_gpu.items())},
        "utilisation": rep.utilisation,
        "requests_by_gpu": rep.requests_by_gpu,
        "spec_step_share": info.get("spec_step_share", 0.0),
        "num_pairs_total": info.get("num_pairs_total", 0),
        "num_unpairs_total": info.get("num_unpairs_total", 0),
        "pairs_at_end": info.get("pairs_at_end", {}),
        "first_orders": info.get("orders", [])[:4],
        "refusals": dict(list(info.get("refusals", {}).items())[:3]),
        "pairs": info.get("pairs", []),
        "wall_s": result.wall_s,
    }


def predicted_table(fleet, context: float, k_max: int, hop_s: float) -> dict:
    """The cost model's speed-up of a pair (best k) per (verifier GPU, drafter GPU), alpha and verifier batch:
    where pairs could win, independently of the trace."""
    kinds = {}
    for n in fleet.nodes:
        kinds.setdefault(f"{n.hardware.profile}" + (f"x{n.hardware.tp}" if n.hardware.tp > 1 else ""), n.hardware)
    draft = SpecPairsConfig().draft_for(fleet.model)
    table = {}
    for v, v_hw in kinds.items():
        for d, d_hw in kinds.items():
            if v == d:
                continue
            costs = pair_costs(fleet.model, draft, v_hw, d_hw, hop_s)
            table[f"{v}<-{d}"] = {
                f"alpha={a:g}": {f"batch={b}": round(costs.best(b, context, a, k_max)[1], 3) for b in (1, 8, 32)}
                for a in (0.6, 0.7, 0.8, 0.9)
            }
    return table


def switch_off_load(points: list[tuple[float, float]], off_share: float) -> float | None:
    """The lowest load from which on every point's speculating share is below ``off_share`` (None: never)."""
    off = None
    for load, share in sorted(points, reverse=True):
        if share >= off_share:
            break
        off = load
    return off


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.sim_spec_pairs", description=__doc__.splitlines()[0])
    add_sim_args(parser)
    parser.add_argument("--loads", default="0.3,0.8")
    parser.add_argument("--modes", default="none,auto,all")
    parser.add_argument("--off-share", type=float, default=0.05)
    parser.add_argument("--out", default=None, help="write the JSON report here")
    parser.set_defaults(policy="hardware_aware", sweep_loads="0.1,0.2,0.3,0.5,0.8")
    args = parser.parse_args(argv)
    fleet = load_fleet(args.fleet)
    base = build_workload(args, fleet)
    context = base.mean_prompt_tokens + base.mean_output_tokens / 2
    modes = args.modes.split(",")
    settings = {
        "alpha": args.spec_alpha,
        "k_max": args.spec_k,
        "hop_s": args.spec_hop,
        "context_tokens": context,
        "policy_min_gain": args.spec_pair_min_gain,
    }
    fleets = {m: fleet if m == "none" else paired_fleet(fleet, SpecPairsConfig(mode=m, **settings)) for m in modes}
    slo = Slo(args.slo_ttft, args.slo_tpot)
    loads = sorted({float(x) for x in args.loads.split(",")} | {float(x) for x in args.sweep_loads.split(",")})
    cases: dict[str, dict[str, dict]] = {}
    for load in loads:
        workload, _ = scaled(base, fleet, load, args)
        cases[f"{load:g}"] = row = {}
        for m in modes:
            t0 = time.perf_counter()
            row[m] = run_case(fleets[m], workload, args, slo)
            print(
                f"load {load:g} {m}: TPOT p99 {row[m]['tpot_p99_ms']:.1f} ms, TTFT p99 {row[m]['ttft_p99_ms']:.0f} ms, "
                f"goodput {row[m]['goodput']:.1%}, speculating {row[m]['spec_step_share']:.1%} "
                f"({time.perf_counter() - t0:.0f} s)",
                file=sys.stderr,
                flush=True,
            )
        for m in modes:
            if m != "none" and "none" in row:
                row[m]["tpot_p99_vs_none"] = row[m]["tpot_p99_ms"] / row["none"]["tpot_p99_ms"]
                row[m]["tpot_p50_vs_none"] = row[m]["tpot_p50_ms"] / row["none"]["tpot_p50_ms"]
                row[m]["ttft_p99_vs_none"] = row[m]["ttft_p99_ms"] / row["none"]["ttft_p99_ms"]
    report = {
        "bench": "sim-spec-pairs",
        "fleet": fleet.describe(),
        "trace": base.name,
        "policy": args.policy,
        "window": f"the first {args.max_requests} requests of the scaled trace" if args.max_requests else "whole trace",
        "slo": {"ttft_s": slo.ttft_s, "tpot_s": slo.tpot_s},
        "alpha": args.spec_alpha,
        "alpha_source": "assumed: Leviathan et al. 2023 Table 3, 0.6-0.8 for drafts 10-100x smaller than the target",
        "draft_model": "sim:llama-3.2-1b",
        "k_max": args.spec_k,
        "hop_s": args.spec_hop,
        "predicted_speedup_best_k": predicted_table(fleet, context, args.spec_k, args.spec_hop),
        "decided_by": "controlplane/spec_pairs.py SpecPairPolicy (via controlplane/spec_pairing.py) on the simulated "
        "hellos and LoadReports; auto: its defaults (min_gain "
        f"{args.spec_pair_min_gain}), all: min_gain -10 at any verifier batch",
        "drafters": {m: f.drafter_ids for m, f in fleets.items() if m != "none"},
        "cases": cases,
        "switch_off_load": {
            m: switch_off_load([(float(ld), c[m]["spec_step_share"]) for ld, c in cases.items()], args.off_share)
            for m in modes
            if m != "none"
        },
        "off_share": args.off_share,
    }
    text = json.dumps(report, indent=2)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
