"""``zoo bench structured`` (bench/structured_outputs.py) on the smallest batch: every kind's document walks its grammar
to the end (each of its tokens allowed), and the sampler's ratio is to the unconstrained step of the same run."""

from __future__ import annotations

from bench.structured_outputs import KINDS, bench_structured_outputs


def test_every_kind_walks_its_document_and_the_ratio_is_to_the_same_run():
    report = bench_structured_outputs(batch_sizes=(1,), repeats=2, engine=False)
    kinds = {k["kind"]: k for k in report["kinds"]}
    assert set(kinds) == set(KINDS)
    assert all(k["steps"] > 0 and k["compile_ms"] > 0 and k["mask_us_p50"] > 0 for k in kinds.values())
    (sampler,) = report["sampler"]
    assert sampler["rows"] == 1
    assert sampler["torch_over_plain"] == sampler["json_schema_us"] / sampler["plain_us"]
    assert "engine" not in report and "forced_drafts" not in report
