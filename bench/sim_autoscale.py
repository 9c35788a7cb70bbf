"""Autoscaling a mismatched fleet, in the fleet simulator: the capacity plan (controlplane/capacity_plan.py) against
llm-d WVA's saturation analyzer (controlplane/capacity_wva.py) and against the whole pool held all along, on the same
workload, seed by seed.

    python -m bench.sim_autoscale --seeds 3 --jobs 2 [--profile ramp-spike|diurnal|...] --out FILE.json
        [--rules static,zoo,zoo_placed] [--max-queue-per-node N]
    zoo bench autoscale [--quick] [--json]      # ramp-spike at equal costs (--quick: 4 minutes, one seed)

The pool: half the zoo fleet (2 H100, 4 A100-40GB, 4 L4, 1 T4 TP-2 pair), one cell, hardware_aware routing.
The autoscaled runs start with one node of each type and may hold at most the pool; a node asked for joins 60 s
later (sim/autoscale.py). The workload: the conv trace's requests in order (their prompt and output lengths), their
arrivals drawn again, seeded, as a Poisson process whose rate follows a load profile over ``--minutes`` (PROFILES:
ramp-spike, a fifth of the run at 15% of the pool's capacity, a ramp to 75%, a plateau, a short spike to 95%, a fall
to 25%; diurnal, a day's rise and fall; step, a jump from 20% to 80% and back; tuning, the profile the plan's
forecast was designed on, reported apart). Nothing was tuned on the reported profiles: the plan runs at its defaults
(its forecast's lead is the nodes' provisioning time, a fact of the pool), equal GPU costs (WVA's CRD default), as
does WVA. ``zoo_reactive`` is the plan without its forecast (forecast_lead_s 0). Run when ``--rules`` names them:
``zoo_placed``, the plan whose arrivals are the requests placed only, not those refused for want of capacity (the rule
before refused demand counted); ``zoo_to_zero``, the plan with every type's min_nodes 0, so an unused pool scales to
zero and back (``zoo_to_zero_no_wait``: no request waits for a first node; ``--profile bursts``: 30% of the pool,
nothing, 50%, nothing; ``bursts-uneven``, held out for the wake's size: 45%, nothing, 20%, nothing, 60%, nothing). A
request refused for want of a node while its pool is at zero waits for a first node, at most ``cold_start_wait_s`` (300
s), as the control plane holds it (controlplane/cold_start.py; its TTFT counts the wait); any other refusal is lost
here, where a real client retries after its Retry-After. ``--max-queue-per-node`` bounds each node's admission queue
(the simulator's default: 256), so a pool short of nodes refuses rather than queues. Both know the pool: the plan as
each type's max_nodes (what deploy/k8s sets to the ScaledObject's maxReplicaCount); WVA's target for a type with no GPU
left stays unmet, as its GPU limiter defers it (docs/user-guide/gpu-limiter.md).

Reported per rule: goodput (TTFT <= 1 s and TPOT <= 100 ms), TTFT P50/P99, TPOT P99, node-hours by GPU type and
in all, capacity-hours (node-hours weighted by each GPU's power score), scale actions; means over seeds and their
ratios to the static pool's and to WVA's.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from backends.gpu_table import power_score
from backends.sim.cost_model import node_hardware_info
from controlplane.admission import AdmissionConfig
from controlplane.capacity_plan import CapacityPlanConfig
from sim.autoscale import AutoscaleConfig, Autoscaler
from sim.des import FleetSimulator, default_router_config
from sim.fleet import parse_fleet
from sim.report import Slo, summarize
from sim.workload import TraceRequest, Workload, load_trace

POOL = {
    "name": "zoo_half",
    "model": "sim:llama-3-8b",
    "scheduler": {"max_num_batched_tokens": 2048, "max_num_seqs": 256, "max_model_len": 8192},
    "cells": [
        {
            "name": "zoo",
            "pools": [
                {"gpu": "h100-sxm", "count": 2},
                {"gpu": "a100-40gb", "count": 4},
                {"gpu": "l4", "count": 4},
                {"gpu": "t4", "count": 1, "tp": 2},
            ],
        }
    ],
}
# (share of the run, share of the pool's capacity): linear between the points
PROFILES = {
    "ramp-spike": ((0.0, 0.15), (0.2, 0.15), (0.35, 0.75), (0.6, 0.75), (0.63, 0.95), (0.68, 0.95), (0.78, 0.25),
                   (1.0, 0.25)),
    "diurnal": ((0.0, 0.2), (0.15, 0.25), (0.4, 0.8), (0.55, 0.85), (0.75, 0.45), (1.0, 0.2)),
    "step": ((0.0, 0.2), (0.3, 0.2), (0.3001, 0.8), (0.7, 0.8), (0.7001, 0.2), (1.0, 0.2)),
    "tuning": ((0.0, 0.1), (0.25, 0.1), (0.4, 0.7), (0.7, 0.7), (0.8, 0.2), (1.0, 0.2)),  # the forecast's design
    "bursts": ((0.0, 0.3), (0.2, 0.3), (0.2001, 0.0), (0.5, 0.0), (0.5001, 0.5), (0.7, 0.5), (0.7001, 0.0),
               (1.0, 0.0)),  # a pool used now and then: scale to zero and back
    # held out for the wake sizing (declared before its first run; bursts is its design profile): three bursts of
    # other sizes, each after a gap the pool scales to zero in (run with --minutes 80)
    "bursts-uneven": ((0.0, 0.45), (0.15, 0.45), (0.1501, 0.0), (0.4, 0.0), (0.4001, 0.2), (0.55, 0.2), (0.5501, 0.0),
                      (0.8, 0.0), (0.8001, 0.6), (0.9, 0.6), (0.9001, 0.0), (1.0, 0.0)),
}  # fmt: skip
PROFILE = PROFILES["ramp-spike"]
RULES = ("static", "zoo", "zoo_reactive", "wva")
ABLATIONS = ("zoo_placed", "zoo_to_zero", "zoo_to_zero_no_wait")  # run when --rules names them
POLICY = "hardware_aware"


def pool_capacity(conv: Workload) -> float:
    """The pool's capacity in requests/s for the conv trace's mean request."""
    return parse_fleet(POOL, POOL["name"]).capacity_req_per_s(conv.mean_prompt_tokens, conv.mean_output_tokens)


def profiled_workload(minutes: float, seed: int, profile: str = "ramp-spike") -> Workload:
    """The conv requests' lengths on arrivals of the profile's rate (thinned Poisson, seeded)."""
    conv = load_trace("conv")
    capacity = pool_capacity(conv)
    duration_s = 60.0 * minutes
    shape = PROFILES[profile]
    peak = max(level for _, level in shape) * capacity
    rng = np.random.default_rng((seed, 17))
    times = np.cumsum(rng.exponential(1.0 / peak, int(peak * duration_s * 1.2) + 100))
    times = times[times < duration_s]
    xs, ys = zip(*shape, strict=True)
    keep = rng.uniform(0, peak, len(times)) < np.interp(times / duration_s, xs, ys) * capacity
    source = conv.requests
    reqs = tuple(
        TraceRequest(float(t), source[k % len(source)].num_prompt_tokens, source[k % len(source)].max_tokens)
        for k, t in enumerate(times[keep])
    )
    return Workload(f"conv-lengths, {profile} {minutes:g} min", reqs)


def run_one(
    rule: str,
    seed: int,
    minutes: float,
    costs: dict[str, float],
    profile: str = "ramp-spike",
    max_queue_per_node: int | None = None,
) -> dict:
    fleet = parse_fleet(POOL, POOL["name"])
    workload = profiled_workload(minutes, seed, profile)
    slo = Slo()
    router = dataclasses.replace(
        default_router_config(fleet, POLICY, seed), slo_ttft_s=slo.ttft_s, slo_tpot_s=slo.tpot_s
    )
    gpu_types = [node_hardware_info(n.hardware).gpu_type for n in fleet.nodes]
    power = {t: power_score(node_hardware_info(n.hardware)) for t, n in zip(gpu_types, fleet.nodes, strict=True)}
    scaler = None
    if rule != "static":
        pool = {t: gpu_types.count(t) for t in set(gpu_types)}  # the GPUs there are (a KEDA's maxReplicaCount)
        lead_s = 0.0 if rule == "zoo_reactive" else AutoscaleConfig.provision_s  # the forecast's: a node's start
        min_nodes = 0 if rule.startswith("zoo_to_zero") else 1
        no_wait = {"cold_start_wait_s": 0.0} if rule.endswith("_no_wait") else {}  # no request waits for a node
        plan = CapacityPlanConfig(
            gpu_cost=dict(costs), max_nodes=pool, forecast_lead_s=lead_s, default_min_nodes=min_nodes, **no_wait
        )
        base_rule = rule.removesuffix("_no_wait").removesuffix("_reactive").removesuffix("_placed")
        base_rule = base_rule.removesuffix("_to_zero")
        config = AutoscaleConfig(base_rule, slo.ttft_s, plan, count_unserved=rule != "zoo_placed")
        scaler = Autoscaler(config, [n.node_id for n in fleet.nodes], gpu_types)
    wall = time.perf_counter()
    admission = AdmissionConfig() if max_queue_per_node is None else AdmissionConfig(max_queue_per_node)
    result = FleetSimulator(
        fleet, workload, POLICY, router_config=router, seed=seed, autoscaler=scaler, admission=admission
    ).run()
    rep = summarize(result, slo)
    if scaler is None:
        node_hours = {t: gpu_types.count(t) * result.end_s / 3600 for t in sorted(set(gpu_types))}
        summary = {"actions": {"up": 0, "down": 0}, "timeline": [], "cold_start": {}}
    else:
        summary = result.info["autoscale"]
        node_hours = summary["node_hours"]
    return {
        "rule": rule,
        "seed": seed,
        "num_requests": rep.num_requests,
        "num_unserved": rep.num_unserved,
        "num_refused": sum(r.refusal is not None for r in result.records),
        "goodput": rep.goodput,
        "ttft_p50_s": rep.ttft_s[50],
        "ttft_p99_s": rep.ttft_s[99],
        "tpot_p99_s": rep.tpot_s[99],
        "node_hours": node_hours,
        "node_hours_total": sum(node_hours.values()),
        "capacity_hours": sum(h * power[t] for t, h in node_hours.items()),
        "actions": summary["actions"],
        "cold_start": summary["cold_start"],  # requests held for a first node, and how their waits ended
        "timeline": summary["timeline"] if seed == 0 else [],
        "virtual_s": result.end_s,
        "wall_s": time.perf_counter() - wall,
    }


def _mean(runs: list[dict], key: str) -> float:
    return float(np.mean([r[key] for r in runs]))


def _ratio(value: float, base: float) -> float:
    """value / base; NaN (None in the report) where either is not a finite figure or base is 0."""
    return value / base if math.isfinite(value) and math.isfinite(base) and base != 0 else math.nan


def _ci95(runs: list[dict], key: str) -> float:
    values = [r[key] for r in runs]
    if not all(math.isfinite(v) for v in values):
        return math.nan
    return 1.96 * float(np.std(values, ddof=1)) / math.sqrt(len(values)) if len(values) > 1 else 0.0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=30.0, help="virtual minutes of arrivals")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--profile", choices=sorted(PROFILES), default="ramp-spike")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--out", default=None, help="write the JSON report here too")
    p.add_argument("--costs", default="{}", help='GPU type -> cost of a node, JSON (default: all equal), e.g. '
                   '\'{"H100": 4, "A100-40GB": 1.6, "L4": 0.5, "T4": 0.7}\'')  # fmt: skip
    p.add_argument("--rules", default=",".join(RULES), help=f"comma-separated, of {RULES + ABLATIONS}")
    p.add_argument("--max-queue-per-node", type=int, default=None, help="admission's per-node queue (default 256)")
    args = p.parse_args(argv)
    costs = json.loads(args.costs)
    rules = tuple(args.rules.split(","))
    if not rules or not set(rules) <= set(RULES + ABLATIONS):
        p.error(f"--rules: each of {RULES + ABLATIONS}, got {args.rules!r}")
    cases = [(rule, seed) for seed in range(args.seeds) for rule in rules]
    with ProcessPoolExecutor(max_workers=max(args.jobs, 1)) as pool:
        n = len(cases)
        runs = list(
            pool.map(
                run_one,
                *zip(*cases, strict=True),
                [args.minutes] * n,
                [costs] * n,
                [args.profile] * n,
                [args.max_queue_per_node] * n,
            )
        )
    report = summarise(runs, costs, args.minutes, args.seeds, args.profile)
    report["max_queue_per_node"] = args.max_queue_per_node
    text = json.dumps(finite(report), indent=1)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text)
    return 0


def run_autoscale_bench(args: argparse.Namespace) -> dict:
    """`zoo bench autoscale`: the whole comparison at equal costs (``--quick``: 4 minutes of arrivals, one seed)."""
    minutes, seeds = (4.0, 1) if getattr(args, "quick", False) else (30.0, 3)
    cases = [(rule, seed) for seed in range(seeds) for rule in RULES]
    with ProcessPoolExecutor(max_workers=2) as pool:
        runs = list(pool.map(run_one, *zip(*cases, strict=True), [minutes] * len(cases), [{}] * len(cases)))
    report = finite(summarise(runs, {}, minutes, seeds))
    if not getattr(args, "json", False):
        for rule, figures in report["by_rule"].items():
            print(f"{rule:>12}: goodput {figures['goodput']:.3f}, node-hours {figures['node_hours_total']:.2f}")
    return report


def finite(value):
    """``value`` with every infinite or NaN float as None (strict JSON): a P99 past the served requests, a run that
    left requests unserved, has none."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


def summarise(
    runs: list[dict], costs: dict[str, float], minutes: float, seeds: int, profile: str = "ramp-spike"
) -> dict:
    """The report of ``runs``: per rule the means over seeds and their 95% intervals, and the ratios. A run's cost
    is its node-hours priced by ``costs`` (a type not listed, or no costs: 1 per node-hour)."""
    for run in runs:
        run["cost"] = sum(h * costs.get(t, 1.0) for t, h in run["node_hours"].items())
    capacity = pool_capacity(load_trace("conv"))
    keys = ("goodput", "ttft_p50_s", "ttft_p99_s", "tpot_p99_s", "node_hours_total", "capacity_hours", "cost")
    keys += ("num_refused",)
    by_rule = {}
    for rule in dict.fromkeys(r["rule"] for r in runs):
        mine = [r for r in runs if r["rule"] == rule]
        by_rule[rule] = {
            **{k: _mean(mine, k) for k in keys},
            **{f"{k}_ci95": _ci95(mine, k) for k in keys},
            "node_hours": {t: float(np.mean([r["node_hours"][t] for r in mine])) for t in mine[0]["node_hours"]},
            "actions": {a: float(np.mean([r["actions"][a] for r in mine])) for a in ("up", "down")},
        }
    ratios = {
        f"{rule}_vs_{base}": {k: _ratio(by_rule[rule][k], by_rule[base][k]) for k in keys}
        for rule, base in (
            ("zoo", "static"),
            ("zoo_reactive", "static"),
            ("wva", "static"),
            ("zoo", "wva"),
            ("zoo", "zoo_reactive"),
            ("zoo", "zoo_placed"),
            ("zoo_to_zero", "zoo"),
            ("zoo_to_zero", "zoo_to_zero_no_wait"),
        )
        if rule in by_rule and base in by_rule
    }
    return {
        "what": __doc__.split("\n\n")[0],
        "pool": POOL,
        "pool_capacity_req_per_s": capacity,
        "profile_name": profile,
        "profile": PROFILES[profile],
        "minutes": minutes,
        "seeds": seeds,
        "slo": dataclasses.asdict(Slo()),
        "policy": POLICY,
        "gpu_cost": costs or "equal",
        "by_rule": by_rule,
        "ratios": ratios,
        "runs": runs,
    }


if __name__ == "__main__":
    sys.exit(main())
