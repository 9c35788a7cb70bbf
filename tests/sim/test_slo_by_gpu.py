"""Where the SLO is met, per GPU type: shares of each type's requests, and their parts of the goodput."""

from __future__ import annotations

import argparse
import json

import pytest

from sim.cli import add_sim_args, run_sim
from sim.des import NodeResult, RequestRecord, SimResult
from sim.report import Slo, aggregate, format_table, summarize, to_jsonable
from sim.slo_by_gpu import UNPLACED, format_slo_by_gpu, mean_slo_by_gpu, slo_by_gpu


def _record(i: int, node: str | None, ttft_s: float | None, tpot_s: float | None) -> RequestRecord:
    r = RequestRecord(f"r{i}", "c", 0.0, 100, 11, node)
    if ttft_s is not None:
        r.first_token_s = ttft_s
        r.num_output_tokens = 11
        if tpot_s is not None:
            r.finish_s = ttft_s + 10 * tpot_s
    return r


def _node(node_id: str, profile: str) -> NodeResult:
    return NodeResult(node_id, "c", profile, 1, 10, 5.0, 0, 0, 0, 0, 0.0, 1)


def _result() -> SimResult:
    records = [
        _record(0, "h0", 0.5, 0.02),  # h100: both
        _record(1, "h0", 0.5, 0.20),  # h100: TTFT only
        _record(2, "h1", 3.0, 0.02),  # h100 (the other node): TPOT only
        _record(3, "l0", 0.5, 0.20),  # l4: TTFT only
        _record(4, "l0", 0.5, None),  # l4: unfinished (drain limit): TTFT met, TPOT not
        _record(5, None, None, None),  # refused
    ]
    nodes = [_node("h0", "h100"), _node("h1", "h100"), _node("l0", "l4")]
    return SimResult("p", "w", 1.0, records, nodes, 20.0, 1.0, 2.0, 0, True)


def test_shares_per_gpu_type_and_their_parts_sum_to_the_goodput():
    by_gpu = slo_by_gpu(_result(), slo_ttft_s=1.0, slo_tpot_s=0.05)
    assert list(by_gpu) == ["h100", "l4", UNPLACED]
    h100 = by_gpu["h100"]
    assert h100["requests"] == 3
    assert h100["ttft_met"] == pytest.approx(2 / 3)
    assert h100["tpot_met"] == pytest.approx(2 / 3)
    assert h100["both_met"] == pytest.approx(1 / 3)
    assert h100["of_all"] == pytest.approx(1 / 6)
    assert by_gpu["l4"] == {"requests": 2, "ttft_met": 1.0, "tpot_met": 0.0, "both_met": 0.0, "of_all": 0.0}
    assert by_gpu[UNPLACED]["requests"] == 1 and by_gpu[UNPLACED]["ttft_met"] == 0.0
    report = summarize(_result(), Slo(ttft_s=1.0, tpot_s=0.05))
    assert report.slo_by_gpu == by_gpu
    assert sum(row["of_all"] for row in by_gpu.values()) == pytest.approx(report.goodput)


def test_seeds_average_each_figure_and_a_missing_type_counts_as_zero():
    a = {"h100": {"requests": 4, "ttft_met": 1.0, "tpot_met": 0.5, "both_met": 0.5, "of_all": 0.4}}
    b = {
        "h100": {"requests": 2, "ttft_met": 0.5, "tpot_met": 0.5, "both_met": 0.0, "of_all": 0.0},
        "l4": {"requests": 2, "ttft_met": 1.0, "tpot_met": 1.0, "both_met": 1.0, "of_all": 0.5},
    }
    mean = mean_slo_by_gpu([a, b])
    assert mean["h100"] == {"requests": 3.0, "ttft_met": 0.75, "tpot_met": 0.5, "both_met": 0.25, "of_all": 0.2}
    assert mean["l4"] == {"requests": 1.0, "ttft_met": 0.5, "tpot_met": 0.5, "both_met": 0.5, "of_all": 0.25}
    report = summarize(_result(), Slo(ttft_s=1.0, tpot_s=0.05))
    (merged,) = aggregate([[report], [report]])
    assert list(merged.slo_by_gpu) == list(report.slo_by_gpu)
    for profile, row in report.slo_by_gpu.items():
        assert merged.slo_by_gpu[profile] == pytest.approx(row)


def test_the_table_names_each_type_and_its_shares():
    report = summarize(_result(), Slo(ttft_s=1.0, tpot_s=0.05))
    text = format_table([report], Slo(ttft_s=1.0, tpot_s=0.05))
    assert "where the SLO is met" in text and "TPOT <= 50 ms" in text
    line = text.splitlines()[-1]
    assert line.startswith("p ") and "67%/67%/33% (16.7%)" in line and "100%/0%/0% (0.0%)" in line
    assert format_slo_by_gpu([("p", {})], 1.0, 0.05) == ""


def test_zoo_sim_json_carries_it_beside_the_keys_it_always_had(capsys):
    parser = argparse.ArgumentParser()
    add_sim_args(parser)
    args = parser.parse_args(
        ["--fleet", "small", "--trace", "poisson", "--max-requests", "60", "--policy", "hardware_aware", "--json"]
    )
    assert run_sim(args) == 0
    (policy,) = json.loads(capsys.readouterr().out)["policies"]
    assert {"policy", "ttft_s", "goodput", "ttft_p99_over_p50"} <= set(policy)
    by_gpu = policy["slo_by_gpu"]
    assert sum(row["requests"] for row in by_gpu.values()) == 60
    assert sum(row["of_all"] for row in by_gpu.values()) == pytest.approx(policy["goodput"])
    assert to_jsonable([summarize(_result())], {})["policies"][0]["slo_by_gpu"]["l4"]["requests"] == 2
