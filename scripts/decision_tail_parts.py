"""Where hardware_aware's slowest decisions spend their time, part by part: ``python scripts/decision_tail_parts.py``.

The decision benchmark's set-up (bench/controlplane_router.py: 1,024 nodes, the same reports, requests and in-flight
bookkeeping) with each part of ``choose`` timed on its own: the table's sync with the registry's changes, the prefix
index match, the compiled kernel, the lost-cause check, and the rest (the Python around them). For the slowest 1% of
decisions and the fastest half, each part's mean. A tail made by a code path shows as one part far above its median
there; a tail made by the host (a cold cache, a slower core, another tenant) shows as every part slower alike.
Prints JSON.
"""

from __future__ import annotations

import gc
import json
import random
import sys
import time
from collections import defaultdict, deque
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import bench.controlplane_router as bench
from controlplane.router import prefix_index
from controlplane.router.policies import make_policy, node_table
from controlplane.router.router_config import RouterConfig

PARTS = ("sync", "match", "kernel", "lost")


def _timed(parts: dict, key: str, function):
    def timed(*args, **kwargs):
        t0 = time.perf_counter_ns()
        result = function(*args, **kwargs)
        parts[key] += time.perf_counter_ns() - t0
        return result

    return timed


def measure(num_nodes: int = 1024, num_decisions: int = 6000, seed: int = 0) -> dict:
    parts: dict[str, int] = defaultdict(int)
    sync, match = node_table.NodeTable.sync, prefix_index.PrefixIndex.match
    node_table.NodeTable.sync = _timed(parts, "sync", sync)
    prefix_index.PrefixIndex.match = _timed(parts, "match", match)
    try:
        rng = random.Random(seed)
        registry, node_ids = bench._build_registry(num_nodes, rng)
        policy = make_policy("hardware_aware", RouterConfig(policy="hardware_aware", default_model_params_b=8.0))
        policy._kernel._kernel = _timed(parts, "kernel", policy._kernel._kernel)
        policy._lost = _timed(parts, "lost", policy._lost)
        inflight: deque = deque()
        prefilling: deque = deque()
        debt, rows = 0.0, []
        gc.collect()
        gc.freeze()
        for k, request in enumerate(bench._requests(num_decisions + bench.NUM_WARMUP, seed)):
            debt += num_nodes / 400
            while debt >= 1:
                registry.report(bench._report(rng, rng.choice(node_ids)))
                debt -= 1
            snapshot = registry.snapshot(bench.MODEL)
            parts.clear()
            t0 = time.perf_counter_ns()
            node_id = policy.choose(request, snapshot)
            total = time.perf_counter_ns() - t0
            if k >= bench.NUM_WARMUP:
                rows.append([total, *(parts[p] for p in PARTS)])
            policy.on_routed(request, node_id)
            registry.on_routed(node_id, request.request_id, request.num_prompt_tokens)
            inflight.append((node_id, request.request_id))
            prefilling.append((node_id, request.request_id))
            while len(prefilling) > num_nodes:
                registry.on_first_token(*prefilling.popleft())
            while len(inflight) > 8 * num_nodes:
                registry.on_finished(*inflight.popleft())
        gc.unfreeze()
    finally:
        node_table.NodeTable.sync, prefix_index.PrefixIndex.match = sync, match
    a = np.array(rows, dtype=float) / 1e3  # µs
    a = np.column_stack([a, a[:, 0] - a[:, 1:].sum(axis=1)])  # the rest
    total = a[:, 0]
    slow, fast = total >= np.percentile(total, 99), total <= np.percentile(total, 50)
    names = ("total", *PARTS, "rest")
    return {
        "num_nodes": num_nodes,
        "num_decisions": num_decisions,
        "parts_us": {
            name: {
                "p50": float(np.percentile(a[:, i], 50)),
                "p99": float(np.percentile(a[:, i], 99)),
                "mean_in_slowest_1pct": float(a[slow, i].mean()),
                "mean_in_fastest_half": float(a[fast, i].mean()),
                "slow_over_fast": float(a[slow, i].mean() / max(a[fast, i].mean(), 1e-9)),
            }
            for i, name in enumerate(names)
        },
    }


if __name__ == "__main__":
    print(json.dumps(measure(), indent=1))
