"""scripts/goodput_diag.py's per-window figures on hand-made records: the requests, the offered prefill work, goodput,
and per GPU type the share of the window's requests sent there and the share of those that met the TPOT target."""

from __future__ import annotations

from dataclasses import dataclass

from scripts.goodput_diag import by_window
from sim.report import Slo


@dataclass
class _Rec:
    arrival_s: float
    num_prompt_tokens: int
    ttft_s: float
    tpot_s: float
    node_id: str | None


def test_windows_split_by_gpu_type_and_tpot():
    slo = Slo(2.0, 0.05)
    records = [
        _Rec(0.0, 100, 0.5, 0.04, "h0"),  # window 0: met
        _Rec(1.0, 300, 0.5, 0.09, "h0"),  # window 0: TPOT missed on the H100
        _Rec(2.0, 100, 3.0, 0.04, "a0"),  # window 0: TTFT missed, TPOT met on the A100
        _Rec(10.0, 400, 0.5, 0.04, "a0"),  # window 1: met
        _Rec(11.0, 100, float("inf"), float("inf"), None),  # window 1: refused
    ]
    profile_of = {"h0": "h100-sxm", "a0": "a100-40gb"}
    rows = by_window(records, slo, 10.0, profile_of)
    assert [(r["window"], r["requests"], r["goodput"]) for r in rows] == [(0, 3, 0.333), (1, 2, 0.5)]
    assert [r["work_over_mean"] for r in rows] == [1.0, 1.0]  # 500 prompt tokens in each
    assert rows[0]["gpu_share"] == {"a100-40gb": 0.333, "h100-sxm": 0.667}
    assert rows[0]["tpot_ok_by_gpu"] == {"a100-40gb": 1.0, "h100-sxm": 0.5}
    assert rows[1]["gpu_share"] == {"a100-40gb": 0.5, "refused": 0.5}
    assert rows[1]["tpot_ok_by_gpu"] == {"a100-40gb": 1.0, "refused": 0.0}


def test_without_profiles_the_windows_are_as_before():
    rows = by_window([_Rec(0.0, 10, 0.1, 0.01, "n")], Slo(1.0, 0.1), 5.0)
    assert rows == [{"window": 0, "requests": 1, "work_over_mean": 1.0, "goodput": 1.0}]
