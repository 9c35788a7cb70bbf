"""What a router reload costs (controlplane/router_reload.py): ``zoo bench router-reload [--json] [--quick]``.

Set-up as bench/controlplane_router.py's (a registry of N mixed-GPU nodes with varied load reports, prompts from
the Azure conversation trace sharing system-prompt prefixes), hardware_aware routing 200 requests first so its
prefix index and tables are warm. Then, ``num_reloads`` times, with the router's TTFT target changed each time:

    policy.reconfigured(config)          TIMED  (``rebuild_ms``: the new instance, what it carries over)
    its first decision                   TIMED  (``first_decision_ms``: its tables are built then)
    a fresh policy's first decision      TIMED  (the baseline, in the same run, on the same snapshot and request:
                                                 the same table build with nothing carried over)
    the next 50 decisions                TIMED  (``after_p50_us`` / ``after_p99_us``: back to the usual)

``first_over_fresh``: the reloaded policy's first decision over the fresh one's (about 1: a reload costs one
table build, as a start does). ``num_prefix_moves``: first decisions where the two chose differently, the reloaded
one sending a prompt to a node holding its prefix, which the fresh one (an empty prefix index) could not know: what
a restart would lose. ``num_choice_mismatches``: the same first decisions against a fresh policy given the carried
index: must be 0 (the reload changes nothing else).
"""

from __future__ import annotations

import random
import time

import numpy as np

from bench.controlplane_router import MODEL, _build_registry, _requests
from bench.stats import percentile
from controlplane.router.policies.hardware_aware import HardwareAwarePolicy
from controlplane.router.router_config import RouterConfig

WARM_DECISIONS = 200
AFTER_DECISIONS = 50


def bench_router_reload(num_nodes: int = 1024, num_reloads: int = 20, seed: int = 0) -> dict:
    rng = random.Random(seed)
    registry, _ = _build_registry(num_nodes, rng)
    requests = iter(_requests(WARM_DECISIONS + num_reloads * (AFTER_DECISIONS + 1), seed))
    policy = HardwareAwarePolicy(RouterConfig(default_model_params_b=8.0))

    def route(p: HardwareAwarePolicy, request) -> tuple[str | None, float]:
        t0 = time.perf_counter_ns()
        node_id = p.choose(request, registry.snapshot(MODEL))
        return node_id, (time.perf_counter_ns() - t0) / 1e3

    def place(request, node_id: str | None) -> None:
        if node_id is not None:
            policy.on_routed(request, node_id)
            registry.on_routed(node_id, request.request_id, request.num_prompt_tokens)

    for _ in range(WARM_DECISIONS):
        request = next(requests)
        place(request, route(policy, request)[0])
    rebuild_ms, first_ms, fresh_ms, after_us = [], [], [], []
    moves = mismatches = 0
    for k in range(num_reloads):
        config = RouterConfig(default_model_params_b=8.0, slo_ttft_s=1.0 + 0.5 * (k % 4))
        t0 = time.perf_counter_ns()
        policy = policy.reconfigured(config)
        rebuild_ms.append((time.perf_counter_ns() - t0) / 1e6)
        request = next(requests)
        fresh = HardwareAwarePolicy(config)
        if k % 2:  # alternate which of the two builds its tables first
            fresh_id, fresh_t = route(fresh, request)
            node_id, first_t = route(policy, request)
        else:
            node_id, first_t = route(policy, request)
            fresh_id, fresh_t = route(fresh, request)
        fresh.close()
        moves += node_id != fresh_id
        same = HardwareAwarePolicy(config)
        same._index = policy._index  # read only here: match() at its decision
        mismatches += same.choose(request, registry.snapshot(MODEL)) != node_id
        same.close()
        first_ms.append(first_t / 1e3)
        fresh_ms.append(fresh_t / 1e3)
        place(request, node_id)
        for _ in range(AFTER_DECISIONS):
            request = next(requests)
            node_id, t = route(policy, request)
            after_us.append(t)
            place(request, node_id)
    return {
        "num_nodes": num_nodes,
        "num_reloads": num_reloads,
        "rebuild_ms": {"p50": percentile(rebuild_ms, 50), "max": max(rebuild_ms)},
        "first_decision_ms": {"p50": percentile(first_ms, 50), "max": max(first_ms)},
        "fresh_first_decision_ms": {"p50": percentile(fresh_ms, 50), "max": max(fresh_ms)},
        "first_over_fresh": float(np.median(np.divide(first_ms, fresh_ms))),
        "num_prefix_moves": moves,
        "num_choice_mismatches": mismatches,
        "after_p50_us": percentile(after_us, 50),
        "after_p99_us": percentile(after_us, 99),
    }


def run_router_reload_bench(args) -> dict:
    """``zoo bench router-reload``: 1,024 nodes, 20 reloads (``--quick``: 128 nodes, 5)."""
    quick = getattr(args, "quick", False)
    report = bench_router_reload(128 if quick else 1024, 5 if quick else 20)
    if not getattr(args, "json", False):
        print(
            f"router reload at {report['num_nodes']} nodes, {report['num_reloads']} reloads: rebuild "
            f"{report['rebuild_ms']['p50']:.2f} ms; first decision {report['first_decision_ms']['p50']:.2f} ms vs a "
            f"fresh policy's {report['fresh_first_decision_ms']['p50']:.2f} ms (x{report['first_over_fresh']:.2f}); "
            f"then p50 {report['after_p50_us']:.1f} us, p99 {report['after_p99_us']:.1f} us"
        )
    return report
