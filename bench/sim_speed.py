"""`zoo bench sim-speed`: the fleet simulator's speed with its fast paths — several pure decode steps as one event
(engine/multi_step.py) and a step's decode rows in bulk (engine/mixed_step.py) — side by side with the same run
stepping every step the plain way (both off), same fleet, trace, seed, process; on the conv and code traces:

    zoo sim --fleet zoo --trace {conv,code} --load 0.8 --policy hardware_aware --duration 60 --seed 0   (the runs)

Reports per side: virtual seconds simulated, wall and CPU seconds, virtual/wall ("x real time"), virtual/CPU
(the figure that survives a shared machine), the load average around the runs, and whether the two full
``--json`` reports are identical apart from the timing fields (they must be: the fast paths change no result).
Sides alternate (plain, fast, plain, ...); medians are reported. The top-level figures are conv's.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import time
from contextlib import contextmanager

import sim.des
from agent.node_core import NodeCore
from sim.cli import add_sim_args, admission_config, build_workload, scaled
from sim.des import FleetSimulator, default_router_config
from sim.fleet import load_fleet
from sim.report import summarize

TIMING_KEYS = ("wall_s", "speedup")


TRACES = ("conv", "code")


@contextmanager
def _fast_path_off():
    plan, mixed = NodeCore.plan_decode_steps, sim.des.MIXED_STEPS
    NodeCore.plan_decode_steps = lambda self, *args, **kwargs: None
    sim.des.MIXED_STEPS = False
    try:
        yield
    finally:
        NodeCore.plan_decode_steps = plan
        sim.des.MIXED_STEPS = mixed


def _args(duration_s: float, trace: str = "conv") -> argparse.Namespace:
    """``zoo sim``'s own arguments (its defaults: admission limits, report interval, drain limit) for the run."""
    parser = argparse.ArgumentParser()
    add_sim_args(parser)
    argv = ["--fleet", "zoo", "--trace", trace, "--load", "0.8", "--policy", "hardware_aware"]
    return parser.parse_args([*argv, "--duration", str(duration_s), "--seed", "0"])


def _one(fleet, workload, args, fast: bool) -> tuple[dict, dict]:
    sim = FleetSimulator(
        fleet,
        workload,
        "hardware_aware",
        router_config=dataclasses.replace(
            default_router_config(fleet, "hardware_aware", args.seed),
            slo_ttft_s=args.slo_ttft,
            slo_tpot_s=args.slo_tpot,
        ),
        admission=admission_config(args),
        seed=args.seed,
        report_interval_s=args.report_interval,
        drain_limit_s=args.drain_limit,
    )
    cpu = time.process_time()
    if fast:
        result = sim.run()
    else:
        with _fast_path_off():
            result = sim.run()
    cpu_s = time.process_time() - cpu
    report = {k: v for k, v in dataclasses.asdict(summarize(result)).items() if k not in TIMING_KEYS}
    timing = {
        "virtual_s": result.end_s,
        "wall_s": result.wall_s,
        "cpu_s": cpu_s,
        "x_real_time": result.end_s / result.wall_s,
        "virtual_per_cpu_s": result.end_s / cpu_s,
        "num_events": result.num_events,
    }
    return report, timing


def _trace_bench(trace: str, duration_s: float, rounds: int) -> dict:
    sim_args = _args(duration_s, trace)
    fleet = load_fleet(sim_args.fleet)
    workload, _ = scaled(build_workload(sim_args, fleet), fleet, sim_args.load, sim_args)
    sides: dict[str, list[dict]] = {"plain": [], "fast": []}
    reports: dict[str, dict] = {}
    load_before = os.getloadavg()[0]
    for _ in range(rounds):
        for name in ("plain", "fast"):
            report, timing = _one(fleet, workload, sim_args, fast=name == "fast")
            sides[name].append(timing)
            reports.setdefault(name, report)
    medians = {name: {k: statistics.median(t[k] for t in runs) for k in runs[0]} for name, runs in sides.items()}
    return {
        "run": f"zoo sim --fleet zoo --trace {trace} --load 0.8 --policy hardware_aware --duration {duration_s:g}",
        "num_requests": len(workload.requests),
        "rounds": rounds,
        "plain": medians["plain"],
        "fast": medians["fast"],
        "speedup_wall": medians["plain"]["wall_s"] / medians["fast"]["wall_s"],
        "speedup_cpu": medians["plain"]["cpu_s"] / medians["fast"]["cpu_s"],
        "reports_identical": reports["plain"] == reports["fast"],
        "load_average_1min": [load_before, os.getloadavg()[0]],  # before, after: a shared machine's share of it
    }


def run_sim_speed_bench(args: argparse.Namespace) -> dict:
    quick = getattr(args, "quick", False)
    duration_s, rounds = (10.0, 1) if quick else (60.0, 2)
    by_trace = {trace: _trace_bench(trace, duration_s, rounds) for trace in TRACES}
    return {**by_trace["conv"], "traces": by_trace}
