from __future__ import annotations

import math

import pytest

from sim.des import NodeResult, RequestRecord, SimResult
from sim.report import Slo, format_table, slo_breaking_load, summarize, to_jsonable


def _result() -> SimResult:
    records = []
    for i in range(100):
        r = RequestRecord(f"r{i}", "c", 0.0, 100, 11, "n", first_token_s=0.1 * (i + 1), num_output_tokens=11)
        r.finish_s = r.first_token_s + 10 * (0.05 if i < 90 else 0.2)
        records.append(r)
    records.append(RequestRecord("lost", "c", 0.0, 100, 11))  # never routed
    node = NodeResult("n", "c", "l4", 1, 10, 5.0, 1, 2, 2, 0, 0.0, 100)
    return SimResult("p", "w", 1.0, records, [node], 20.0, 1.0, 2.0, 0, True)


def test_summary_counts_slo_misses_and_unserved_requests():
    report = summarize(_result(), Slo(ttft_s=5.0, tpot_s=0.1))
    # TTFT <= 5 s: r0..r49; TPOT <= 100 ms: r0..r89; the unrouted one fails
    assert report.goodput == pytest.approx(50 / 101)
    assert report.num_unserved == 1
    assert report.ttft_s[50] == pytest.approx(5.1)
    assert report.ttft_s[99] == pytest.approx(10.0)  # 1 unserved of 101 is < 1%
    assert math.isinf(report.e2e_s[99]) is False and report.ttft_p99_over_p50 == pytest.approx(10.0 / 5.1)
    assert report.utilisation == {"l4": pytest.approx(0.25)}
    assert "goodput" in format_table([report])
    assert to_jsonable([report], {"x": math.inf})["info"]["x"] == "inf"


def test_slo_breaking_load_is_the_first_failing_load():
    points = {"a": [(0.5, 1.0), (0.7, 0.995), (0.9, 0.9)], "b": [(0.5, 1.0), (0.9, 0.999)]}
    assert slo_breaking_load(points) == {"a": 0.9, "b": None}
