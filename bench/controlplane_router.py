"""Router decision time per policy: p50/p99 of ``Policy.choose()`` with N registered nodes.

Set-up per node count N: a ClusterRegistry on a ManualClock with N nodes of mixed GPUs (H200 … T4, one
model), each with a varied initial load report (running, waiting, queued prefill, decode batch, measured
rates on 3 of 4 nodes). Then ``num_decisions`` requests, each one:

    ~N/400 random nodes send a new load report      (5 reports/s per node at 2,000 requests/s)
    snapshot = registry.snapshot(model)             timed apart (``snapshot_us``), not part of choose()
    node = policy.choose(request, snapshot)         TIMED
    policy.on_routed / registry.on_routed            in-flight bookkeeping, as the control plane does
    older requests get their first token / finish    (in-flight kept near 8 per node)

The registry's bookkeeping (reports, routed, first token, finished) is CPU-timed too, per decision
(``registry_update_cpu_us_per_decision``): it includes the work a policy does as the registry logs new
views (hardware_aware derives those nodes' rows then, router/node_changes.py), which left the decision.

Requests: prompt and output lengths from the Azure 2023 conversation trace (unscaled, clamped to
[16, 8000] / [1, 2000]; uniform random when the trace is absent); prompts share one of 64 "system
prompt" prefixes of 4-64 blocks, followed by unique blocks. The first 100 decisions (tables built from
scratch) are warm-up and not counted. Garbage collection stays on, with the set-up's objects frozen
(observe/gc_pauses.py ``settle_heap``, as the control plane and agents do once started) so a full collection does not
walk the registry. Target: p99 <= 50 µs at 1,024 nodes (wall clock, ``p50_us``/``p99_us``). The
thread's CPU time per decision (``cpu_p50_us``/``cpu_p99_us``) is reported too: on a shared host it
excludes the time other processes held the core (compare the two before trusting a wall-clock p99).

The policy alone first: the headline figures time the policy as a control plane runs it, with only the
registry's bookkeeping between two decisions. Then, in the same run, the same decisions again with the
comparisons below timed beside it; the policy's own times from that pass are under ``interleaved``. They are
not the headline because the comparisons' work (~350 µs of two other policies over their own 1,024-node tables,
just before every other decision) evicts the decision's data from the caches: measured on hardware_aware at
1,024 nodes (2026-12-04), the decisions timed right after them had a p50 ~20% and a p99 up to 2x those timed
before them.

Baseline in the same run: a policy with an entry in BASELINES (hardware_aware: its decision before it was
made fast, bench/hardware_aware_baseline.py) has that baseline timed on the same snapshots, the two called
in alternating order, and reported under ``baseline`` with the ratios new/old (``ratio_p50``,
``ratio_p99``, ``ratio_cpu_p50``, ``ratio_cpu_p99``: both from the interleaved pass, so under the same
conditions) and ``num_choice_mismatches``: decisions where the two chose different nodes (must be 0: the fast
path may not change a choice). Requests go where the policy under test sends them (the same in both passes).

``--knobs`` (JSON): RouterConfig fields set for every policy timed (e.g. a knob that is off by default, to time
its path: ``{"slo_sacrifice_weight": 10, "slo_ttft_s": 0.01}`` makes every request a lost cause).

hardware_aware also reports ``kernel`` (the implementation that decided: "numba", the compiled loop of
controlplane/router/policies/cost_kernel.py, or "numpy") and times its numpy path on the same snapshots
(``numpy_path``: its times, ``numpy_path_ratio_*`` kernel/numpy, ``numpy_path_num_choice_mismatches``).

The host's own tail, in the same run: right after each timed decision the same fixed work (``_reference_work``:
a Python loop over 256 floats and two numpy passes over 1,024, about a decision's mix and size) is timed too, and
reported as ``host_reference`` (its p50/p99 and ``p99_over_p50``) beside the decision's ``p99_over_p50``. That work
never changes, so its p99 above its p50 is what this host adds to anything of that size (timer interrupts, another
tenant on the core, frequency changes): a decision p99/p50 near it says the decision's tail is the host's.
``host_stalls`` (bench/host_stalls.py, probed before and after the policies) counts the host's own stalls, gaps
the guest does not see (no context switch, no steal time), and ``host_stall_hit_share_expected`` is the share of
decisions of the p50's length one would land in: above 1%, the p99 measures a decision plus a stall.

On a shared host a decision that the scheduler preempts (an involuntary context switch of the thread, Linux
``getrusage(RUSAGE_THREAD)``, read just outside the timed call) comes back to cold caches: its wall and CPU
times are those of the host, not of the policy. ``num_preempted_decisions`` counts them, and
``unpreempted`` holds the percentiles of the others (a switch between the reading and the clock read counts
as a preemption too, so the split errs towards leaving decisions out); the headline figures keep them all.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import resource
import sys
import time
from collections import deque

import numpy as np

from backends.gpu_table import gpu_profile, power_score
from bench.hardware_aware_baseline import HardwareAwareBaseline
from bench.host_stalls import expected_hit_share, probe_host_stalls
from bench.stats import format_table, percentile
from controlplane.registry import ClusterRegistry
from controlplane.router.policies import POLICIES, make_policy
from controlplane.router.policies.hardware_aware import HardwareAwarePolicy
from controlplane.router.policy import RouteRequest
from controlplane.router.router_config import RouterConfig
from engine.clock import ManualClock
from observe.gc_pauses import settle_heap
from sim.router_knobs import parse_router_knobs
from transport.messages import KVInfo, LoadReport, NodeHello

TARGET_P99_US = 50.0
MODEL = "bench-model"
BLOCK_SIZE = 16
NUM_DEVICE_BLOCKS = 8192
NUM_WARMUP = 100
BASELINES = {"hardware_aware": HardwareAwareBaseline}  # policy -> its slow reference, timed beside it
# policy -> the same policy on its numpy path (no compiled kernel), timed beside it too
NUMPY_PATHS = {"hardware_aware": lambda config: HardwareAwarePolicy(config, use_kernel=False)}
GPUS = ("h200", "h100-sxm", "h100-pcie", "a100-80gb", "a100-40gb", "l40s", "l4", "a10", "t4")


_REFERENCE_FLOATS = tuple(float(i) for i in range(256))
_REFERENCE_ARRAY = np.arange(1024.0)
_REFERENCE_OUT = np.empty(1024)


def _reference_work() -> float:
    """The same work on every call (the host-tail reference, see the module docstring)."""
    total = 0.0
    for x in _REFERENCE_FLOATS:
        total += x
    np.multiply(_REFERENCE_ARRAY, 1.5, out=_REFERENCE_OUT)
    return total + float(np.minimum(_REFERENCE_OUT, 3.0, out=_REFERENCE_OUT).sum())


def _involuntary_switches() -> int:
    """The calling thread's involuntary context switches so far (0 where the OS does not say)."""
    who = getattr(resource, "RUSAGE_THREAD", None)
    return 0 if who is None else resource.getrusage(who).ru_nivcsw


def _lengths(num: int, seed: int) -> list[tuple[int, int]]:
    try:
        from bench.workload import LengthScale, sample_lengths

        scale = LengthScale(prompt_div=1, output_div=1, min_prompt=16, max_prompt=8000, min_output=1, max_output=2000)
        return sample_lengths(num, scale, seed)
    except FileNotFoundError:
        rng = random.Random(seed)
        return [(rng.randrange(16, 4000), rng.randrange(1, 500)) for _ in range(num)]


def _report(rng: random.Random, node_id: str) -> LoadReport:
    running = rng.randrange(0, 64)
    measured = rng.random() < 0.75
    free = rng.randrange(0, NUM_DEVICE_BLOCKS)
    return LoadReport(
        node_id=node_id,
        num_running=running,
        num_waiting=rng.randrange(0, 16),
        num_swapped=1 if rng.random() < 0.05 else 0,
        kv_usage=1 - free / NUM_DEVICE_BLOCKS,
        num_free_device_blocks=free,
        queued_prefill_tokens=rng.randrange(0, 20_000),
        decode_batch_size=running,
        recent_step_ms=[],
        prefill_tok_per_s=rng.uniform(2_000, 60_000) if measured else 0.0,
        decode_step_ms=rng.uniform(8, 80) if measured else 0.0,
        num_preemptions_total=0,
        num_requests_finished_total=0,
        prefix_cache_hit_rate=0.0,
    )


def _build_registry(num_nodes: int, rng: random.Random) -> tuple[ClusterRegistry, list[str]]:
    registry = ClusterRegistry(ManualClock(), heartbeat_timeout_s=3.0)
    node_ids = [f"node-{i:04d}" for i in range(num_nodes)]
    for i, node_id in enumerate(node_ids):
        hw = gpu_profile(GPUS[i % len(GPUS)])
        registry.join(
            NodeHello(
                node_id=node_id,
                model=MODEL,
                backend="sim",
                hardware=hw,
                kv=KVInfo(NUM_DEVICE_BLOCKS, 0, BLOCK_SIZE, 0),
                max_model_len=rng.choice([4096, 8192, 32768]),
                power_score=power_score(hw),
            )
        )
        registry.report(_report(rng, node_id))
    return registry, node_ids


def _requests(num: int, seed: int) -> list[RouteRequest]:
    rng = random.Random(seed)
    prefixes = [tuple(rng.getrandbits(63) for _ in range(rng.randrange(4, 65))) for _ in range(64)]
    out = []
    for i, (num_prompt_tokens, max_tokens) in enumerate(_lengths(num, seed)):
        num_blocks = num_prompt_tokens // BLOCK_SIZE
        prefix = rng.choice(prefixes)[:num_blocks]
        chain = prefix + tuple(rng.getrandbits(63) for _ in range(num_blocks - len(prefix)))
        out.append(RouteRequest(f"req-{i}", MODEL, num_prompt_tokens, max_tokens, chain))
    return out


def _bench_policy(policy_name: str, num_nodes: int, num_decisions: int, seed: int, knobs: dict | None = None) -> dict:
    """The policy alone (the headline figures), then, where it has a baseline or a numpy path, the same decisions
    again with those timed beside it (``interleaved``: its times there; the ratios and mismatch counts)."""
    result = _bench_one(policy_name, num_nodes, num_decisions, seed, knobs, compare=False)
    if policy_name not in BASELINES and policy_name not in NUMPY_PATHS:
        return result
    paired = _bench_one(policy_name, num_nodes, num_decisions, seed, knobs, compare=True)
    result["interleaved"] = {key: paired[key] for key in (*_TIMES, "host_reference", "num_preempted_decisions")}
    for key, value in paired.items():
        if key.startswith(("baseline", "ratio_", "num_choice", "kernel", "numpy_path")):
            result[key] = value
    return result


_TIMES = ("p50_us", "p99_us", "p99_over_p50", "max_us", "cpu_p50_us", "cpu_p99_us")  # _decision_times' keys


def _bench_one(
    policy_name: str, num_nodes: int, num_decisions: int, seed: int, knobs: dict | None = None, compare: bool = True
) -> dict:
    """``compare``: time the policy's baseline and numpy path on the same snapshots too (else the policy alone)."""
    rng = random.Random(seed)
    registry, node_ids = _build_registry(num_nodes, rng)
    config = RouterConfig(policy=policy_name, default_model_params_b=8.0, **(knobs or {}))
    policy = make_policy(policy_name, config)
    baseline = BASELINES[policy_name](config) if compare and policy_name in BASELINES else None
    numpy_path = NUMPY_PATHS[policy_name](config) if compare and policy_name in NUMPY_PATHS else None
    numpy_ns: list[int] = []
    numpy_cpu_ns: list[int] = []
    num_numpy_mismatches = 0
    base_ns: list[int] = []
    base_cpu_ns: list[int] = []
    num_mismatches = 0
    requests = _requests(num_decisions + NUM_WARMUP, seed)
    reports_per_decision = num_nodes / 400.0
    inflight: deque[tuple[str, str]] = deque()
    prefilling: deque[tuple[str, str]] = deque()
    max_inflight = 8 * num_nodes
    choose_ns: list[int] = []
    choose_cpu_ns: list[int] = []
    reference_ns: list[int] = []  # the fixed reference work, timed right after each decision
    reference_cpu_ns: list[int] = []
    snapshot_ns: list[int] = []
    preempted: list[bool] = []
    num_none = 0
    perf, cpu = time.perf_counter_ns, time.thread_time_ns
    report_debt = 0.0
    settle_heap()
    update_cpu_ns = 0  # the registry's bookkeeping (reports, routed, first token, finished), timed decisions
    for k, request in enumerate(requests):
        report_debt += reports_per_decision
        new_reports = []
        while report_debt >= 1.0:
            new_reports.append(_report(rng, rng.choice(node_ids)))
            report_debt -= 1.0
        c0 = cpu()
        for report in new_reports:
            registry.report(report)
        if k >= NUM_WARMUP:
            update_cpu_ns += cpu() - c0
        t0 = perf()
        snapshot = registry.snapshot(MODEL)
        t_snapshot = perf() - t0
        if numpy_path is not None and k % 2:
            c5, t5 = cpu(), perf()
            numpy_id = numpy_path.choose(request, snapshot)
            t6, c6 = perf(), cpu()
        if baseline is not None and k % 2:  # alternate which of the two runs first
            c3, t3 = cpu(), perf()
            base_id = baseline.choose(request, snapshot)
            t4, c4 = perf(), cpu()
        switches = _involuntary_switches()
        c1, t1 = cpu(), perf()
        node_id = policy.choose(request, snapshot)
        t2, c2 = perf(), cpu()
        switched = _involuntary_switches() != switches
        c7, t7 = cpu(), perf()
        _reference_work()
        t8, c8 = perf(), cpu()
        if baseline is not None and not k % 2:
            c3, t3 = cpu(), perf()
            base_id = baseline.choose(request, snapshot)
            t4, c4 = perf(), cpu()
        if numpy_path is not None and not k % 2:
            c5, t5 = cpu(), perf()
            numpy_id = numpy_path.choose(request, snapshot)
            t6, c6 = perf(), cpu()
        if k >= NUM_WARMUP:
            snapshot_ns.append(t_snapshot)
            choose_ns.append(t2 - t1)
            choose_cpu_ns.append(c2 - c1)
            reference_ns.append(t8 - t7)
            reference_cpu_ns.append(c8 - c7)
            preempted.append(switched)
            if baseline is not None:
                base_ns.append(t4 - t3)
                base_cpu_ns.append(c4 - c3)
            if numpy_path is not None:
                numpy_ns.append(t6 - t5)
                numpy_cpu_ns.append(c6 - c5)
        if numpy_path is not None:
            num_numpy_mismatches += numpy_id != node_id
            if node_id is not None:
                numpy_path.on_routed(request, node_id)
        if baseline is not None:
            num_mismatches += base_id != node_id
            if node_id is not None:
                baseline.on_routed(request, node_id)
        if node_id is None:
            num_none += 1
            continue
        policy.on_routed(request, node_id)
        c0 = cpu()
        registry.on_routed(node_id, request.request_id, request.num_prompt_tokens)
        inflight.append((node_id, request.request_id))
        prefilling.append((node_id, request.request_id))
        while len(prefilling) > num_nodes:
            registry.on_first_token(*prefilling.popleft())
        while len(inflight) > max_inflight:
            registry.on_finished(*inflight.popleft())
        if k >= NUM_WARMUP:
            update_cpu_ns += cpu() - c0
    gc.unfreeze()
    result = _decision_times(choose_ns, choose_cpu_ns)
    result.update(
        host_reference=_decision_times(reference_ns, reference_cpu_ns),
        snapshot_p50_us=percentile(snapshot_ns, 50) / 1e3,
        snapshot_p99_us=percentile(snapshot_ns, 99) / 1e3,
        num_unrouted=num_none,
        # includes what a policy does as the registry logs new views (hardware_aware derives their rows then)
        registry_update_cpu_us_per_decision=update_cpu_ns / max(len(choose_ns), 1) / 1e3,
        num_preempted_decisions=sum(preempted),
    )
    kept = [k for k, was in enumerate(preempted) if not was]
    if kept:
        result["unpreempted"] = _decision_times([choose_ns[k] for k in kept], [choose_cpu_ns[k] for k in kept])
    if baseline is not None:
        old = result["baseline"] = _decision_times(base_ns, base_cpu_ns)
        for key in ("p50_us", "p99_us", "cpu_p50_us", "cpu_p99_us"):
            result[f"ratio_{key[:-3]}"] = result[key] / old[key]
        result["num_choice_mismatches"] = num_mismatches
    if numpy_path is not None:
        result["kernel"] = policy.kernel_name
        numpy_times = result["numpy_path"] = _decision_times(numpy_ns, numpy_cpu_ns)
        for key in ("p50_us", "p99_us", "cpu_p50_us", "cpu_p99_us"):
            result[f"numpy_path_ratio_{key[:-3]}"] = result[key] / numpy_times[key]
        result["numpy_path_num_choice_mismatches"] = num_numpy_mismatches
    return result


def _decision_times(wall_ns: list[int], cpu_ns: list[int]) -> dict:
    p50_us, p99_us = percentile(wall_ns, 50) / 1e3, percentile(wall_ns, 99) / 1e3
    return {
        "p50_us": p50_us,
        "p99_us": p99_us,
        "p99_over_p50": p99_us / p50_us,
        "max_us": max(wall_ns) / 1e3,
        "cpu_p50_us": percentile(cpu_ns, 50) / 1e3,
        "cpu_p99_us": percentile(cpu_ns, 99) / 1e3,
    }


def bench_router_decisions(
    node_counts: tuple[int, ...] = (8, 64, 512, 1024),
    num_decisions: int = 2000,
    policies: tuple[str, ...] | None = None,
    seed: int = 0,
    knobs: dict | None = None,
) -> dict:
    """{"policies": {name: {str(N): {p50_us, p99_us, max_us, cpu_p50_us, cpu_p99_us, snapshot_p50_us,
    snapshot_p99_us, num_unrouted[, baseline, ratio_*, num_choice_mismatches]}}}, "target_p99_us": 50.0,
    "meets_target": {name: bool at the largest N}, ...}."""
    names = tuple(sorted(POLICIES)) if policies is None else policies
    results: dict[str, dict[str, dict]] = {}
    stalls_before = probe_host_stalls()
    for name in names:
        results[name] = {str(n): _bench_policy(name, n, num_decisions, seed, knobs) for n in node_counts}
    stalls = _pooled_stalls(stalls_before, probe_host_stalls())
    largest = str(max(node_counts))
    for by_n in results.values():  # how often the host alone would put a stall inside a decision of its p50
        for r in by_n.values():
            r["host_stall_hit_share_expected"] = expected_hit_share(stalls["stalls_per_ms"], r["p50_us"])
    return {
        "policies": results,
        "node_counts": list(node_counts),
        "num_decisions": num_decisions,
        "num_warmup_decisions": NUM_WARMUP,
        "target_p99_us": TARGET_P99_US,
        "meets_target": {name: results[name][largest]["p99_us"] <= TARGET_P99_US for name in names},
        "python": sys.version.split()[0],
        # a shared host's load skews wall-clock (and, less, CPU) percentiles: compare ratios in one run
        "host_cpus": os.cpu_count(),
        "host_load_average_1m": os.getloadavg()[0],
        "host_stalls": stalls,  # bench/host_stalls.py: probed before and after the policies, pooled
    }


def _pooled_stalls(before: dict, after: dict) -> dict:
    """The two probes' counts pooled (rates and shares over their whole time; percentiles: the worse of the two)."""
    duration_s = before["duration_s"] + after["duration_s"]
    num = before["num_stalls"] + after["num_stalls"]
    return {
        "duration_s": duration_s,
        "threshold_us": before["threshold_us"],
        "num_stalls": num,
        "stalls_per_ms": num / (duration_s * 1e3),
        "stalled_share": (before["stalled_share"] * before["duration_s"] + after["stalled_share"] * after["duration_s"])
        / duration_s,
        "stall_p50_us": max(before["stall_p50_us"], after["stall_p50_us"]),
        "stall_p99_us": max(before["stall_p99_us"], after["stall_p99_us"]),
        "stall_max_us": max(before["stall_max_us"], after["stall_max_us"]),
        "probes": [before, after],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--decisions", type=int, default=2000)
    parser.add_argument("--nodes", type=int, nargs="+", default=[8, 64, 512, 1024])
    parser.add_argument("--policies", nargs="+", default=None, help="policy names (default: all)")
    parser.add_argument("--knobs", default=None, help="JSON: RouterConfig fields to set (default: its defaults)")
    args = parser.parse_args(argv)
    try:  # checked as zoo sim --router-knobs checks them (the SLO may be set here: a lost cause on demand)
        knobs = parse_router_knobs(args.knobs, "--knobs", frozenset({"policy"})) or None
    except ValueError as e:
        parser.error(str(e))
    result = bench_router_decisions(
        tuple(args.nodes), args.decisions, None if args.policies is None else tuple(args.policies), knobs=knobs
    )
    result["knobs"] = knobs or {}
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    rows = []
    for name, by_n in result["policies"].items():
        for n, r in by_n.items():
            rows.append(
                [name, n, r["p50_us"], r["p99_us"], r["max_us"], r["cpu_p50_us"], r["cpu_p99_us"], r["snapshot_p99_us"]]
            )
            if "interleaved" in r:
                b = r["interleaved"]
                rows.append(["  amid the comparisons", n, b["p50_us"], b["p99_us"], b["max_us"], b["cpu_p50_us"],
                             b["cpu_p99_us"], ""])  # fmt: skip
            if "baseline" in r:
                b = r["baseline"]
                ratios = f"ratio new/old p50 {r['ratio_p50']:.2f} p99 {r['ratio_p99']:.2f}"
                rows.append([f"  baseline ({ratios})", n, b["p50_us"], b["p99_us"], b["max_us"], b["cpu_p50_us"],
                             b["cpu_p99_us"], r["num_choice_mismatches"]])  # fmt: skip
            if "numpy_path" in r:
                b = r["numpy_path"]
                ratios = f"{r['kernel']}/numpy p50 {r['numpy_path_ratio_p50']:.2f} p99 {r['numpy_path_ratio_p99']:.2f}"
                rows.append([f"  numpy path ({ratios})", n, b["p50_us"], b["p99_us"], b["max_us"], b["cpu_p50_us"],
                             b["cpu_p99_us"], r["numpy_path_num_choice_mismatches"]])  # fmt: skip
    headers = ["policy", "nodes", "choose p50 µs", "p99 µs", "max µs", "cpu p50 µs", "cpu p99 µs", "snapshot p99 µs"]
    # a baseline row's last column is the number of decisions where it chose another node (must be 0)
    print(format_table(headers, rows))
    for name, by_n in result["policies"].items():
        for n, r in by_n.items():
            ref = r["host_reference"]
            print(
                f"{name} at {n} nodes: decision p99/p50 {r['p99_over_p50']:.2f}; the host's, for the same fixed work "
                f"after each decision: p50 {ref['p50_us']:.1f} µs, p99 {ref['p99_us']:.1f} µs, p99/p50 "
                f"{ref['p99_over_p50']:.2f}; the host's stalls would land in "
                f"{100 * r['host_stall_hit_share_expected']:.1f}% of decisions of the p50's length"
            )
    stalls = result["host_stalls"]
    print(
        f"host stalls (> {stalls['threshold_us']:g} µs gaps in a clock-reading loop, {stalls['duration_s']:.1f} s): "
        f"{stalls['stalls_per_ms']:.2f} per ms, {100 * stalls['stalled_share']:.1f}% of the time, p50 "
        f"{stalls['stall_p50_us']:.1f} µs, p99 {stalls['stall_p99_us']:.1f} µs"
    )
    print(f"target: p99 <= {TARGET_P99_US:g} µs at {max(args.nodes)} nodes: {result['meets_target']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
