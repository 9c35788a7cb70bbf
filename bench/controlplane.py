"""`zoo bench controlplane`: router decision time per policy, router → agent hop latency against bare
pyzmq, and routed requests per second — one run, one report."""

from __future__ import annotations

import argparse
import sys

from bench.controlplane_hop import bench_hop_latency, bench_routed_throughput
from bench.controlplane_router import TARGET_P99_US, bench_router_decisions
from bench.stats import format_table


def run_controlplane_bench(args: argparse.Namespace) -> dict:
    quick = getattr(args, "quick", False)
    say = (lambda *a: print(*a, file=sys.stderr)) if args.json else print
    say("router decisions per policy ...")
    decisions = bench_router_decisions(num_decisions=500 if quick else 2000)
    say("router → agent hop latency vs bare pyzmq ...")
    hops = bench_hop_latency(num_messages=500 if quick else 2000)
    say("routed requests per second (trivial runner) ...")
    throughput = bench_routed_throughput(seconds=2.0 if quick else 5.0)
    report = {"router_decisions": decisions, "hop_latency": hops, "routed_throughput": throughput}
    if not args.json:
        _print_report(report)
    return report


def _print_report(r: dict) -> None:
    d = r["router_decisions"]
    rows = [
        [name, n, x["p50_us"], x["p99_us"], x["snapshot_p99_us"]]
        for name, by_n in d["policies"].items()
        for n, x in by_n.items()
    ]
    print(format_table(["policy", "nodes", "choose p50 µs", "choose p99 µs", "snapshot p99 µs"], rows))
    print(f"target p99 <= {TARGET_P99_US:g} µs at {max(d['node_counts'])} nodes: {d['meets_target']}")
    h = r["hop_latency"]
    print(
        f"\nhop ({h['message_bytes']} B): ours p50 {h['ours']['hop']['p50_us']:.0f} µs / p99 "
        f"{h['ours']['hop']['p99_us']:.0f} µs; bare pyzmq p50 {h['bare_pyzmq']['hop']['p50_us']:.0f} µs / p99 "
        f"{h['bare_pyzmq']['hop']['p99_us']:.0f} µs; ratio p50 {h['hop_p50_ratio']:.2f}x (target <= 1.5x)"
    )
    t = r["routed_throughput"]
    print(
        f"routed throughput: {t['requests_per_s']:.0f} req/s ({t['runner']}); control plane at "
        f"{t['controlplane_cpu_utilization']:.2f} of a core (target >= 2000 req/s)"
    )
