"""Several seeds per policy: jittered replicas of a trace, means and 95% intervals, JSON keys kept."""

from __future__ import annotations

import argparse
import json
import math

import pytest

from sim.cli import add_sim_args, policies_apart, run_sim
from sim.report import PERCENTILES, PolicyReport, aggregate


def _report(policy: str, ttft99: float, goodput: float) -> PolicyReport:
    pct = {p: ttft99 / (100 - p + 1) for p in PERCENTILES}
    return PolicyReport(
        policy=policy, num_requests=10, num_unserved=0, ttft_s={**pct, 99: ttft99}, tpot_s=dict(pct), e2e_s=dict(pct),
        ttft_p99_over_p50=2.0, goodput=goodput, num_preemptions=1, num_swapped_out_blocks=0, num_swapped_in_blocks=0,
        num_recomputed_tokens=0, prefix_cache_hit_rate=0.0, utilisation={"l4": 0.5}, requests_by_gpu={"l4": 10},
        simulated_s=10.0, wall_s=1.0, speedup=10.0,
    )  # fmt: skip


def test_aggregate_gives_means_and_student_t_intervals():
    runs = [[_report("a", x, g)] for x, g in ((1.0, 0.9), (2.0, 0.8), (3.0, 0.7))]
    (a,) = aggregate(runs)
    assert a.seeds == 3 and a.ttft_s[99] == pytest.approx(2.0) and a.goodput == pytest.approx(0.8)
    # sd 1.0, n 3: 4.303 * 1 / sqrt(3)
    assert a.ci95["ttft_s"][99] == pytest.approx(4.303 / math.sqrt(3))
    assert a.ci95["goodput"] == pytest.approx(4.303 * 0.1 / math.sqrt(3))


def test_an_infinite_percentile_stays_infinite():
    (a,) = aggregate([[_report("a", 1.0, 0.9)], [_report("a", math.inf, 0.5)]])
    assert a.ttft_s[99] == math.inf and a.ci95["ttft_s"][99] == math.inf


def test_jittered_replica_keeps_the_requests_and_the_rate(tiny_workload):
    base = tiny_workload(num=200, gap_s=0.1)
    one, again, other = base.jittered(1), base.jittered(1), base.jittered(2)
    assert one == again and one != other
    assert sorted(r.num_prompt_tokens for r in one.requests) == sorted(r.num_prompt_tokens for r in base.requests)
    assert one.rate_req_per_s == pytest.approx(base.rate_req_per_s, rel=0.02)
    assert all(b.arrival_s <= a.arrival_s for a, b in zip(one.requests[1:], one.requests[:-1], strict=True))


def test_zoo_sim_seeds_json_keeps_its_keys_and_adds_intervals(traces_dir, capsys):
    parser = argparse.ArgumentParser()
    add_sim_args(parser)
    args = parser.parse_args(
        ["--fleet", "small", "--trace", "code", "--load", "0.5", "--duration", "4", "--policy", "hardware_aware",
         "--seeds", "2", "--json"]
    )  # fmt: skip
    assert run_sim(args) == 0
    out = json.loads(capsys.readouterr().out)
    (policy,) = out["policies"]
    assert policy["policy"] == "hardware_aware" and set(policy["ttft_s"]) == {"50", "90", "99"}
    assert {"goodput", "ttft_p99_over_p50", "ci95", "seeds"} <= set(policy) and policy["seeds"] == 2
    assert set(policy["ci95"]["ttft_s"]) == {"50", "90", "99"} and out["info"]["seeds"] == [0, 1]


def test_tune_and_eval_splits_partition_a_trace(tiny_workload):
    base = tiny_workload(num=100, gap_s=0.1)
    tune, rest = base.split("tune"), base.split("eval")
    assert len(tune.requests) == 20 and len(rest.requests) == 80 and base.split("all") is base
    assert tune.requests[0].arrival_s == 0.0 and rest.requests[0].arrival_s == 0.0
    with pytest.raises(ValueError, match="split"):
        base.split("test")


def _strip_timing(value):
    if isinstance(value, dict):
        return {k: _strip_timing(v) for k, v in value.items() if k not in ("wall_s", "speedup")}
    if isinstance(value, list):
        return [_strip_timing(v) for v in value]
    return value


def test_seeds_in_processes_report_what_one_at_a_time_reports(traces_dir, capfd, sim_json_by_jobs):
    """--jobs 2 runs the seeds' runs (a seed and a policy each) in two spawned processes: the same report (timings
    aside) as one at a time, and its log names each seed; a negative --jobs is refused."""
    argv = ["--fleet", "small", "--trace", "code", "--load", "0.9", "--duration", "4", "--policy",
            "hardware_aware,round_robin", "--seeds", "3", "--json"]  # fmt: skip
    outs, err = sim_json_by_jobs(argv)
    assert "[seed 2]" in err and "3 runs at once" not in err and "2 runs at once" in err
    assert _strip_timing(outs[0]) == _strip_timing(outs[1])
    assert [p["policy"] for p in outs[1]["policies"]] == ["hardware_aware", "round_robin"]
    assert run_sim(_parser().parse_args([*argv, "--jobs", "-1"])) == 2
    assert "--jobs" in capfd.readouterr().err


def test_policies_in_processes_report_what_one_at_a_time_reports(traces_dir, sim_json_by_jobs):
    """One seed, several policies, --jobs 2: each policy's run in a process of its own, the same report (timings
    aside) in the same policy order; where the runs share something in this process (a plot, the --pd-split run,
    spec pairs, LoRA adapters) they stay in it."""
    argv = ["--fleet", "small", "--trace", "code", "--load", "0.9", "--duration", "4", "--policy",
            "round_robin,hardware_aware,least_requests", "--json"]  # fmt: skip
    outs, err = sim_json_by_jobs(argv)
    assert "3 policies, 2 at once" in err and "[seed 0]" in err
    assert _strip_timing(outs[0]) == _strip_timing(outs[1])
    assert [p["policy"] for p in outs[1]["policies"]] == ["round_robin", "hardware_aware", "least_requests"]
    parser = _parser()
    for extra in (["--pd-split", "auto"], ["--adapters", "2"]):
        assert not policies_apart(parser.parse_args([*argv, *extra]), ["round_robin", "hardware_aware"])
    assert not policies_apart(parser.parse_args(argv), ["hardware_aware"])
    assert policies_apart(parser.parse_args(argv), ["round_robin", "hardware_aware"])


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    add_sim_args(parser)
    return parser
