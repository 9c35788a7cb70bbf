"""scripts/tune_router.py's selection rule on hand-made rows: admissibility by the P99 bound, the smallest goodput
margin, and the fourth point (--fewest-p99-misses: with none admissible, the settings breaking fewest bounds); and
how the diagnostics and seeded grids are set up (--step-budget, --anchors-from)."""

from __future__ import annotations

import json

import pytest

from scripts.tune_router import choose

ANCHORS = {"a": {"goodput": 0.5, "p99": 3.0}, "b": {"goodput": 0.5, "p99": 3.0}}  # P99 bound: 2 s on each case


def _row(name: str, *cases: tuple[float, float]) -> dict:
    return {
        "knobs": {"name": name},
        "cases": {c: {"goodput": g, "p99": p, "p99_over_p50": 2.0} for c, (g, p) in zip(("a", "b"), cases)},
    }


def test_an_admissible_setting_beats_a_better_margin_that_breaks_a_bound():
    rows = [_row("safe", (0.55, 1.9), (0.52, 1.0)), _row("greedy", (0.9, 2.1), (0.9, 1.0))]
    assert choose(rows, ANCHORS)["knobs"]["name"] == "safe"
    assert [r["p99_bounds_broken"] for r in rows] == [0, 1] and rows[0]["admissible"] and not rows[1]["admissible"]


def test_with_none_admissible_point_two_reads_goodput_alone_and_point_four_counts_the_bounds_broken():
    rows = [_row("two", (0.6, 2.5), (0.6, 2.5)), _row("one", (0.4, 2.5), (0.55, 1.0))]
    assert choose(rows, ANCHORS)["knobs"]["name"] == "two"  # margin +0.1 against -0.1
    assert choose(rows, ANCHORS, fewest_p99_misses=True)["knobs"]["name"] == "one"
    nan = [_row("nan", (0.9, float("nan")), (0.9, 1.0)), _row("one", (0.4, 2.5), (0.55, 1.0))]
    assert choose(nan, ANCHORS, fewest_p99_misses=True)["knobs"]["name"] == "nan"  # a NaN P99 breaks its bound
    assert nan[0]["p99_bounds_broken"] == 1


def test_simulate_split_sizes_the_step_budget_to_the_slo_it_is_told(monkeypatch):
    """--step-budget as zoo sim takes it: "sarathi" sized to the TPOT SLO the router is told (a knob's, here),
    a number for every node, and None keeping the fleet file's budget."""
    import scripts.tune_router as tune_router

    seen = []

    class Captured:  # the simulator, not run: what it was given
        def __init__(self, fleet, workload, policy, router_config, seed):
            seen.append((fleet.engine.step_budget, fleet.engine.tpot_slo_s, router_config.slo_tpot_s))

        def run(self):
            return None

    monkeypatch.setattr(tune_router, "FleetSimulator", Captured)
    tune_router.simulate_split("code", "zoo", 0.8, {"slo_tpot_s": 0.05}, step_budget="sarathi")
    tune_router.simulate_split("code", "zoo", 0.8, {}, step_budget="512")
    tune_router.simulate_split("code", "zoo", 0.8, {})
    assert seen[0] == ("sarathi", 0.05, 0.05)
    assert seen[1][0] == 512
    assert seen[2][0] == tune_router.load_fleet("zoo").engine.step_budget
    args = tune_router.case_parser().parse_args(["--step-budget", "sarathi"])
    assert args.step_budget == "sarathi"
    with pytest.raises(SystemExit):  # a usage error, as zoo sim refuses it
        tune_router.case_parser().parse_args(["--step-budget", "0"])


def test_a_seeded_grid_reads_an_earlier_grids_anchors_for_its_own_seeds_and_cases(tmp_path):
    """``--seeds N --anchors-from``: the earlier file's anchors for N seeds, every case the grid runs; another seed
    count, or a case the file lacks, is refused before anything runs."""
    from scripts.tune_router import anchors_from

    best = {"goodput": 0.5, "goodput_by": "llm_d", "p99": 3.0, "p99_by": "envoy_wlr"}
    path = tmp_path / "grid.json"
    path.write_text(json.dumps({"best_fair_anchor_on_tune_3_seeds": {"a": best, "b": best}}))
    assert anchors_from(str(path), ("a",), 3) == {"a": best}
    with pytest.raises(SystemExit, match="no best_fair_anchor_on_tune_2_seeds"):
        anchors_from(str(path), ("a",), 2)
    with pytest.raises(SystemExit, match=r"\['c'\]"):
        anchors_from(str(path), ("a", "c"), 3)
