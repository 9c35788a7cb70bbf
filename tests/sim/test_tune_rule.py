"""scripts/tune_router.py's selection rule on hand-made rows: admissibility by the P99 bound, the smallest goodput
margin, and the fourth point (--fewest-p99-misses: with none admissible, the settings breaking fewest bounds)."""

from __future__ import annotations

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
