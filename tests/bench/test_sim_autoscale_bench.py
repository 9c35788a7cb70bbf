"""`zoo bench autoscale --quick`: the rules on one short profiled workload, each run accounted for."""

from __future__ import annotations

import argparse
import json

import pytest

from bench.sim_autoscale import PROFILE, RULES, run_autoscale_bench


def test_the_quick_comparison_reports_each_rule_and_its_ratios():
    report = run_autoscale_bench(argparse.Namespace(quick=True, json=True))
    json.dumps(report, allow_nan=False)  # strict JSON: unserved requests' percentiles are None, not Infinity
    assert set(report["by_rule"]) == set(RULES) and report["profile"] == [list(p) for p in PROFILE]
    assert {"zoo_vs_static", "zoo_reactive_vs_static", "wva_vs_static", "zoo_vs_wva", "zoo_vs_zoo_reactive"} == set(
        report["ratios"]
    )
    assert report["profile_name"] == "ramp-spike"
    runs = {r["rule"]: r for r in report["runs"]}
    assert len({r["num_requests"] for r in runs.values()}) == 1  # the same workload for every rule
    static = runs["static"]
    # the static pool holds its 11 nodes all along; an autoscaler starts with one per type (4) and holds at most 11
    assert static["node_hours_total"] == pytest.approx(11 * static["virtual_s"] / 3600)
    assert static["actions"] == {"up": 0, "down": 0}
    for rule in ("zoo", "zoo_reactive", "wva"):
        hours = runs[rule]["virtual_s"] / 3600
        assert 4 * hours <= runs[rule]["node_hours_total"] + 1e-9 <= 11 * hours + 1e-9
    assert runs["zoo"]["actions"]["up"] > 0  # the profile's ramp asks for nodes
