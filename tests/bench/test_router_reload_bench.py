"""`zoo bench router-reload` (bench/router_reload.py): a reload changes no choice but what the carried prefix index
knows, and its figures are all there. Timings are reported, not asserted."""

from __future__ import annotations

import math

from bench.router_reload import bench_router_reload


def test_a_reloaded_policy_chooses_as_a_fresh_one_with_the_same_index():
    report = bench_router_reload(num_nodes=64, num_reloads=4)
    assert report["num_choice_mismatches"] == 0
    assert 0 <= report["num_prefix_moves"] <= report["num_reloads"]
    for key in ("rebuild_ms", "first_decision_ms", "fresh_first_decision_ms"):
        assert report[key]["p50"] > 0 and report[key]["max"] >= report[key]["p50"]
    assert math.isfinite(report["first_over_fresh"]) and report["after_p99_us"] >= report["after_p50_us"] > 0
