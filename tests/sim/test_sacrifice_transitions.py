"""scripts/sacrifice_transitions.py's counting on hand-made outcomes: per prompt-size bucket, met/missed before and
after; the requests that changed, by the GPU types they moved between; both runs' goodput."""

from __future__ import annotations

from scripts.sacrifice_transitions import bucket, transitions


def test_buckets_are_bounded_below_each_bound():
    assert [bucket(n) for n in (1, 1_999, 2_000, 11_999, 23_999, 24_000, 90_000)] == [
        "<2k", "<2k", "<6k", "<12k", "<24k", ">=24k", ">=24k",
    ]  # fmt: skip


def test_transitions_count_what_changed_and_where_it_went():
    before = {
        "a": (500, "h100-sxm", True),  # short, met both times
        "b": (15_000, "h100-sxm", True),  # long, moved to an A100 and missed: lost
        "c": (15_000, "a100-40gb", False),  # long, moved to an H100 and met: won
        "d": (30_000, "t4", False),  # missed both times
    }
    after = {
        "a": (500, "h100-sxm", True),
        "b": (15_000, "a100-40gb", False),
        "c": (15_000, "h100-sxm", True),
        "d": (30_000, "t4", False),
    }
    out = transitions(before, after)
    assert out["by_prompt_size"] == {
        "<2k": {"met->met": 1},
        "<24k": {"met->missed": 1, "missed->met": 1},
        ">=24k": {"missed->missed": 1},
    }
    assert list(out["by_prompt_size"]) == ["<2k", "<24k", ">=24k"]  # buckets in size order
    assert out["lost_by_move"] == {"<24k h100-sxm->a100-40gb": 1}
    assert out["won_by_move"] == {"<24k a100-40gb->h100-sxm": 1}
    assert out["goodput_before"] == out["goodput_after"] == 0.5
